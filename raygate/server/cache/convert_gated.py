"""What a pod keeps while raygate's placement gate holds it: the shape of its node affinity
(the release patch adds to what is there); and while it is held or an unbound Ray pod,
where it may go (whether a held all-or-nothing scale-up fits the nodes,
``raygate.policy.scale_up``; whether only GPU nodes have room for a waiting one,
``raygate.policy.room``). No other pod keeps either: bound pods are most of a cluster, and
need neither. They are read from ``spec.affinity``, ``spec.nodeSelector`` and
``spec.tolerations`` as the API server validated them."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from raygate.policy.constraints import NodeConstraints, NodeRequirement, Toleration
from raygate.policy.model import NodeAffinityShape
from raygate.policy.native import GATE
from raygate.server.wire import kube

__all__ = ["UNGATED", "Gated", "affinity_shape", "gated", "required_terms"]

Gated = tuple[tuple[str, ...], NodeAffinityShape | None, NodeConstraints | None]
UNGATED: Gated = ((), None, None)


def gated(spec: kube.PodSpec, *, unbound_ray: bool = False) -> Gated:
    """The pod's scheduling gates; while raygate's own gate holds it, the shape of its
    node affinity (what the release patch needs); while raygate's gate holds it or it is
    an unbound Ray pod (``unbound_ray``), where it may go (what a held scale-up's fit and
    a waiting pod's room need)."""
    gates = tuple(g.name for g in spec.scheduling_gates or ())
    held = GATE in gates
    if not held and not unbound_ray:
        return gates, None, None
    tolerations = tuple(
        Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "")
        for t in spec.tolerations or ())
    return gates, affinity_shape(spec.affinity) if held else None, NodeConstraints(
        MappingProxyType(dict(spec.node_selector or {})), required_terms(spec.affinity),
        tolerations)


def required_terms(affinity: Any) -> tuple[tuple[NodeRequirement, ...], ...] | None:
    """The required node affinity's terms as decoded (plain JSON values the API server
    validated; anything else reads as absent)."""
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (node.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(node, dict) else None)
    listed = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(listed, list):
        return None
    return tuple(tuple(
        NodeRequirement(str(e.get("key", "")), str(e.get("operator", "")),
                        tuple(str(v) for v in e.get("values") or ()))
        for part in ("matchExpressions", "matchFields")
        for e in (term.get(part) or () if isinstance(term, dict) else ())
        if isinstance(e, dict)) for term in listed)


def affinity_shape(affinity: Any) -> NodeAffinityShape:
    """The shape of ``spec.affinity`` as decoded (plain JSON values: the API server has
    validated it, or validates it after the webhook; anything else reads as absent)."""
    if not isinstance(affinity, dict):
        return NodeAffinityShape()
    node = affinity.get("nodeAffinity")
    if not isinstance(node, dict):
        return NodeAffinityShape(affinity=True)
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = None
    if isinstance(required, dict):
        listed = required.get("nodeSelectorTerms")
        terms = tuple(isinstance(t, dict) and isinstance(t.get("matchExpressions"), list)
                      for t in (listed if isinstance(listed, list) else ()))
    preferred = node.get("preferredDuringSchedulingIgnoredDuringExecution")
    return NodeAffinityShape(affinity=True, node_affinity=True, required_terms=terms,
                             preferred=isinstance(preferred, list))
