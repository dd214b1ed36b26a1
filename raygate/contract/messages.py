"""The API's messages filled by field name: a contract struct from any object that has its
fields (``from_attributes``: the server's policy results), and the one mapping between the
contract's structs and their ``raygate.v1`` protobuf messages, both directions.

A struct's fields are declared once, in the contract; the proto declares the same fields
with the same names. The mapping is read off both declarations (``msgspec.inspect`` and
the message descriptor) once per pair of types:

- a struct field the message lacks is left out (``apiVersion`` and ``kind``: JSON only)
  and takes its default when read back; a message field the struct lacks is refused;
- a nested or repeated message is a nested struct or a list of them; absent (unset) is
  None when the struct field may be None, else the message's empty value;
- ``google.protobuf.Timestamp`` is a UTC ``datetime`` of whole seconds; unset is None;
- an enum is the string the JSON spells (``ENUM_SPELLING``); a value one side does not
  know is 0 (``…_UNSPECIFIED``) in a message and ``"Unknown"`` in a struct;
- a scalar with presence (``optional``) is None when unset; one without is None when it
  holds its default (an empty string) and the struct field may be None;
- map fields: none of raygate.v1's messages has one, and a pair with one is refused.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.timestamp_pb2 import Timestamp

__all__ = ["ENUM_SPELLING", "UNKNOWN", "enum_names", "from_attributes", "from_proto",
           "to_proto"]

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)
M = TypeVar("M", bound=Message)

UNKNOWN = "Unknown"
"""An enum value a struct reads from a message and does not know (or the zero value)."""


def _pascal(name: str) -> str:
    return "".join(word.capitalize() for word in name.split("_"))


ENUM_SPELLING: Mapping[str, Callable[[str], str]] = {
    "raygate.v1.Pod.State": _pascal,  # WAITING_FOR_CAPACITY is "WaitingForCapacity"
    "raygate.v1.PodAdvice.Action": str.lower,  # KEEP is "keep"
    "raygate.v1.GroupAdvice.Action": str.lower,  # PROCEED is "proceed"
}
"""How the JSON spells each proto enum's values: as the API documents them, where the
protos spell them as buf style asks. An enum not listed keeps the proto's names."""


def from_attributes(value: object, type: type[T]) -> T:
    """``value``'s attributes of the same names as ``type``'s fields (a struct, or a list of
    them), nested objects alike: ``msgspec.convert`` by attribute. Lax where the sides
    differ in kind only: a ``str`` enum is its string, and seconds since the epoch (an
    int: the policy gives whole seconds, as Kubernetes writes times) a UTC datetime."""
    made: T = msgspec.convert(value, type=type, from_attributes=True, strict=False)
    return made


def to_proto(value: msgspec.Struct, message: type[M]) -> M:
    """The ``message`` of the struct ``value``."""
    made: M = _encoder(type(value), message)(value)
    return made


def from_proto(message: Message, struct: type[S]) -> S:
    """The ``struct`` of ``message``."""
    made: S = _decoder(struct, type(message))(message)
    return made


def enum_names(enum: EnumDescriptor) -> tuple[str, ...]:
    """The JSON spellings of ``enum``'s values but the zero one (…_UNSPECIFIED), in
    number order."""
    return tuple(_names(enum).values())


# --- the mapping, read off both declarations once per pair -------------------------------

Pair = tuple[type[msgspec.Struct], type[Message]]
_ENCODERS: dict[Pair, Callable[[Any], Any]] = {}
_DECODERS: dict[Pair, Callable[[Any], Any]] = {}


@functools.cache
def _names(enum: EnumDescriptor) -> dict[int, str]:
    spell = ENUM_SPELLING.get(enum.full_name, str)
    return {v.number: spell(v.name) for v in sorted(enum.values, key=lambda v: v.number)
            if v.number != 0}


@functools.cache
def _numbers(enum: EnumDescriptor) -> dict[str, int]:
    return {name: number for number, name in _names(enum).items()}


def _fields(struct: type[msgspec.Struct]) -> tuple[msgspec.inspect.Field, ...]:
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    return info.fields


def _optional(kind: msgspec.inspect.Type) -> bool:
    return isinstance(kind, msgspec.inspect.UnionType) and kind.includes_none


def _struct_of(kind: msgspec.inspect.Type) -> type[msgspec.Struct]:
    """The struct a field holds: alone, or None, or a list of them."""
    if isinstance(kind, msgspec.inspect.UnionType):
        (kind,) = [t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)]
    if isinstance(kind, msgspec.inspect.ListType):
        kind = kind.item_type
    if not isinstance(kind, msgspec.inspect.StructType):
        raise TypeError(f"a message field maps to a struct, not {kind}")
    return kind.cls


def _pairs(struct: type[msgspec.Struct], message: type[Message],
           ) -> list[tuple[msgspec.inspect.Field, FieldDescriptor]]:
    """The struct's fields the message has, each with its proto field."""
    descriptor: Any = message.DESCRIPTOR  # its stubs say: either protobuf implementation's
    names = {f.name for f in _fields(struct)}
    if extra := [name for name in descriptor.fields_by_name if name not in names]:
        raise TypeError(f"{descriptor.full_name} has fields {struct.__name__} lacks: {extra}")
    pairs = []
    for field in _fields(struct):
        proto = descriptor.fields_by_name.get(field.name)
        if proto is None and field.required:
            raise TypeError(f"{struct.__name__}.{field.name} is not in {descriptor.full_name}")
        if proto is not None:
            if proto.message_type is not None and proto.message_type.GetOptions().map_entry:
                raise TypeError(f"{descriptor.full_name}.{proto.name}: a map field")
            pairs.append((field, proto))
    return pairs


def _is_timestamp(proto: FieldDescriptor) -> bool:
    return proto.message_type is Timestamp.DESCRIPTOR


def _encoder(struct: type[msgspec.Struct], message: type[Message]) -> Callable[[Any], Any]:
    made = _ENCODERS.get((struct, message))
    if made is not None:
        return made
    pairs = _pairs(struct, message)
    kept = {field.name for field, _ in pairs}
    dropped = [field.name for field in _fields(struct) if field.name not in kept]
    steps = [(field.name, step) for field, proto in pairs
             if (step := _to_field(field, proto)) is not None]
    asdict = msgspec.structs.asdict

    # The struct's fields in one call, the few that need it converted: as fast as a
    # converter written out field by field (a reply may hold thousands of nodes). None
    # stays None: the message's default, or unset.
    def encode(value: Any) -> Any:
        given = asdict(value)
        for name in dropped:
            del given[name]
        for name, step in steps:
            if (held := given[name]) is not None:
                given[name] = step(held)
        return message(**given)

    _ENCODERS[struct, message] = encode
    return encode


def _timestamp(value: datetime) -> Timestamp:
    return Timestamp(seconds=int(value.timestamp()))


def _to_field(field: msgspec.inspect.Field, proto: FieldDescriptor,
              ) -> Callable[[Any], Any] | None:
    """How a struct field's value becomes the message's; None: as it is (a scalar: the
    message's constructor takes it)."""
    one: Callable[[Any], Any] | None = None
    if _is_timestamp(proto):
        one = _timestamp
    elif proto.message_type is not None:
        one = _encoder(_struct_of(field.type), GetMessageClass(proto.message_type))
    elif proto.enum_type is not None:
        numbers = _numbers(proto.enum_type)

        def one(value: str) -> int:
            return numbers.get(value, 0)
    if one is None or not proto.is_repeated:
        return one
    each = one
    return lambda values: [each(value) for value in values]


def _decoder(struct: type[msgspec.Struct], message: type[Message]) -> Callable[[Any], Any]:
    made = _DECODERS.get((struct, message))
    if made is not None:
        return made
    pairs = _pairs(struct, message)
    names = tuple(field.name for field, _ in pairs)
    getter = operator.attrgetter(*names)
    read = getter if len(names) > 1 else (lambda value: (getter(value),))
    # Unset (a message, an optional scalar) or holding its default (a scalar without
    # presence) is None where the struct field may be None.
    unset = [(i, proto.name) for i, (field, proto) in enumerate(pairs)
             if _optional(field.type) and proto.has_presence and not proto.is_repeated]
    default = [(i, proto.default_value) for i, (field, proto) in enumerate(pairs)
               if _optional(field.type) and not proto.has_presence and not proto.is_repeated]
    steps = [(i, step) for i, (field, proto) in enumerate(pairs)
             if (step := _from_field(field, proto)) is not None]
    # Positionally when the message has every field, in order: faster than by name.
    positional = [(p.name, p.kind) for p in inspect.signature(struct).parameters.values()] == [
        (name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names]

    def decode(value: Any) -> Any:
        values = list(read(value))
        for i, name in unset:
            if not value.HasField(name):
                values[i] = None
        for i, empty in default:
            if values[i] == empty:
                values[i] = None
        for i, step in steps:
            if values[i] is not None:
                values[i] = step(values[i])
        return struct(*values) if positional else struct(**dict(zip(names, values, strict=True)))

    _DECODERS[struct, message] = decode
    return decode


def _from_field(field: msgspec.inspect.Field, proto: FieldDescriptor,
                ) -> Callable[[Any], Any] | None:
    """How the message's value of a field becomes the struct's; None: as it is."""
    one = _from_item(field, proto)
    if not proto.is_repeated:
        return one
    if one is None:
        return list
    each = one
    return lambda values: [each(value) for value in values]


def _from_item(field: msgspec.inspect.Field, proto: FieldDescriptor,
               ) -> Callable[[Any], Any] | None:
    """How one value of the message becomes the struct's; None: as it is."""
    if _is_timestamp(proto):
        return lambda value: value.ToDatetime(UTC)
    if proto.message_type is not None:
        nested: Callable[[Any], Any] = _decoder(_struct_of(field.type),
                                                GetMessageClass(proto.message_type))
        return nested
    if proto.enum_type is not None:
        names = _names(proto.enum_type)
        return lambda number: names.get(number, UNKNOWN)
    return None
