"""The two things the scale-gate writer reads off the API server's JSON, kept apart from its
loop: the key of a ``scaleGate`` entry in the served RayCluster schema, and the JSON Patch
that brings raygate's own entries in a RayCluster to what the policy wants.

Why a JSON Patch and not a server-side apply: KubeRay's CRD declares ``workerGroupSpecs``
an atomic list (no ``x-kubernetes-list-type``), so an apply of one group's gates is refused
as a conflict with KubeRay's and the autoscaler's ownership of the list (409; forced, a 422
for the missing required fields), and an apply of the whole list would own it and put back
what raygate last saw over everyone else's writes. The patch touches only raygate's entries,
each tested where it stands: the worker group by ``groupName`` at its index, an entry by its
key at its index, the RayCluster by its UID, and (where raygate creates ``scaleStrategy`` or
its ``scaleGate`` list) by its ``resourceVersion``, so that a concurrent writer's fresh list
is never replaced. A failed test answers 422, a stale resourceVersion 409: read again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from raygate.contract.scale_gate import is_raygates

__all__ = ["gate_key", "gate_ops"]

Ops = list[dict[str, Any]]


def _object(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _raycluster_schema(openapi: Mapping[str, Any]) -> Mapping[str, Any]:
    schemas = _object(_object(openapi.get("components")).get("schemas"))
    for schema in schemas.values():
        kinds = _object(schema).get("x-kubernetes-group-version-kind")
        if isinstance(kinds, list) and any(
                _object(k).get("kind") == "RayCluster" and _object(k).get("group") == "ray.io"
                for k in kinds):
            return _object(schema)
    return {}


def gate_key(openapi: Mapping[str, Any]) -> str | None:
    """The map key of ``workerGroupSpecs[].scaleStrategy.scaleGate`` entries in the
    OpenAPI v3 document of ``ray.io/v1`` (``x-kubernetes-list-map-keys``, one key); None
    where the served schema has no such field, or not as a list keyed by one field."""
    node: Mapping[str, Any] = _raycluster_schema(openapi)
    for step in ("spec", "workerGroupSpecs", "*", "scaleStrategy", "scaleGate"):
        node = _object(node.get("items")) if step == "*" else _object(
            _object(node.get("properties")).get(step))
    keys = node.get("x-kubernetes-list-map-keys")
    if node.get("x-kubernetes-list-type") != "map" or not isinstance(keys, list):
        return None
    return keys[0] if len(keys) == 1 and isinstance(keys[0], str) else None


def _entries(group: Mapping[str, Any]) -> list[Any] | None:
    gates = _object(group.get("scaleStrategy")).get("scaleGate")
    return gates if isinstance(gates, list) else None


def own_gates(group: Mapping[str, Any], key: str) -> dict[str, int]:
    """raygate's entries (named under ``raygate.io/``) of a worker group: name -> index."""
    found: dict[str, int] = {}
    for j, entry in enumerate(_entries(group) or ()):
        name = _object(entry).get(key)
        if isinstance(name, str) and is_raygates(name):
            found.setdefault(name, j)
    return found


def _group_ops(i: int, group: Mapping[str, Any], key: str, want: Collection[str]
               ) -> tuple[Ops, bool]:
    """One worker group's operations, and whether they create the list (or its parent)."""
    base = f"/spec/workerGroupSpecs/{i}/scaleStrategy"
    own = own_gates(group, key)
    ops: Ops = []
    # Highest index first: each removal leaves the indices below it where they were read.
    for j, name in sorted(((j, n) for n, j in own.items() if n not in want), reverse=True):
        ops += [{"op": "test", "path": f"{base}/scaleGate/{j}/{key}", "value": name},
                {"op": "remove", "path": f"{base}/scaleGate/{j}"}]
    adds = [{key: name} for name in sorted(set(want) - own.keys())]
    creates = False
    if adds and not isinstance(group.get("scaleStrategy"), Mapping):
        ops.append({"op": "add", "path": base, "value": {"scaleGate": adds}})
        creates = True
    elif adds and _entries(group) is None:
        ops.append({"op": "add", "path": f"{base}/scaleGate", "value": adds})
        creates = True
    else:
        ops += [{"op": "add", "path": f"{base}/scaleGate/-", "value": a} for a in adds]
    return ops, creates


def gate_ops(cluster: Mapping[str, Any], key: str, desired: Mapping[str, Collection[str]]
             ) -> Ops:
    """The JSON Patch that makes raygate's gates in ``cluster`` (a RayCluster as read)
    those of ``desired`` (worker group -> gate names; a group not in it is left alone),
    others' entries untouched; [] when they are already."""
    meta = _object(cluster.get("metadata"))
    groups = _object(cluster.get("spec")).get("workerGroupSpecs")
    ops: Ops = []
    creates = False
    for i, group in enumerate(groups if isinstance(groups, list) else ()):
        name = _object(group).get("groupName")
        if not isinstance(name, str) or name not in desired:
            continue
        group_ops, created = _group_ops(i, _object(group), key, desired[name])
        if group_ops:
            ops += [{"op": "test", "path": f"/spec/workerGroupSpecs/{i}/groupName",
                     "value": name}, *group_ops]
            creates = creates or created
    if not ops:
        return []
    head = [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid", "")}]
    if creates:
        head.append({"op": "test", "path": "/metadata/resourceVersion",
                     "value": meta.get("resourceVersion", "")})
    return head + ops
