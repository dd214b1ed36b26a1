"""``raygate explain``: why a pod would be placed where it would, node by node.

The same decision ``filter``, ``prioritize`` and ``preempt`` make (``placement.decide``),
spelled out:
each node's class and why, the filter verdict and rule, the score; the pod's role and
why, and the thrash guard's state. Tests hold it to what the extender really answers.
From the admission status of the pod's RayCluster: the pod's admission state, and its
group's scale gates (while they hold, an autoscaler that honours them sends the group's
demand to another group).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from raygate.policy.admission import ScaleGate, admission_status, is_running, whole_seconds
from raygate.policy.classify import gpu_node_reason
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.model import NodeView, PodView
from raygate.policy.native import ANNOTATION_ADMITTED, GATE, LABEL_ROLE, LABEL_RULE
from raygate.policy.placement import Decision, Placement, decide, score, thrash_guard_until

__all__ = ["Explanation", "NodeExplanation", "explain"]


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    name: str
    node_class: str
    """``gpu``, ``cpu`` or ``unknown`` (not in raygate's cache)."""
    class_reason: str
    passes: bool
    rule: str
    """The rule that refused the node, or ``""`` when it passes."""
    reason: str
    score: int | None
    """kube-scheduler's 0..10; None when raygate gives no score (unmanaged pod, unknown
    node)."""


@dataclass(frozen=True, slots=True)
class Explanation:
    pod: str
    verdict: str
    rule: str
    role: str
    """``head``, ``floor``, ``surplus``, or ``""`` for pods raygate does not manage."""
    reason: str
    thrash_guard_until: int | None
    """Whole seconds since the epoch."""
    thrash_guard_active: bool
    nodes: tuple[NodeExplanation, ...]
    """Best first: passing before refused, then by score, then by name."""
    admission_state: str | None = None
    """As the admission status says (``WaitingForCapacity``, …), ``Running``, or None
    when the RayCluster is unknown or the pod is not a Ray pod."""
    admission_reason: str | None = None
    native_placement: str | None = None
    """raygate's rule in native form on the pod (``_native``), or None."""
    scale_gates: tuple[ScaleGate, ...] = ()
    """The scale gates of the pod's group, as its RayCluster's admission status shows
    them (``admission.gates``); () for the head, a pod that is no Ray pod, or a
    RayCluster raygate does not know."""


def _node(name: str, view_node: NodeView | None, decision: Decision,
          config: PolicyConfig, dra_gpu_nodes: Mapping[str, str]) -> NodeExplanation:
    if view_node is None:
        reason = "raygate does not know this node" + (
            "; preempt drops it: it cannot tell it is no GPU node"
            if decision.refuses_gpu_nodes else "")
        return NodeExplanation(name, "unknown", "not in raygate's cache: passes (fail open)",
                               True, "", reason, None)
    why_gpu = gpu_node_reason(view_node, config, dra_gpu_nodes)
    is_gpu = why_gpu is not None
    node_class, class_reason = ("gpu", why_gpu) if why_gpu else (
        "cpu", "no GPU resource allocatable, no GPU label and no GPU ResourceSlice")
    managed = decision.placement is not Placement.UNMANAGED
    refusal = decision.refusal(is_gpu)
    return NodeExplanation(
        name, node_class, class_reason or "",
        passes=refusal is None,
        rule=decision.rule.value if refusal is not None else "",
        # preempt drops the nodes filter refuses: evicting there frees room for nothing.
        reason=f"{refusal}; preempt drops it too" if refusal is not None else (
            "passes" if managed else f"passes: {decision.reason}"),
        score=score(is_gpu) if managed else None,
    )


def explain(
    pod: PodView,
    view: ClusterView,
    config: PolicyConfig,
    now: float,
    node_names: Sequence[str],
) -> Explanation:
    decision = decide(pod, view, config, now)
    until = thrash_guard_until(pod, view, config) if pod.is_ray else None
    state, why, gates = _admission(pod, view, config, now)
    nodes = sorted(
        (_node(name, view.node(name), decision, config, view.dra_gpu_nodes)
         for name in node_names),
        key=lambda n: (not n.passes, -(n.score if n.score is not None else -1), n.name),
    )
    return Explanation(
        pod=pod.ref,
        verdict=decision.placement.value,
        rule=decision.rule.value,
        role=decision.role.value if decision.role is not None else "",
        reason=decision.reason,
        thrash_guard_until=whole_seconds(until),
        thrash_guard_active=until is not None and now < until,
        nodes=tuple(nodes),
        admission_state=state or None,
        admission_reason=why or None,
        native_placement=_native(pod) or None,
        scale_gates=gates,
    )


def _native(pod: PodView) -> str:
    """What raygate's native placement did to the pod, read from the pod itself."""
    if GATE in pod.scheduling_gates:
        return (f"held by raygate's scheduling gate {GATE}: raygate writes its rule into "
                "the pod, then releases it")
    role, rule = pod.labels.get(LABEL_ROLE), pod.labels.get(LABEL_RULE)
    if role is None and rule is None:
        return ""
    how = ("decided when it was created (raygate's webhook)"
           if ANNOTATION_ADMITTED in pod.annotations else "released from raygate's gate")
    return (f"{how} as {role or '?'} by rule {rule or '?'}, once for its life (its node "
            "affinity holds raygate's rule for every scheduler and node autoscaler)")


def _admission(pod: PodView, view: ClusterView, config: PolicyConfig,
               now: float) -> tuple[str, str, tuple[ScaleGate, ...]]:
    """The pod's admission state and why, and its group's scale gates."""
    if not pod.is_ray:
        return "", "", ()
    cluster = view.raycluster(pod.namespace, pod.ray_cluster)
    if cluster is None:
        return "", f"RayCluster {pod.namespace}/{pod.ray_cluster} is unknown to raygate", ()
    status = admission_status(cluster, view, config, now).status
    group = pod.group_key.group
    gates = next((g.scale_gates for g in status.groups if g.name == group), ())
    for listed in status.pods:
        if listed.uid == pod.uid:
            return listed.state.value, listed.reason, gates
    if is_running(pod):
        return "Running", "running and ready", gates
    if view.pod(pod.uid) is None:
        return "", "not in raygate's cache", gates
    return "", "not in the admission status (finished or being deleted)", gates
