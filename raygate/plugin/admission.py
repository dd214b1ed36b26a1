"""Admission status: why is each Ray pod not running, and should anyone act?

For one RayCluster, ``admission_status`` derives from the cluster view (its pods, its
PodGroup or Kueue Workload, the scheduler's preemption records), the policy settings and
``now``:

* the **gang**: which object gates admission, its phase as that object reports it,
  whether it is admitted, its ``minMember`` and how many of the cluster's pods run;
* each **group** (head and worker groups): floor, desired, scheduled, running, pending,
  preempted within the thrash-guard window, and whether scaling it up makes sense;
* each **pod not running**: exactly one ``PodState``, the reason in words, since when,
  and what a control loop should do about it.

The pod state is decided by ``POD_RULES``, a table read top to bottom: the first rule
that applies wins. The order is the design: a DisruptionTarget or the scheduler's own
verdict first, then the gang, and ``Stuck`` only when nothing explains the wait. A pod
of a gang that is not admitted is ``WaitingForGangAdmission`` however long it waits:
Volcano and Kueue hold whole gangs for hours by design, and recreating a member changes
nothing. The advice per state is the table ``POD_ADVICE``; scale-up advice per group is
``SCALE_UP_RULES``.

Everything here is a pure function of its arguments: no clock (``now`` is passed in), no
I/O. The result carries ``next_change``, the earliest ``now`` at which the same inputs
give a different status (a ``Starting`` pod turning ``Stuck``, a preemption leaving the
window), so a caller can memoise it until then.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from raygate.plugin.classify import HEAD_GROUP, group_floor
from raygate.plugin.config import PolicyConfig
from raygate.plugin.model import (
    ANNOTATION_GROUP_NAME,
    PREEMPTION_REASON,
    ClusterView,
    Condition,
    GroupKey,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkloadView,
)

__all__ = [
    "PENDING_STATES",
    "POD_ADVICE",
    "POD_RULES",
    "SCALE_UP_RULES",
    "AdmissionStatus",
    "Derivation",
    "GangSource",
    "GangStatus",
    "GroupStatus",
    "PodAction",
    "PodFacts",
    "PodRule",
    "PodState",
    "PodStatus",
    "ScaleUp",
    "SchedulerVerdict",
    "admission_inputs",
    "admission_status",
    "admission_statuses",
    "classify_verdict",
    "derive_pod",
    "is_running",
]


class PodState(Enum):
    """Why a pod is not running: a closed set, one per pod."""

    STARTING = "Starting"
    """Bound to a node and its containers are not ready yet; or just created and not
    judged by the scheduler yet."""
    WAITING_FOR_GANG_ADMISSION = "WaitingForGangAdmission"
    """Unbound while its gang (PodGroup, Kueue Workload, scheduling gate) is not admitted."""
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    """The scheduler found no room: more capacity (or the preemption under way) places it."""
    UNSCHEDULABLE = "Unschedulable"
    """The scheduler said no for reasons capacity cannot fix (affinity, selector, taints)."""
    PREEMPTED = "Preempted"
    """The scheduler is removing it for a higher-priority pod (DisruptionTarget,
    PreemptionByScheduler)."""
    EVICTED = "Evicted"
    """Removed by anything else that marks a DisruptionTarget: the Eviction API, the taint
    manager, the kubelet, PodGC."""
    STUCK = "Stuck"
    """Nothing explains the wait, and it has lasted longer than the configured limit."""


class PodAction(Enum):
    KEEP = "keep"
    """Leave the pod alone: the scheduler (or the kubelet) has it in hand, and deleting
    and recreating it changes nothing."""
    REPLACE = "replace"
    """The pod will not run as it is: count it as lost; a fresh pod may do better."""


class ScaleUp(Enum):
    PROCEED = "proceed"
    HOLD = "hold"


# States of a pod that is still a live member of its group, waiting to run (the group's
# ``pending`` count); Preempted and Evicted pods are on their way out.
PENDING_STATES = frozenset({
    PodState.STARTING, PodState.WAITING_FOR_GANG_ADMISSION, PodState.WAITING_FOR_CAPACITY,
    PodState.UNSCHEDULABLE, PodState.STUCK,
})

# --- what the scheduler said ------------------------------------------------------------


class SchedulerVerdict(Enum):
    """The scheduler's ``PodScheduled=False`` condition, read for admission."""

    NONE = "none"  # no PodScheduled=False condition, or SchedulerError: no verdict
    CAPACITY = "capacity"  # no room; more capacity would place the pod
    CONSTRAINTS = "constraints"  # no node the pod may use, whatever the capacity
    GANG = "gang"  # Volcano: placed or placeable, waiting for the rest of the gang
    GATED = "gated"  # scheduling gates hold it (Kueue's quota gate, ...); not yet judged
    OTHER = "other"  # Unschedulable for a reason raygate does not recognise


# Substrings of PodScheduled messages, in priority order (ecosystem.md §4.2, §2.5).
# kube-scheduler writes "0/N nodes are available: <count> <reason>, ...", Volcano "0/N
# nodes are unavailable: ..." with the same per-plugin reasons. A message that names any
# insufficient resource is CAPACITY even when other nodes failed for other reasons: more
# capacity of the right kind would place the pod.
MESSAGE_MARKERS: tuple[tuple[str, SchedulerVerdict], ...] = (
    ("Insufficient ", SchedulerVerdict.CAPACITY),  # NodeResourcesFit, and Volcano's own
    ("Too many pods", SchedulerVerdict.CAPACITY),  # NodeResourcesFit: the node's pod count
    ("didn't have free ports", SchedulerVerdict.CAPACITY),  # NodePorts: another node would do
    # Volcano, pipelined: room is being made by an eviction (reason Unschedulable).
    ("once resource is released", SchedulerVerdict.CAPACITY),
    ("NotEnoughResources", SchedulerVerdict.CAPACITY),  # Volcano gang condition text, quoted
    ("didn't match Pod's node affinity/selector", SchedulerVerdict.CONSTRAINTS),
    # TaintToleration: "had untolerated taint {k: v}" (1.25+) and "had untolerated
    # taint(s)" (kubernetes#134740, 1.34+) share this prefix ...
    ("had untolerated taint", SchedulerVerdict.CONSTRAINTS),
    # ... and <= 1.24 said "node(s) had taint {k: v}, that the pod didn't tolerate".
    ("that the pod didn't tolerate", SchedulerVerdict.CONSTRAINTS),
    ("didn't match pod affinity rules", SchedulerVerdict.CONSTRAINTS),
    ("didn't match pod anti-affinity rules", SchedulerVerdict.CONSTRAINTS),
    ("didn't satisfy existing pods anti-affinity rules", SchedulerVerdict.CONSTRAINTS),
    ("didn't match pod topology spread constraints", SchedulerVerdict.CONSTRAINTS),
    ("had volume node affinity conflict", SchedulerVerdict.CONSTRAINTS),
    ("didn't match the requested node name", SchedulerVerdict.CONSTRAINTS),
    # Volcano's gang texts: "pod group is not ready, 3 Pending, 3 minAvailable", "2/3 tasks
    # in gang unschedulable: ...", "... once minAvailable is satisfied".
    ("minAvailable", SchedulerVerdict.GANG),
    ("pod group is not ready", SchedulerVerdict.GANG),
    ("tasks in gang unschedulable", SchedulerVerdict.GANG),
)

# "Insufficient nvidia.com/gpu" (a resource name may hold dots, never end with one).
_INSUFFICIENT = re.compile(r"Insufficient [\w./-]*\w|Too many pods")


def classify_verdict(scheduled: Condition | None) -> SchedulerVerdict:
    """Read a pod's ``PodScheduled`` condition (core/v1 reasons, ecosystem.md §4.2)."""
    if scheduled is None or scheduled.status != "False":
        return SchedulerVerdict.NONE
    if scheduled.reason == "SchedulingGated":
        return SchedulerVerdict.GATED
    if scheduled.reason == "Schedulable":
        # Volcano: "Pod ns/x can possibly be assigned to <node>, once minAvailable is
        # satisfied" — allocated, waiting for the rest of the gang.
        return SchedulerVerdict.GANG
    if scheduled.reason != "Unschedulable":
        return SchedulerVerdict.NONE  # SchedulerError or unknown: the scheduler has not said no
    for marker, verdict in MESSAGE_MARKERS:
        if marker in scheduled.message:
            return verdict
    return SchedulerVerdict.OTHER


# --- the gang ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangSource:
    kind: str  # "PodGroup" | "Workload"
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class GangStatus:
    source: GangSource | None
    """The object that gates admission; None when nothing does."""
    phase: str
    """PodGroup ``status.phase`` as Volcano wrote it; for a Workload, its conditions read
    as one word (Finished, Admitted, Evicted, QuotaReserved or Pending); "" for none."""
    admitted: bool
    """PodGroup Running; Workload ``Admitted=True``; always true with no gang source."""
    min_member: int
    """PodGroup ``spec.minMember``; for a Workload, the pods of its pod sets as Kueue builds
    them (head + Σ replicas × numOfHosts); 0 with no gang source."""
    running: int
    """Pods of the RayCluster running (bound, phase Running, ready, not going away)."""
    reason: str


@dataclass(frozen=True, slots=True)
class _Gang:
    status: GangStatus
    capacity: Condition | None
    """The gang's own "not enough resources" verdict (Volcano's PodGroup condition
    ``Unschedulable=True``, reason ``NotEnoughResources``), if it stands."""


def _latest(conditions: Iterable[Condition], type_: str) -> Condition | None:
    found: Condition | None = None
    for cond in conditions:
        if cond.type == type_ and (
                found is None or (cond.last_transition or 0.0) >= (found.last_transition or 0.0)):
            found = cond
    return found


_PODGROUP_PHASES: Mapping[str, str] = MappingProxyType({
    # volcano-sh/apis scheduling/v1beta1 types.go, ecosystem.md §2.1
    "Pending": "the gang waits for Volcano to find room for all its members",
    "Inqueue": "the queue accepted the gang, and Volcano binds no member until all fit",
    "Running": "Volcano admitted the gang (its minMember pods are scheduled)",
    "Unknown": "part of the gang runs and the rest cannot be placed",
    "Completed": "every member completed",
    "": "Volcano has not processed the PodGroup yet",
})


def _podgroup_gang(pg: PodGroupView, running: int) -> _Gang:
    source = GangSource("PodGroup", pg.namespace, pg.name)
    admitted = pg.phase == "Running"
    unschedulable = _latest(pg.conditions, "Unschedulable")
    scheduled = _latest(pg.conditions, "Scheduled")
    capacity = None
    if (unschedulable is not None and unschedulable.status == "True"
            and unschedulable.reason == "NotEnoughResources"
            # Volcano leaves the old condition behind when it later sets Scheduled=True.
            and not (scheduled is not None and scheduled.status == "True"
                     and (scheduled.last_transition or 0.0)
                     >= (unschedulable.last_transition or 0.0))):
        capacity = unschedulable
    what = _PODGROUP_PHASES.get(pg.phase, "a phase raygate does not know")
    reason = f"{source} is {pg.phase or 'without a phase'}; {what}"
    if capacity is not None:
        reason += f"; NotEnoughResources: {capacity.message}" if capacity.message else (
            "; NotEnoughResources")
    return _Gang(GangStatus(source, pg.phase, admitted, pg.min_member, running, reason),
                 capacity)


def _workload_phase(wl: WorkloadView) -> str:
    def true(type_: str) -> bool:
        cond = _latest(wl.conditions, type_)
        return cond is not None and cond.status == "True"

    for type_ in ("Finished", "Admitted", "Evicted", "QuotaReserved"):
        if true(type_):
            return type_
    return "Pending"


def _kueue_pod_count(cluster: RayClusterView) -> int:
    # Kueue's BuildPodSets: the head, and per worker group `replicas` (1 when unset, no
    # clamp, suspended groups included) × numOfHosts (ecosystem.md §3.2).
    return 1 + sum((g.replicas if g.replicas is not None else 1) * g.num_of_hosts
                   for g in cluster.worker_groups)


def _workload_gang(wl: WorkloadView, cluster: RayClusterView, running: int) -> _Gang:
    source = GangSource("Workload", wl.namespace, wl.name)
    phase = _workload_phase(wl)
    admitted_cond = _latest(wl.conditions, "Admitted")
    admitted = admitted_cond is not None and admitted_cond.status == "True"
    if admitted:
        reason = f"{source} is Admitted: quota reserved and every admission check ready"
    else:
        # The most telling condition first: why the quota is not reserved, else why the
        # reserved quota is not an admission yet (checks pending).
        why = ""
        for type_ in ("Finished", "Evicted", "QuotaReserved", "Admitted"):
            cond = _latest(wl.conditions, type_)
            if cond is None or (type_ in ("Finished", "Evicted") and cond.status != "True"):
                continue
            if type_ == "QuotaReserved" and cond.status == "True":
                continue
            detail = f"{cond.type}={cond.status}"
            if cond.reason:
                detail += f" ({cond.reason})"
            why = f"{detail}: {cond.message}" if cond.message else detail
            break
        reason = f"{source} is not admitted" + (f": {why}" if why else ": Kueue has not "
                                                "reserved quota for it yet")
    return _Gang(GangStatus(source, phase, admitted, _kueue_pod_count(cluster), running,
                            reason), None)


def _pick_workload(workloads: Iterable[WorkloadView]) -> WorkloadView | None:
    """Of several Workloads (elastic slices), the live one: not Finished (an old slice
    is Finished with WorkloadSliceReplaced), admitted first, then by name."""

    def key(wl: WorkloadView) -> tuple[bool, bool, str]:
        phase = _workload_phase(wl)
        return (phase == "Finished", phase != "Admitted", wl.name)

    return min(workloads, key=key, default=None)


def _podgroup_names(cluster: RayClusterView, pods: Iterable[PodView]) -> list[str]:
    # KubeRay names the Volcano PodGroup ray-<name>-pg and annotates every pod with it
    # (ecosystem.md §1.3); a RayJob's PodGroup carries the RayJob's name, found through
    # the pods' annotation.
    names = [f"ray-{cluster.name}-pg"]
    return names + sorted(
        {p.annotations.get(ANNOTATION_GROUP_NAME, "") for p in pods} - {"", *names})


def _gang(cluster: RayClusterView, pods: tuple[PodView, ...], view: ClusterView) -> _Gang:
    running = sum(1 for p in pods if is_running(p))
    for name in _podgroup_names(cluster, pods):
        pg = view.podgroup(cluster.namespace, name)
        if pg is not None:
            return _podgroup_gang(pg, running)
    workload = _pick_workload(view.workloads_of(cluster.namespace, cluster.name))
    if workload is not None:
        return _workload_gang(workload, cluster, running)
    return _Gang(GangStatus(None, "", True, 0, running,
                            "no PodGroup or Kueue Workload gates this RayCluster"), None)


# --- one pod ----------------------------------------------------------------------------


def _true(pod: PodView, type_: str) -> Condition | None:
    cond = pod.condition(type_)
    return cond if cond is not None and cond.status == "True" else None


def is_running(pod: PodView) -> bool:
    """Bound, phase Running, ready (or no Ready condition reported), not going away."""
    if not pod.node_name or pod.phase != "Running" or pod.deleted is not None:
        return False
    if _true(pod, "DisruptionTarget") is not None:
        return False
    ready = pod.condition("Ready")
    return ready is None or ready.status == "True"


def _listed(pod: PodView) -> bool:
    """Does the pod get a state? Every pod not running, except those whose owner removes
    them (terminating or finished with no DisruptionTarget: KubeRay, the autoscaler or a
    Kueue suspension deleted them, or they completed)."""
    if _true(pod, "DisruptionTarget") is not None:
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
    found = sorted(set(_INSUFFICIENT.findall(message)), key=message.find)
    what = ", ".join(found) if found else "room is being made by an eviction"
    return f"no node has room: {what} ({_scheduler_said(f)})"


def _gang_capacity_since(f: PodFacts) -> float | None:
    times = [t for t in (f.pod.created,
                         f.gang_capacity.last_transition if f.gang_capacity else None)
             if t is not None]
    return max(times) if times else None


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


def _before(deadline: float | None, now: float) -> bool:
    return deadline is None or now < deadline


POD_RULES: tuple[PodRule, ...] = (
    # 1. A DisruptionTarget is the most explicit fact there is: the pod is going away.
    PodRule(
        "preempted-by-scheduler", PodState.PREEMPTED,
        # kube-scheduler's reason for its preemptions, and Volcano's (ecosystem.md §4.1).
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
        lambda f: (f"preemption made room on {f.pod.nominated_node_name}; waiting for the "
                   "victims to leave"),
        lambda f: f.verdict_since),
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
    since: float | None
    """When the wait (or the disruption) began: seconds since the epoch."""
    advice: PodAction
    advice_reason: str
    rule: str
    """The ``POD_RULES`` row that decided the state (for tests and logs)."""


def _facts(pod: PodView, gang: _Gang, config: PolicyConfig, now: float) -> PodFacts:
    scheduled = pod.condition("PodScheduled")
    return PodFacts(pod, gang.status, gang.capacity, config, now,
                    _true(pod, "DisruptionTarget"), scheduled, classify_verdict(scheduled))


def derive_pod(facts: PodFacts) -> tuple[PodStatus, float | None]:
    """The pod's status by the first rule of ``POD_RULES`` that applies, and the ``now``
    from which that may change (None: not with time alone)."""
    for rule in POD_RULES:
        if rule.applies(facts):
            action, why = POD_ADVICE[rule.state]
            pod = facts.pod
            status = PodStatus(
                pod.name, pod.uid, pod.group_key.group, pod.node_name, rule.state,
                rule.reason(facts), rule.since(facts), action, why, rule.name)
            return status, (rule.until(facts) if rule.until is not None else None)
    raise AssertionError("the last rule of POD_RULES applies to every pod")  # pragma: no cover


# --- groups -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupStatus:
    name: str
    floor: int
    """Pods that hold the gang floor (``raygate.plugin.classify.group_floor``)."""
    desired: int
    """Pods KubeRay wants: ``clamp(replicas, min, max) × numOfHosts``; 1 for the head; 0
    when suspended."""
    scheduled: int
    running: int
    pending: int
    """Live pods not running yet (Starting, Waiting*, Unschedulable, Stuck)."""
    preempted: int
    """Pods the scheduler preempted within the thrash-guard window."""
    scale_up: ScaleUp
    scale_up_reason: str


@dataclass(frozen=True, slots=True)
class _GroupFacts:
    cluster: RayClusterView
    group: str
    gang: GangStatus
    states: Mapping[PodState, int]


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
    ScaleUpRule("suspended", lambda g: g.cluster.suspended, ScaleUp.HOLD,
                lambda g: "the RayCluster is suspended: KubeRay creates no pods"),
    ScaleUpRule("gang-not-admitted", lambda g: not g.gang.admitted, ScaleUp.HOLD,
                lambda g: f"new pods would only wait for admission: {g.gang.reason}"),
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
    # KubeRay's GetWorkerGroupDesiredReplicas (ecosystem.md §1.1).
    replicas = spec.min_replicas if spec.replicas is None else spec.replicas
    return min(max(replicas, spec.min_replicas), spec.max_replicas) * spec.num_of_hosts


def _group(
    cluster: RayClusterView, group: str, view: ClusterView, *, gang: GangStatus,
    pods: Iterable[PodStatus], config: PolicyConfig, now: float,
) -> tuple[GroupStatus, float | None]:
    key = GroupKey(cluster.namespace, cluster.name, group)
    states: dict[PodState, int] = {}
    for status in pods:
        if status.state in PENDING_STATES:
            states[status.state] = states.get(status.state, 0) + 1
    # A preemption counts while it is inside the thrash-guard window; it leaves the count
    # (and the status changes) at `at + window`.
    window = config.thrash_guard_seconds
    inside = [r.at + window for r in view.preemptions(key) if window > 0 and now < r.at + window]
    facts = _GroupFacts(cluster, group, gang, states)
    rule = _scale_up(facts)
    running = sum(1 for p in view.group_pods(key) if is_running(p))
    return GroupStatus(
        name=group, floor=group_floor(cluster, group), desired=_desired(cluster, group),
        scheduled=view.scheduled_count(key), running=running,
        pending=sum(states.values()), preempted=len(inside),
        scale_up=rule.decision, scale_up_reason=rule.reason(facts),
    ), min(inside, default=None)


# --- the whole status -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdmissionStatus:
    namespace: str
    name: str
    gang: GangStatus
    groups: tuple[GroupStatus, ...]
    pods: tuple[PodStatus, ...]
    """Every pod not running (see ``PodState``), by group, then name."""


@dataclass(frozen=True, slots=True)
class Derivation:
    status: AdmissionStatus
    next_change: float | None
    """The earliest ``now`` at which the same inputs may give another status; None when
    only new inputs can change it."""


def admission_status(
    cluster: RayClusterView, view: ClusterView, config: PolicyConfig, now: float
) -> Derivation:
    """The admission status of one RayCluster at ``now``."""
    pods = view.cluster_pods(cluster.namespace, cluster.name)
    gang = _gang(cluster, pods, view)
    deadlines: list[float] = []
    statuses: list[PodStatus] = []
    for pod in pods:
        if not _listed(pod):
            continue
        status, until = derive_pod(_facts(pod, gang, config, now))
        statuses.append(status)
        if until is not None:
            deadlines.append(until)
    statuses.sort(key=lambda s: (s.group != HEAD_GROUP, s.group, s.name, s.uid))
    by_group: dict[str, list[PodStatus]] = {}
    for status in statuses:
        by_group.setdefault(status.group, []).append(status)
    groups: list[GroupStatus] = []
    for name in (HEAD_GROUP, *(g.name for g in cluster.worker_groups)):
        group, until = _group(cluster, name, view, gang=gang.status,
                              pods=by_group.get(name, ()), config=config, now=now)
        groups.append(group)
        if until is not None:
            deadlines.append(until)
    result = AdmissionStatus(cluster.namespace, cluster.name, gang.status, tuple(groups),
                             tuple(statuses))
    return Derivation(result, min(deadlines, default=None))


def admission_inputs(
    cluster: RayClusterView,
    view: ClusterView,
    config: PolicyConfig,
    known: tuple[object, ...] | None = None,
) -> tuple[object, ...]:
    """Everything ``admission_status`` reads for ``cluster`` apart from ``now``: equal
    inputs and a ``now`` before the last ``next_change`` give an equal status, so a
    caller may keep the last one. Tuples compare elements by identity first, which makes
    this cheap when a source keeps unchanged objects between snapshots.

    ``known``: the inputs of the same cluster from an earlier view. When its cluster
    and its pods are the very same objects, the PodGroup names (which need a look at
    every pod) are taken from it rather than found again."""
    pods = view.cluster_pods(cluster.namespace, cluster.name)
    if known is not None and known[1] is cluster and known[2] is pods:
        names: tuple[str, ...] = known[-1]  # type: ignore[assignment]
    else:
        names = tuple(_podgroup_names(cluster, pods))
    groups = (HEAD_GROUP, *(g.name for g in cluster.worker_groups))
    return (
        config, cluster, pods,
        tuple(view.podgroup(cluster.namespace, n) for n in names),
        view.workloads_of(cluster.namespace, cluster.name),
        tuple(view.preemptions(GroupKey(cluster.namespace, cluster.name, g)) for g in groups),
        names,
    )


def admission_statuses(
    view: ClusterView, config: PolicyConfig, now: float
) -> dict[tuple[str, str], Derivation]:
    """Every RayCluster's status, by (namespace, name)."""
    return {(c.namespace, c.name): admission_status(c, view, config, now)
            for c in view.rayclusters()}
