"""kube-scheduler's HTTP extender protocol (``k8s.io/kube-scheduler/extender/v1``).

The Go types carry no JSON tags, so keys are the Go field names in PascalCase and every
key is always present (nil pointers, maps and slices as ``null``). Go's decoder matches
keys case-insensitively; kube-scheduler always *sends* PascalCase, so the typed decoders
below read PascalCase directly and ``decode_*`` falls back to a case-insensitive pass only
when a key is missing. The embedded Pod and Node objects keep Kubernetes' camelCase.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from raygate.server.wire.kube import Pod

__all__ = [
    "FilterArgs",
    "FilterResult",
    "MetaPod",
    "MetaVictims",
    "PreemptArgs",
    "PreemptResult",
    "decode_filter_args",
    "decode_pod",
    "decode_preempt_args",
]

UNSET: Any = msgspec.UNSET


class _Envelope(msgspec.Struct, rename="pascal"):
    """Go field names as keys: the extender types carry no JSON tags."""


class NodeListRaw(msgspec.Struct):
    """A ``v1.NodeList`` whose items are kept as raw bytes: passing nodes are echoed back
    byte for byte instead of being rebuilt and re-encoded."""

    items: list[msgspec.Raw] | None = None


class FilterArgs(_Envelope):
    """``ExtenderArgs``: the request of both filter and prioritize. The Pod is kept as its
    JSON text (``decode_pod`` reads it): the scheduler sends the same pod to filter,
    then prioritize, then on every retry, and the extender converts each text once."""

    pod: msgspec.Raw | msgspec.UnsetType = UNSET
    nodes: NodeListRaw | msgspec.UnsetType | None = UNSET
    node_names: list[str] | msgspec.UnsetType | None = UNSET


class FilterResult(_Envelope):
    """``ExtenderFilterResult``. Field order follows the Go struct."""

    nodes: Any = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] = msgspec.field(default_factory=dict)
    failed_and_unresolvable_nodes: dict[str, str] = msgspec.field(default_factory=dict)
    error: str = ""


class NodeListOut(msgspec.Struct):
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


class HostPriority(_Envelope):
    host: str
    score: int


class MetaPod(_Envelope, rename={"uid": "UID"}):
    uid: str = ""


class MetaVictims(_Envelope, rename={"pods": "Pods", "num_pdb_violations": "NumPDBViolations"}):
    pods: list[MetaPod] | None = None
    num_pdb_violations: int = 0


class Victims(_Envelope, rename={"pods": "Pods", "num_pdb_violations": "NumPDBViolations"}):
    pods: list[Pod] | None = None
    num_pdb_violations: int = 0


class PreemptArgs(_Envelope):
    """``ExtenderPreemptionArgs``: full victims when not node-cache-capable, UIDs when it is."""

    pod: Pod | msgspec.UnsetType | None = UNSET
    node_name_to_victims: dict[str, Victims | None] | msgspec.UnsetType | None = UNSET
    node_name_to_meta_victims: dict[str, MetaVictims | None] | msgspec.UnsetType | None = UNSET


class PreemptResult(_Envelope):
    """``ExtenderPreemptionResult``: always the Meta (UID) form, whatever the request used.
    It has no ``Error`` field upstream."""

    node_name_to_meta_victims: dict[str, MetaVictims] = msgspec.field(default_factory=dict)


_FILTER = msgspec.json.Decoder(FilterArgs)
_PREEMPT = msgspec.json.Decoder(PreemptArgs)
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])

S = TypeVar("S", bound=msgspec.Struct)


def _case_insensitive(body: bytes, cls: type[S], decoder: msgspec.json.Decoder[S]) -> S:
    """Decode ``body`` into ``cls`` matching keys without regard to case, as Go does.

    The slow path, taken only when the PascalCase decode left a key unset: the top-level
    object is split into raw values, each key is mapped to its Go name by lower-casing,
    and the object is rebuilt under the canonical keys (the last duplicate wins, as in
    Go).
    """
    raw = _OBJECT.decode(body)
    canonical = {f.encode_name.lower(): f.encode_name for f in msgspec.structs.fields(cls)}
    rebuilt: dict[str, msgspec.Raw] = {}
    for key, value in raw.items():
        name = canonical.get(key.lower())
        if name is not None:
            rebuilt[name] = value
    return decoder.decode(msgspec.json.encode(rebuilt))


def decode_filter_args(body: bytes) -> FilterArgs:
    args = _FILTER.decode(body)
    if args.pod is UNSET or args.nodes is UNSET or args.node_names is UNSET:
        args = _case_insensitive(body, FilterArgs, _FILTER)
    return args


def decode_preempt_args(body: bytes) -> PreemptArgs:
    args = _PREEMPT.decode(body)
    if (args.pod is UNSET or args.node_name_to_victims is UNSET
            or args.node_name_to_meta_victims is UNSET):
        args = _case_insensitive(body, PreemptArgs, _PREEMPT)
    return args


_POD = msgspec.json.Decoder(Pod)


def decode_pod(raw: bytes) -> Pod:
    return _POD.decode(raw)

