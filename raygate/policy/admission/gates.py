"""The scale gates raygate asks KubeRay to carry on a worker group
(``workerGroupSpecs[].scaleStrategy.scaleGate``, kuberay#5094): one per reason, from the
admission status, while waiting cannot bring the group capacity. An autoscaler that honours
them stops growing a gated group and moves the demand to another one at once, instead of
waiting out its allocation timeout.

``SCALE_GATE_RULES`` is the table: a gate's name (under ``raygate.io/``, saying why), when
it applies to a group, the reason in words (logs, the admission status), and the pods
behind it (their earliest ``since`` is the gate's). A gate is never raygate's for a wait
another controller decides: Kueue's quota (it writes its own gates) and a gang's admission
are left out, whatever the group's scale-up decision says. The head group has none (it is
no worker group).

``group_scale_gates`` is what the admission status shows of a group: the gates raygate
wants and the entries on the RayCluster, whoever wrote them. Here, inside the admission
package, because the status carries them; ``raygate.policy.scale_gates`` is the writer's
view of the same table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from raygate.contract.scale_gate import PREFIX, gate_key, is_raygates
from raygate.policy.admission.groups import GroupStatus
from raygate.policy.admission.pods import SCALE_UP_HELD, PodStatus
from raygate.policy.admission.states import (
    GATE_OTHER,
    GATE_RAYGATE,
    PENDING_STATES,
    PodState,
    ScaleGate,
)
from raygate.policy.classify import HEAD_GROUP

__all__ = ["CANNOT_FIT", "FOREIGN", "NO_NODE_COMING", "ONLY_GPU_ROOM",
           "SCALE_GATE_RULES", "STALE", "THRASH_GUARD", "ScaleGateRule", "group_scale_gates"]

NO_NODE_COMING = PREFIX + "no-node-coming"
ONLY_GPU_ROOM = PREFIX + "only-gpu-room"
THRASH_GUARD = PREFIX + "thrash-guard"
CANNOT_FIT = PREFIX + "scale-up-cannot-fit"

FOREIGN = "set by another controller"
"""The reason shown for another writer's gate: its entry says no more than its name."""
STALE = "no reason for it holds now: raygate removes it"
"""The reason shown for a gate of raygate's on the RayCluster that it no longer wants."""


@dataclass(frozen=True, slots=True)
class _Group:
    status: GroupStatus
    pods: Sequence[PodStatus]
    """The group's pods not running (``AdmissionStatus.pods``)."""

    def first(self, applies: Callable[[PodStatus], bool]) -> PodStatus | None:
        return next((p for p in self.pods if applies(p)), None)

    def every(self, applies: Callable[[PodStatus], bool]) -> list[PodStatus]:
        return [p for p in self.pods if applies(p)]


def _gpu_room_only(pod: PodStatus) -> bool:
    # Decided where the nodes are known (``admission.status``, ``room.GpuRoom``): the same
    # fit whether raygate's rule is in the pod or the scheduler extender asks it.
    return bool(pod.gpu_room)


def _no_node(pod: PodStatus) -> bool:
    return pod.state is PodState.NO_NODE_COMING


def _held(pod: PodStatus) -> bool:
    return pod.rule == SCALE_UP_HELD


def _preempted_or_pending(pod: PodStatus) -> bool:
    return pod.state is PodState.PREEMPTED or pod.state in PENDING_STATES


def _said(pod: PodStatus | None) -> str:
    return "" if pod is None else f"pod {pod.name}: {pod.reason}"


def _room_said(pod: PodStatus | None) -> str:
    return "" if pod is None else f"pod {pod.name}: {pod.gpu_room}"


@dataclass(frozen=True, slots=True)
class ScaleGateRule:
    """One row: the gate's name, whether a group gets it, why in words, the pods behind
    it (whose earliest ``since`` is when its reason began)."""

    gate: str
    applies: Callable[[_Group], bool]
    reason: Callable[[_Group], str]
    causes: Callable[[_Group], Sequence[PodStatus]]


def _pod_rule(gate: str, applies: Callable[[PodStatus], bool],
              said: Callable[[PodStatus | None], str] = _said) -> ScaleGateRule:
    """A gate a pod of the group gives: the first such pod says why."""
    return ScaleGateRule(gate, lambda g: g.first(applies) is not None,
                         lambda g: said(g.first(applies)), lambda g: g.every(applies))


SCALE_GATE_RULES: tuple[ScaleGateRule, ...] = (
    # The node autoscaler (Karpenter, Cluster Autoscaler) said no node comes for a pod of
    # this template: none comes for the next one either.
    _pod_rule(NO_NODE_COMING, _no_node),
    # A CPU-only group whose pods wait while only GPU nodes have room, which raygate keeps
    # for GPU work: more of them would wait too. Not while the thrash guard keeps them off
    # (its own gate below).
    _pod_rule(ONLY_GPU_ROOM, _gpu_room_only, _room_said),
    # The group lost pods to scheduler preemption inside the thrash-guard window and pods
    # still wait: more would be refused GPU nodes, or preempted again. Behind it: the
    # preempted pods still listed and the pending ones.
    ScaleGateRule(
        THRASH_GUARD,
        lambda g: g.status.preempted > 0 and g.status.pending > 0,
        lambda g: (f"{g.status.preempted} pod(s) preempted inside the thrash-guard window "
                   f"and {g.status.pending} pending"),
        lambda g: g.every(_preempted_or_pending)),
    # An all-or-nothing scale-up held at raygate's gate: held only where no node autoscaler
    # runs and the whole batch does not fit the nodes there are (``policy.scale_up``).
    _pod_rule(CANNOT_FIT, _held),
)


def _wanted(status: GroupStatus, pods: Iterable[PodStatus]) -> list[ScaleGate]:
    if status.name == HEAD_GROUP:
        return []
    group = _Group(status, tuple(pods))
    return [ScaleGate(rule.gate, GATE_RAYGATE, rule.reason(group),
                      min((p.since for p in rule.causes(group) if p.since is not None),
                          default=None), wanted=True, present=False)
            for rule in SCALE_GATE_RULES if rule.applies(group)]


def group_scale_gates(status: GroupStatus, pods: Iterable[PodStatus],
                      entries: Sequence[Mapping[str, str]], *, writing: bool = True,
                      ) -> tuple[ScaleGate, ...]:
    """A group's gates as the admission status shows them: those raygate wants (none
    when ``writing`` is off: ``policy.scaleGates``), each marked present when on the
    RayCluster, then the RayCluster's other ``entries`` in their order: raygate's it no
    longer wants (``STALE``) and other writers' (``FOREIGN``)."""
    on_cluster = [name for name in (gate_key(entry)[1] for entry in entries) if name]
    wanted = _wanted(status, pods) if writing else []
    names = {gate.name for gate in wanted}
    shown = [ScaleGate(g.name, g.writer, g.reason, g.since, wanted=True,
                       present=g.name in on_cluster) for g in wanted]
    for name in dict.fromkeys(on_cluster):
        if name not in names:
            ours = is_raygates(name)
            shown.append(ScaleGate(name, GATE_RAYGATE if ours else GATE_OTHER,
                                   STALE if ours else FOREIGN, None, wanted=False,
                                   present=True))
    return tuple(shown)
