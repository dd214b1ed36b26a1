"""What ``raygate uninstall`` reads of a RayCluster and writes back: its worker groups'
``scaleStrategy.scaleGate`` entries (raygate's removed by one JSON Patch) and the
schedulers its pod templates name. Read without KubeRay's schema: any key it lacks is
empty."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from raygate.contract.scale_gate import gate_key, is_raygates
from raygate.server.wire import DECODE_ERRORS, kube

__all__ = ["RAY_SCHEDULER", "RayClusterRead", "decode_cluster",
           "ray_scheduler_templates", "scale_gate_removal"]

RAY_SCHEDULER = "ray-scheduler"
Ops = list[dict[str, Any]]


class _Camel(msgspec.Struct, rename="camel", omit_defaults=True):
    """The Kubernetes JSON spelling (camelCase) for the structs below."""


class _TemplateSpec(_Camel):
    scheduler_name: str = ""


class _Template(_Camel):
    spec: _TemplateSpec = msgspec.field(default_factory=_TemplateSpec)


class _ScaleStrategy(_Camel):
    scale_gate: list[Any] | None = None


class _Group(_Camel):
    group_name: str = ""
    template: _Template = msgspec.field(default_factory=_Template)
    scale_strategy: _ScaleStrategy | None = None


class _Head(_Camel):
    template: _Template = msgspec.field(default_factory=_Template)


class _Spec(_Camel):
    head_group_spec: _Head = msgspec.field(default_factory=_Head)
    worker_group_specs: list[_Group] | None = None


class RayClusterRead(_Camel):
    metadata: kube.ObjectMeta = msgspec.field(default_factory=kube.ObjectMeta)
    spec: _Spec = msgspec.field(default_factory=_Spec)


def scale_gate_removal(uid: str, groups: Sequence[Sequence[object] | None]) -> Ops:
    """The JSON Patch that removes raygate's entries (keyed ``raygate.io/...``) from each
    worker group's ``scaleStrategy.scaleGate`` (``groups[i]``: group i's entries as read,
    None where it has none), each tested by its key, the RayCluster by its UID; [] when
    there is none to remove. A group's entries go last first, so that each index still
    points where it was read."""
    ops: Ops = []
    for i, entries in enumerate(groups):
        for j in reversed(range(len(entries or ()))):
            key, name = gate_key((entries or ())[j])
            if is_raygates(name):
                path = f"/spec/workerGroupSpecs/{i}/scaleStrategy/scaleGate/{j}"
                ops += [{"op": "test", "path": f"{path}/{key}", "value": name},
                        {"op": "remove", "path": path}]
    return [{"op": "test", "path": "/metadata/uid", "value": uid}, *ops] if ops else []


def ray_scheduler_templates(cluster: RayClusterRead) -> list[str]:
    """``head`` and the worker groups whose pod template names ray-scheduler."""
    named = ["head"] if cluster.spec.head_group_spec.template.spec.scheduler_name == (
        RAY_SCHEDULER) else []
    return named + [f"group {g.group_name}" for g in cluster.spec.worker_group_specs or ()
                    if g.template.spec.scheduler_name == RAY_SCHEDULER]


def decode_cluster(raw: bytes | msgspec.Raw) -> RayClusterRead | None:
    try:
        return msgspec.json.decode(raw, type=RayClusterRead)
    except DECODE_ERRORS:
        return None
