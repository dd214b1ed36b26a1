"""The scale gates raygate asks KubeRay to carry on a worker group
(``workerGroupSpecs[].scaleStrategy.scaleGate``, kuberay#5094): one per reason, from the
admission status, while waiting cannot bring the group capacity. An autoscaler that honours
them stops growing a gated group and moves the demand to another one at once, instead of
waiting out its allocation timeout.

``SCALE_GATE_RULES`` is the table: a gate's name (under ``raygate.io/``, saying why), when
it applies to a group, and the reason in words (logs). A gate is never raygate's for a wait
another controller decides: Kueue's quota (it writes its own gates) and a gang's admission
are left out, whatever the group's scale-up decision says. The head group has none (it is
no worker group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from raygate.policy.admission.groups import GroupStatus
from raygate.policy.admission.pods import PodStatus
from raygate.policy.admission.states import PodState
from raygate.policy.admission.status import AdmissionStatus
from raygate.policy.classify import HEAD_GROUP
from raygate.policy.placement import GPU_REFUSAL, Rule

__all__ = ["PREFIX", "SCALE_GATE_RULES", "ScaleGateRule", "cluster_gates", "group_gates"]

PREFIX = "raygate.io/"
"""Every gate raygate writes is named under it; it removes only those."""

NO_NODE_COMING = PREFIX + "no-node-coming"
ONLY_GPU_ROOM = PREFIX + "only-gpu-room"
THRASH_GUARD = PREFIX + "thrash-guard"
CANNOT_FIT = PREFIX + "scale-up-cannot-fit"

_THRASH_REFUSAL = f"raygate: {Rule.THRASH_GUARD.value}{GPU_REFUSAL}"
_NO_ROOM = frozenset({PodState.WAITING_FOR_CAPACITY, PodState.UNSCHEDULABLE})


@dataclass(frozen=True, slots=True)
class _Group:
    status: GroupStatus
    pods: Sequence[PodStatus]
    """The group's pods not running (``AdmissionStatus.pods``)."""

    def first(self, applies: Callable[[PodStatus], bool]) -> PodStatus | None:
        return next((p for p in self.pods if applies(p)), None)


def _gpu_room_only(pod: PodStatus) -> bool:
    # kube-scheduler asks the extender only about the nodes its own filters passed, so a
    # GPU node raygate refused had room: the CPU nodes are full, the GPU nodes raygate's.
    # The thrash guard's refusal is that gate's reason, not this one's.
    return (pod.state in _NO_ROOM and GPU_REFUSAL in pod.reason
            and _THRASH_REFUSAL not in pod.reason)


def _said(pod: PodStatus | None) -> str:
    return "" if pod is None else f"pod {pod.name}: {pod.reason}"


@dataclass(frozen=True, slots=True)
class ScaleGateRule:
    """One row: the gate's name, whether a group gets it, why in words."""

    gate: str
    applies: Callable[[_Group], bool]
    reason: Callable[[_Group], str]


SCALE_GATE_RULES: tuple[ScaleGateRule, ...] = (
    # The node autoscaler (Karpenter, Cluster Autoscaler) said no node comes for a pod of
    # this template: none comes for the next one either.
    ScaleGateRule(
        NO_NODE_COMING,
        lambda g: g.first(lambda p: p.state is PodState.NO_NODE_COMING) is not None,
        lambda g: _said(g.first(lambda p: p.state is PodState.NO_NODE_COMING))),
    # A CPU-only group whose pods wait while only GPU nodes have room, which raygate keeps
    # for GPU work: more of them would wait too.
    ScaleGateRule(
        ONLY_GPU_ROOM,
        lambda g: g.first(_gpu_room_only) is not None,
        lambda g: _said(g.first(_gpu_room_only))),
    # The group lost pods to scheduler preemption inside the thrash-guard window and pods
    # still wait: more would be refused GPU nodes, or preempted again.
    ScaleGateRule(
        THRASH_GUARD,
        lambda g: g.status.preempted > 0 and g.status.pending > 0,
        lambda g: (f"{g.status.preempted} pod(s) preempted inside the thrash-guard window "
                   f"and {g.status.pending} pending")),
    # An all-or-nothing scale-up held at raygate's gate: held only where no node autoscaler
    # runs and the whole batch does not fit the nodes there are (``policy.scale_up``).
    ScaleGateRule(
        CANNOT_FIT,
        lambda g: g.first(lambda p: p.rule == "scale-up-held") is not None,
        lambda g: _said(g.first(lambda p: p.rule == "scale-up-held"))),
)


def group_gates(status: GroupStatus, pods: Iterable[PodStatus]) -> dict[str, str]:
    """The gates a worker group should carry, each with its reason; {} for the head."""
    if status.name == HEAD_GROUP:
        return {}
    group = _Group(status, tuple(pods))
    return {rule.gate: rule.reason(group) for rule in SCALE_GATE_RULES if rule.applies(group)}


def cluster_gates(status: AdmissionStatus) -> Mapping[str, dict[str, str]]:
    """Per worker group of the RayCluster, the gates it should carry (groups with none
    included, as {}): ``group_gates`` of each."""
    by_group: dict[str, list[PodStatus]] = {}
    for pod in status.pods:
        by_group.setdefault(pod.group, []).append(pod)
    return {g.name: group_gates(g, by_group.get(g.name, ())) for g in status.groups
            if g.name != HEAD_GROUP}
