"""Each worker group: its counts and whether scaling it up makes sense
(``SCALE_UP_RULES``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from raygate.policy.admission.gang import GangStatus
from raygate.policy.admission.pods import SCALE_UP_HELD, PodStatus
from raygate.policy.admission.states import (
    PENDING_STATES,
    Advice,
    PodState,
    ScaleGate,
    ScaleUp,
    is_running,
)
from raygate.policy.classify import HEAD_GROUP, group_floor
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.model import GroupKey, RayClusterView


@dataclass(frozen=True, slots=True)
class GroupStatus:
    name: str
    floor: int
    """Pods that hold the gang floor (``raygate.policy.classify.group_floor``)."""
    desired: int
    """Pods KubeRay wants: ``clamp(replicas, min, max) × numOfHosts``; 1 for the head; 0
    when suspended."""
    scheduled: int
    running: int
    pending: int
    """Live pods not running yet (Starting, Waiting*, Unschedulable, Stuck)."""
    preempted: int
    """Pods the scheduler preempted within the thrash-guard window."""
    scale_up: Advice[ScaleUp]
    scale_gates: tuple[ScaleGate, ...] = ()
    """The gates raygate wants on the group and those on the RayCluster
    (``raygate.policy.admission.gates.group_scale_gates``)."""


@dataclass(frozen=True, slots=True)
class _GroupFacts:
    cluster: RayClusterView
    group: str
    gang: GangStatus
    states: Mapping[PodState, int]
    no_node: str = ""
    """The reason of the first ``NoNodeComing`` pod, as the autoscaler said it."""
    held: str = ""
    """The reason of the first pod held with an all-or-nothing scale-up."""


def _count(states: Mapping[PodState, int], state: PodState) -> str:
    n = states.get(state, 0)
    return f"{n} pod{'s' if n != 1 else ''} of this group"


@dataclass(frozen=True, slots=True)
class ScaleUpRule:
    """One row of the scale-up table: when it applies, the decision, the reason."""

    name: str
    applies: Callable[[_GroupFacts], bool]
    decision: ScaleUp
    reason: Callable[[_GroupFacts], str]


SCALE_UP_RULES: tuple[ScaleUpRule, ...] = (
    ScaleUpRule("head", lambda g: g.group == HEAD_GROUP, ScaleUp.HOLD,
                lambda g: "the head group has exactly one pod; it does not scale"),
    # Kueue keeps a queued RayCluster suspended until its Workload is admitted: say why.
    ScaleUpRule("suspended", lambda g: g.cluster.suspended, ScaleUp.HOLD,
                lambda g: "the RayCluster is suspended: KubeRay creates no pods" + (
                    f"; {g.gang.reason}" if g.gang.source is not None
                    and not g.gang.admitted else "")),
    # An elastic RayCluster's new slice: the scale-up already asked Kueue for quota.
    # (The scale-gate writer, issue #40, should read this HOLD as Kueue's, not raygate's.)
    ScaleUpRule("slice-not-admitted", lambda g: not g.gang.admitted and bool(g.gang.replaces),
                ScaleUp.HOLD,
                lambda g: ("the scale-up waits for Kueue's quota; more workers would only "
                           f"grow the slice that waits: {g.gang.reason}")),
    ScaleUpRule("gang-not-admitted", lambda g: not g.gang.admitted, ScaleUp.HOLD,
                lambda g: f"new pods would only wait for admission: {g.gang.reason}"),
    # The node autoscaler said no node comes for a pod of this template: none comes for
    # the next one either.
    ScaleUpRule("no-node-coming", lambda g: PodState.NO_NODE_COMING in g.states, ScaleUp.HOLD,
                lambda g: (f"{_count(g.states, PodState.NO_NODE_COMING)} will get no node, "
                           f"and more would get none either: {g.no_node}")),
    ScaleUpRule(SCALE_UP_HELD, lambda g: bool(g.held), ScaleUp.HOLD,
                lambda g: f"raygate holds {g.held}; more workers would join it"),
    ScaleUpRule("waiting-for-capacity", lambda g: PodState.WAITING_FOR_CAPACITY in g.states,
                ScaleUp.HOLD,
                lambda g: (f"{_count(g.states, PodState.WAITING_FOR_CAPACITY)} already "
                           "waiting for capacity; more would wait too")),
    # Beyond the two reasons to hold: pods of the same template that the
    # scheduler refuses or that wait for admission say the same about the next pod.
    ScaleUpRule("unschedulable", lambda g: PodState.UNSCHEDULABLE in g.states, ScaleUp.HOLD,
                lambda g: (f"{_count(g.states, PodState.UNSCHEDULABLE)} cannot be placed; "
                           "more from the same template would be refused too")),
    ScaleUpRule("waiting-for-admission",
                lambda g: PodState.WAITING_FOR_GANG_ADMISSION in g.states, ScaleUp.HOLD,
                lambda g: (f"{_count(g.states, PodState.WAITING_FOR_GANG_ADMISSION)} still "
                           "waiting for admission; more would wait too")),
    ScaleUpRule("node-provisioning", lambda g: PodState.NODE_PROVISIONING in g.states,
                ScaleUp.PROCEED,
                lambda g: (f"{_count(g.states, PodState.NODE_PROVISIONING)} with a node coming; "
                           "the node autoscaler brings nodes for more")),
    ScaleUpRule("proceed", lambda g: True, ScaleUp.PROCEED,
                lambda g: ("the gang is admitted and no pod of this group waits for capacity"
                           if g.gang.source is not None else
                           "no gang gates this RayCluster and no pod of this group waits "
                           "for capacity")),
)


def _scale_up(facts: _GroupFacts) -> ScaleUpRule:
    for rule in SCALE_UP_RULES:
        if rule.applies(facts):
            return rule
    raise AssertionError("the last scale-up rule applies to every group")  # pragma: no cover


def _desired(cluster: RayClusterView, group: str) -> int:
    if cluster.suspended:
        return 0
    if group == HEAD_GROUP:
        return 1
    spec = cluster.worker_group(group)
    if spec is None or spec.suspended:
        return 0
    # KubeRay's GetWorkerGroupDesiredReplicas.
    replicas = spec.min_replicas if spec.replicas is None else spec.replicas
    return min(max(replicas, spec.min_replicas), spec.max_replicas) * spec.num_of_hosts


def group_status(
    cluster: RayClusterView, group: str, view: ClusterView, *, gang: GangStatus,
    pods: Iterable[PodStatus], config: PolicyConfig, now: float,
) -> tuple[GroupStatus, float | None]:
    key = GroupKey(cluster.namespace, cluster.name, group)
    states: dict[PodState, int] = {}
    no_node = held = ""
    for status in pods:
        if status.state in PENDING_STATES:
            states[status.state] = states.get(status.state, 0) + 1
        if status.state is PodState.NO_NODE_COMING and not no_node:
            no_node = status.reason
        if status.rule == SCALE_UP_HELD and not held:
            held = status.reason
    # A preemption counts while it is inside the thrash-guard window; it leaves the count
    # (and the status changes) at `at + window`.
    window = config.thrash_guard_seconds
    inside = [r.at + window for r in view.preemptions(key) if window > 0 and now < r.at + window]
    facts = _GroupFacts(cluster, group, gang, states, no_node, held)
    rule = _scale_up(facts)
    running = sum(1 for p in view.group_pods(key) if is_running(p))
    return GroupStatus(
        name=group, floor=group_floor(cluster, group), desired=_desired(cluster, group),
        scheduled=view.scheduled_count(key), running=running,
        pending=sum(states.values()), preempted=len(inside),
        scale_up=Advice(rule.decision, rule.reason(facts)),
    ), min(inside, default=None)
