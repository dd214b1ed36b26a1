"""Ray objects against KubeRay's own CRD schemas, one file per supported KubeRay minor
release (``kuberay_crds_1.7.json``, ..., written by ``python -m testbed.kuberay_schema``
from that release's CRDs), the way the API server takes them: nulls of non-nullable fields
pruned, defaults applied, then the ``openAPIV3Schema``, with unknown fields refused as
``kubectl apply`` (strict field validation) refuses them. The CEL rules
(``x-kubernetes-validations``) are not evaluated.

jsonschema is imported on first use: ``raygate serve`` never pays for it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import msgspec

from raygate.policy.lint.manifest import did_you_mean

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["DEFAULT_VERSION", "KINDS", "VERSIONS", "Violation", "has_field", "raycluster_schema",
           "release", "source", "version_of", "violations"]

FieldPath = tuple[str | int, ...]
KINDS = ("RayCluster", "RayJob", "RayService", "RayCronJob")
# The KubeRay minor releases a schema ships for; the default is the current release.
VERSIONS = ("1.6", "1.7")
DEFAULT_VERSION = "1.7"
_PRESERVE = "x-kubernetes-preserve-unknown-fields"


@dataclass(frozen=True, slots=True)
class Violation:
    path: FieldPath
    message: str


@functools.cache
def _document(version: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(f"kuberay_crds_{version}.json").read_bytes()
    document: dict[str, Any] = msgspec.json.decode(text)
    return document


def source(version: str = DEFAULT_VERSION) -> str:
    """Which KubeRay release and files the schemas of ``version`` come from."""
    return str(_document(version)["source"])


def release(version: str = DEFAULT_VERSION) -> str:
    """The exact KubeRay release of ``version``'s schemas: ``v1.7.0``."""
    return source(version).split()[1]


@functools.cache
def _schemas(version: str) -> dict[str, Any]:
    """Each kind's schema with every ``$ref`` replaced by the very schema it names (shared,
    not copied): jsonschema's reference lookups cost a quarter of the validation."""
    definitions = _document(version)["definitions"]

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/definitions/"):
                return resolved(ref.removeprefix("#/definitions/"))
            for key, value in node.items():
                node[key] = inline(value)
        elif isinstance(node, list):
            node[:] = [inline(value) for value in node]
        return node

    @functools.cache
    def resolved(name: str) -> Any:
        return inline(definitions[name])

    return {kind: inline(schema) for kind, schema in _document(version)["kinds"].items()}


def raycluster_schema(version: str) -> dict[str, Any]:
    """KubeRay ``version``'s RayCluster schema (its CRD's ``v1`` ``openAPIV3Schema``)."""
    found: dict[str, Any] = _schemas(version)["RayCluster"]
    return found


def version_of(raycluster: Mapping[str, Any]) -> str | None:
    """The version (of ``VERSIONS``) whose RayCluster schema is ``raycluster``, the ``v1``
    ``openAPIV3Schema`` a cluster's CRD serves; None when no shipped one is."""
    return next((v for v in VERSIONS if _schemas(v)["RayCluster"] == raycluster), None)


def has_field(raycluster: Mapping[str, Any], path: FieldPath) -> bool:
    """Whether a RayCluster schema has the field at ``path`` (list indices skipped): a
    schema that keeps unknown fields has every field below it."""
    node: Any = raycluster
    for part in path:
        if not isinstance(node, Mapping) or node.get(_PRESERVE):
            return isinstance(node, Mapping)
        if isinstance(part, int):
            node = node.get("items")
            continue
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        node = properties.get(part, extra if isinstance(extra, Mapping) else None)
        if node is None:
            return False
    return True


def _prepared(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` as the API server validates it: nulls pruned, defaults filled in."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if item is None and not (sub is not None and sub.get("nullable")):
                continue
            out[key] = item if sub is None else _prepared(item, sub)
        for key, sub in properties.items():
            default = sub.get("default")
            if key not in out and default is not None:
                out[key] = copy.deepcopy(default)
        return out
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        return [_prepared(item, items) for item in value]
    return value


@functools.cache
def _validator(kind: str, version: str) -> Validator:
    from jsonschema import Draft4Validator, ValidationError, validators

    base = Draft4Validator.VALIDATORS

    def properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Iterator[Any]:
        yield from base["properties"](validator, properties, instance, schema)
        if (validator.is_type(instance, "object") and "additionalProperties" not in schema
                and not schema.get(_PRESERVE)):
            for key in instance:
                if key not in properties:
                    yield ValidationError(
                        f"unknown field{did_you_mean(str(key), properties)}", path=(key,))

    def required(validator: Any, required: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "object"):
            for name in required:
                if name not in instance:
                    yield ValidationError("required field is missing", path=(name,))

    def type_(validator: Any, types: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not (instance is None and schema.get("nullable")):
            yield from base["type"](validator, types, instance, schema)

    def pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
        for error in base["pattern"](validator, pattern, instance, schema):
            if schema.get("x-kubernetes-int-or-string"):
                error.message = f"{instance!r} is not a quantity (like 2, 500m or 1.5Gi)"
            yield error

    kubernetes = validators.extend(Draft4Validator, {  # type: ignore[no-untyped-call]
        "properties": properties, "required": required, "type": type_, "pattern": pattern})
    return kubernetes(_schemas(version)[kind])  # type: ignore[no-any-return]


def _order(path: FieldPath) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)


def violations(obj: Mapping[str, Any], kind: str,
               version: str = DEFAULT_VERSION) -> list[Violation]:
    """Every way ``obj`` (a ``kind`` of ``KINDS``) breaks its CRD schema in KubeRay
    ``version`` (of ``VERSIONS``), in path order."""
    instance = _prepared(obj, _schemas(version)[kind])
    found = [Violation(tuple(e.absolute_path), e.message)
             for e in _validator(kind, version).iter_errors(instance)]
    metadata = obj.get("metadata") or {}
    if isinstance(metadata, dict) and not metadata.get("name") and not metadata.get(
            "generateName"):  # the API server's ObjectMeta check, not the CRD's
        found.append(Violation(("metadata", "name"), "required field is missing"))
    if kind == "RayCluster" and "spec" not in obj:  # optional in the CRD; KubeRay needs a head
        found.append(Violation(("spec",), "required field is missing"))
    return sorted(found, key=lambda v: _order(v.path))
