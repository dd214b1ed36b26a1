"""One pod not running: its facts, the ``POD_RULES`` that decide its state, the advice
per state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from raygate.policy.admission.autoscalers import NodeOutlook, NodeSignal, node_signal
from raygate.policy.admission.gang import GangFacts, GangStatus
from raygate.policy.admission.states import (
    Advice,
    PodAction,
    PodState,
    is_running,
    true_condition,
    whole_seconds,
)
from raygate.policy.admission.verdicts import (
    INSUFFICIENT,
    SKIPPED_FOR_SIBLING,
    SchedulerVerdict,
    classify_verdict,
)
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.model import PREEMPTION_REASON, Condition, PodView
from raygate.policy.native import GATE
from raygate.policy.scale_up import KUEUE_GATE, Batch

SCALE_UP_HELD = "scale-up-held"  # its group's scale-up rule and scale gate read it

ASKS_FOR_A_NODE = frozenset({
    SchedulerVerdict.CAPACITY, SchedulerVerdict.CONSTRAINTS, SchedulerVerdict.OTHER})
"""Verdicts a node autoscaler acts on (it provisions for pods the scheduler marked
``Unschedulable``): a new node may bring room, or the labels and taints no node has."""


def is_listed(pod: PodView) -> bool:
    """Does the pod get a state? Every pod not running, except those whose owner removes
    them (terminating or finished with no DisruptionTarget: KubeRay, the autoscaler or a
    Kueue suspension deleted them, or they completed)."""
    if true_condition(pod, "DisruptionTarget") is not None:
        return True
    if pod.deleted is not None or pod.terminal:
        return False
    return not is_running(pod)


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the rules read about one pod, gathered once."""

    pod: PodView
    gang: GangStatus
    gang_capacity: Condition | None
    config: PolicyConfig
    now: float
    disruption: Condition | None  # DisruptionTarget=True
    scheduled: Condition | None  # PodScheduled, any status
    verdict: SchedulerVerdict
    node: NodeSignal | None = None
    """What the node autoscaler said of this pod (``autoscalers.node_signal``)."""
    batch: Batch | None = None
    """The RayCluster's all-or-nothing scale-up held at raygate's gate, if any."""

    @property
    def held(self) -> bool:
        """Held at raygate's gate with its scale-up, which does not go yet."""
        return (self.batch is not None and not self.batch.release
                and any(p.uid == self.pod.uid for p in self.batch.pods))

    @property
    def bound(self) -> bool:
        return bool(self.pod.node_name)

    @property
    def bound_since(self) -> float | None:
        """When the pod was bound or last became not ready, whichever is later (a pod that
        ran and turned unready starts its wait anew)."""
        times: list[float] = []
        if self.scheduled is not None and self.scheduled.status == "True":
            times.append(self.scheduled.last_transition or 0.0)
        ready = self.pod.condition("Ready")
        if ready is not None and ready.status != "True":
            times.append(ready.last_transition or 0.0)
        times = [t for t in times if t]
        return max(times) if times else self.pod.created

    @property
    def verdict_since(self) -> float | None:
        if self.scheduled is not None and self.scheduled.last_transition is not None:
            return self.scheduled.last_transition
        return self.pod.created

    @property
    def starting_deadline(self) -> float | None:
        since = self.bound_since
        return None if since is None else since + self.config.stuck_starting_seconds

    @property
    def unbound_deadline(self) -> float | None:
        since = self.pod.created
        return None if since is None else since + self.config.stuck_unbound_seconds


def _disruption_since(f: PodFacts) -> float | None:
    at = f.disruption.last_transition if f.disruption is not None else None
    return at or f.pod.deleted or f.pod.created


def _disruption_reason(f: PodFacts, what: str) -> str:
    if f.disruption is None:  # pragma: no cover - the rules that call this require one
        return what
    reason = what if f.disruption.reason == PREEMPTION_REASON else (
        f"{what} ({f.disruption.reason or 'no reason given'})")
    return f"{reason}: {f.disruption.message}" if f.disruption.message else reason


def _scheduler_said(f: PodFacts) -> str:
    return f"the scheduler says: {f.scheduled.message}" if (
        f.scheduled is not None and f.scheduled.message) else "the scheduler gave no message"


def _capacity_reason(f: PodFacts) -> str:
    message = f.scheduled.message if f.scheduled is not None else ""
    found = sorted(set(INSUFFICIENT.findall(message)), key=message.find)
    what = ", ".join(found) if found else "room is being made by an eviction"
    return f"no node has room: {what} ({_scheduler_said(f)})"


def _gang_capacity_since(f: PodFacts) -> float | None:
    times = [t for t in (f.pod.created,
                         f.gang_capacity.last_transition if f.gang_capacity else None)
             if t is not None]
    return max(times) if times else None


def _outlook(f: PodFacts) -> NodeOutlook | None:
    return f.node.outlook if f.node is not None and f.verdict in ASKS_FOR_A_NODE else None


def _node_reason(f: PodFacts) -> str:
    return f"{f.node.reason}; {_scheduler_said(f)}" if f.node is not None else ""


def _node_until(f: PodFacts) -> float | None:
    return f.node.until if f.node is not None else None


def _not_admitted_reason(f: PodFacts) -> str:
    return f"waiting for its gang to be admitted: {f.gang.reason}"


@dataclass(frozen=True, slots=True)
class PodRule:
    """One row of the pod-state table: when it applies, the state, the reason in words,
    since when, and (for states that time changes) until when it holds."""

    name: str
    state: PodState
    applies: Callable[[PodFacts], bool]
    reason: Callable[[PodFacts], str]
    since: Callable[[PodFacts], float | None]
    until: Callable[[PodFacts], float | None] | None = None
    """The ``now`` from which this rule may stop applying with the same inputs."""
    why: str = ""
    """Why its advice holds, where the state's general reason (``POD_ADVICE``) does not
    fit the rule."""


def _before(deadline: float | None, now: float) -> bool:
    return deadline is None or now < deadline


POD_RULES: tuple[PodRule, ...] = (
    # 1. A DisruptionTarget is the most explicit fact there is: the pod is going away.
    PodRule(
        "preempted-by-scheduler", PodState.PREEMPTED,
        # kube-scheduler's reason for its preemptions, and Volcano's.
        lambda f: f.disruption is not None and f.disruption.reason == PREEMPTION_REASON,
        lambda f: _disruption_reason(f, "preempted by the scheduler"),
        _disruption_since),
    PodRule(
        "disruption-target", PodState.EVICTED,
        lambda f: f.disruption is not None,
        lambda f: _disruption_reason(f, "evicted"),
        _disruption_since),
    # 2. Bound: the scheduler is done; the kubelet starts it, or has failed to for long.
    PodRule(
        "bound-not-started-too-long", PodState.STUCK,
        lambda f: f.bound and not _before(f.starting_deadline, f.now),
        lambda f: (f"bound to {f.pod.node_name} and not running and ready for more than "
                   f"{f.config.stuck_starting_seconds:g} s"),
        lambda f: f.bound_since),
    PodRule(
        "bound-starting", PodState.STARTING,
        lambda f: f.bound,
        lambda f: f"bound to {f.pod.node_name}; containers not ready yet",
        lambda f: f.bound_since,
        lambda f: f.starting_deadline),
    # 3. The scheduler's explicit verdict on this pod.
    PodRule(
        "nominated-node", PodState.WAITING_FOR_CAPACITY,
        lambda f: bool(f.pod.nominated_node_name),
        # kube-scheduler 1.37 also nominates the members of a gang it has placed, just
        # before it binds them: no preemption is needed for that.
        lambda f: (f"nominated to {f.pod.nominated_node_name} with its gang "
                   f"{f.pod.scheduling_group}: the gang's placement is being bound, or a "
                   "preemption is making room there" if f.pod.scheduling_group else
                   f"preemption made room on {f.pod.nominated_node_name}; waiting for the "
                   "victims to leave"),
        lambda f: f.verdict_since),
    # The node autoscaler's word on a pod the scheduler refused (autoscalers.py).
    PodRule(
        "node-coming", PodState.NODE_PROVISIONING,
        lambda f: _outlook(f) is NodeOutlook.COMING,
        _node_reason, lambda f: f.verdict_since, _node_until),
    PodRule(
        "no-node-coming", PodState.NO_NODE_COMING,
        lambda f: _outlook(f) is NodeOutlook.NONE_COMING,
        _node_reason, lambda f: f.verdict_since, _node_until),
    PodRule(
        "insufficient-resources", PodState.WAITING_FOR_CAPACITY,
        lambda f: f.verdict is SchedulerVerdict.CAPACITY,
        _capacity_reason,
        lambda f: f.verdict_since),
    PodRule(
        "constraints", PodState.UNSCHEDULABLE,
        lambda f: f.verdict is SchedulerVerdict.CONSTRAINTS,
        lambda f: f"no node satisfies the pod's constraints; {_scheduler_said(f)}",
        lambda f: f.verdict_since),
    # 4. The gang's verdict, then the gang's admission.
    PodRule(
        "gang-not-enough-resources", PodState.WAITING_FOR_CAPACITY,
        lambda f: f.gang_capacity is not None,
        lambda f: f"the gang waits for capacity: {f.gang.reason}",
        _gang_capacity_since),
    PodRule(
        "gang-waiting-for-members", PodState.WAITING_FOR_GANG_ADMISSION,
        lambda f: f.verdict is SchedulerVerdict.GANG,
        lambda f: f"the scheduler waits for the rest of the gang; {_scheduler_said(f)}",
        lambda f: f.verdict_since),
    # Kueue's elastic gate: the pod counts in a Workload slice not admitted yet (a
    # scale-up beyond the admitted slice waits for Kueue's quota, not for room).
    PodRule(
        "kueue-slice-gated", PodState.WAITING_FOR_GANG_ADMISSION,
        lambda f: KUEUE_GATE in f.pod.scheduling_gates,
        lambda f: (f"Kueue's scheduling gate {KUEUE_GATE} holds it until its Workload "
                   "slice is admitted: " + (f.gang.reason if not f.gang.admitted else
                                            f"{f.gang.reason}; Kueue is lifting the gate")),
        lambda f: f.pod.created),
    PodRule(
        SCALE_UP_HELD, PodState.WAITING_FOR_CAPACITY,
        lambda f: f.held,
        lambda f: f.batch.reason if f.batch is not None else "",
        lambda f: f.batch.since if f.batch is not None else None,
        why="raygate releases the whole scale-up once all of it fits; a replacement would "
        "join the same hold"),
    PodRule(
        # raygate's own gate, alone: raygate is writing its placement into the pod (for
        # well under a second, or ``placement.waitSeconds`` while its RayCluster is unknown).
        # No gate left under a SchedulingGated condition: just released, not judged yet.
        "placement-gated", PodState.STARTING,
        lambda f: (f.verdict is SchedulerVerdict.GATED
                   and set(f.pod.scheduling_gates) <= {GATE}),
        lambda f: ("raygate is writing its placement into the pod (scheduling gate "
                   f"{GATE})" if f.pod.scheduling_gates else
                   "its scheduling gates are gone; the scheduler has not judged it yet")
        + f"; {_scheduler_said(f)}",
        lambda f: f.verdict_since),
    PodRule(
        "scheduling-gated", PodState.WAITING_FOR_GANG_ADMISSION,
        lambda f: f.verdict is SchedulerVerdict.GATED,
        lambda f: ("scheduling gates hold it until admission (Kueue's quota gate or "
                   f"another controller's); {_scheduler_said(f)}"),
        lambda f: f.verdict_since),
    PodRule(
        "gang-not-admitted", PodState.WAITING_FOR_GANG_ADMISSION,
        lambda f: not f.gang.admitted,
        _not_admitted_reason,
        lambda f: f.pod.created),
    # 5. A "no" raygate cannot read: the scheduler said it, so it is not Stuck.
    PodRule(
        "unschedulable-other", PodState.UNSCHEDULABLE,
        lambda f: f.verdict is SchedulerVerdict.OTHER,
        lambda f: f"the scheduler cannot place it; {_scheduler_said(f)}",
        lambda f: f.verdict_since),
    # 6. Nothing explains the wait: give the scheduler its time, then call it stuck.
    PodRule(
        "no-verdict-too-long", PodState.STUCK,
        lambda f: not _before(f.unbound_deadline, f.now),
        lambda f: (f"unbound with no verdict from the scheduler for more than "
                   f"{f.config.stuck_unbound_seconds:g} s"),
        lambda f: f.pod.created),
    PodRule(
        "awaiting-scheduler", PodState.STARTING,
        lambda f: True,  # the last rule applies to every pod: each pod gets a state
        lambda f: "created; the scheduler has not judged it yet",
        lambda f: f.pod.created,
        lambda f: f.unbound_deadline),
)

POD_ADVICE: Mapping[PodState, tuple[PodAction, str]] = MappingProxyType({
    PodState.STARTING: (
        PodAction.KEEP, "it is starting; a replacement would start from scratch"),
    PodState.WAITING_FOR_GANG_ADMISSION: (
        PodAction.KEEP, "the gang is admitted as a whole; a replacement would wait in the "
        "same queue"),
    PodState.WAITING_FOR_CAPACITY: (
        PodAction.KEEP, "the scheduler places it as soon as room frees up; a replacement "
        "would wait for the same room"),
    PodState.NODE_PROVISIONING: (
        PodAction.KEEP, "a node is being brought up for it; a replacement would wait for "
        "that node too"),
    PodState.NO_NODE_COMING: (
        PodAction.KEEP, "the node autoscaler brings no node for it, and a replacement from "
        "the same template gets none either; fix the template, the node pools or the "
        "autoscaler's limits"),
    PodState.UNSCHEDULABLE: (
        PodAction.KEEP, "a replacement from the same template meets the same refusal; fix "
        "the template or the nodes"),
    PodState.PREEMPTED: (
        PodAction.KEEP, "the scheduler is removing it and KubeRay recreates it once it is "
        "gone; acting on it too only adds churn"),
    PodState.EVICTED: (
        PodAction.REPLACE, "it will not run again; count it as lost"),
    PodState.STUCK: (
        PodAction.REPLACE, "nothing explains the wait; a fresh pod may do better"),
})


@dataclass(frozen=True, slots=True)
class PodStatus:
    name: str
    uid: str
    group: str
    node_name: str
    state: PodState
    reason: str
    since: int | None
    """When the wait (or the disruption) began: whole seconds since the epoch."""
    advice: Advice[PodAction]
    rule: str
    """The ``POD_RULES`` row that decided the state (for tests and logs)."""
    gpu_room: str = ""
    """Why only GPU nodes have room for it while raygate keeps it off them ("": not so)."""


def pod_facts(pod: PodView, gang: GangFacts, config: PolicyConfig, now: float,
              siblings: Mapping[str, Condition] = MappingProxyType({}), *,
              view: ClusterView | None = None, batch: Batch | None = None) -> PodFacts:
    """``siblings``: per worker group, the ``PodScheduled`` verdict of one of its pods,
    lent to a pod Volcano skipped for that sibling's failure. ``view``: where the node
    autoscalers' events are read (none without it)."""
    scheduled = pod.condition("PodScheduled")
    if scheduled is not None and SKIPPED_FOR_SIBLING in scheduled.message:
        scheduled = siblings.get(pod.group_key.group, scheduled)
    verdict = classify_verdict(scheduled)
    node = None if view is None else _node_signal(pod, scheduled, verdict, view=view,
                                                  config=config, now=now)
    return PodFacts(pod, gang.status, gang.capacity, config, now,
                    true_condition(pod, "DisruptionTarget"), scheduled, verdict, node, batch)


def derive_pod(facts: PodFacts) -> tuple[PodStatus, float | None]:
    """The pod's status by the first rule of ``POD_RULES`` that applies, and the ``now``
    from which that may change (None: not with time alone)."""
    for rule in POD_RULES:
        if rule.applies(facts):
            action, why = POD_ADVICE[rule.state]
            advice = Advice(action, rule.why or why)
            pod = facts.pod
            status = PodStatus(
                pod.name, pod.uid, pod.group_key.group, pod.node_name, rule.state,
                rule.reason(facts), whole_seconds(rule.since(facts)), advice, rule.name)
            return status, (rule.until(facts) if rule.until is not None else None)
    raise AssertionError("the last rule of POD_RULES applies to every pod")  # pragma: no cover


def _node_signal(pod: PodView, scheduled: Condition | None, verdict: SchedulerVerdict, *,
                 view: ClusterView, config: PolicyConfig, now: float) -> NodeSignal | None:
    """What the node autoscaler said of an unbound pod the scheduler refused."""
    if pod.node_name or verdict not in ASKS_FOR_A_NODE:
        return None
    since = scheduled.last_transition if scheduled is not None else None
    return node_signal(pod, view, config, now, since)


def no_node_coming(pod: PodView, view: ClusterView, config: PolicyConfig,
                   now: float) -> NodeSignal | None:
    """What the node autoscaler said of ``pod`` when it says no node will come for it:
    the pod's ``NoNodeComing`` evidence, read alone (the state needs its gang too)."""
    if pod.deleted is not None or pod.terminal:
        return None
    scheduled = pod.condition("PodScheduled")
    signal = _node_signal(pod, scheduled, classify_verdict(scheduled), view=view,
                          config=config, now=now)
    return signal if signal is not None and signal.outlook is NodeOutlook.NONE_COMING else None
