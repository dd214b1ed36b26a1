"""The gang of a RayCluster: the Volcano PodGroup, Kubernetes' own PodGroup or Kueue
Workload that admits it, its phase, whether it is admitted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from raygate.policy.admission.states import is_running
from raygate.policy.cluster_view import ClusterView
from raygate.policy.model import (
    ANNOTATION_GROUP_NAME,
    Condition,
    GangGroupView,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkloadView,
)


@dataclass(frozen=True, slots=True)
class GangSource:
    kind: str  # "PodGroup" (Volcano's) | GANG_GROUP (Kubernetes') | "Workload" (Kueue's)
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
    """PodGroup Running; Workload ``Admitted=True``; true with no gang source, unless a
    RayJob's or RayService's Workload is not known yet (``_not_known_yet``)."""
    min_member: int
    """PodGroup ``spec.minMember``; for a Workload, the pods of its pod sets as Kueue builds
    them (head + Σ replicas × numOfHosts); 0 with no gang source."""
    running: int
    """Pods of the RayCluster running (bound, phase Running, ready, not going away)."""
    reason: str
    replaces: str = ""
    """For a Kueue Workload that is an elastic RayCluster's new slice (a scale-up): the
    slice it replaces (``<namespace>/<name>``), which still admits the running pods."""


@dataclass(frozen=True, slots=True)
class GangFacts:
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
    # volcano-sh/apis scheduling/v1beta1 types.go
    # Pending: Volcano's enqueue action has not accepted the gang into its queue (the
    # queue's capability, or the whole cluster, is short of its minResources).
    "Pending": "the gang waits for its queue to accept it",
    "Inqueue": "the queue accepted the gang, and Volcano binds no member until all fit",
    "Running": "Volcano admitted the gang (its minMember pods are scheduled)",
    "Unknown": "part of the gang runs and the rest cannot be placed",
    "Completed": "every member completed",
    "": "Volcano has not processed the PodGroup yet",
})


def _podgroup_gang(pg: PodGroupView, running: int) -> GangFacts:
    source = GangSource("PodGroup", pg.namespace, pg.name)
    admitted = pg.phase == "Running"
    unschedulable = _latest(pg.conditions, "Unschedulable")
    scheduled = _latest(pg.conditions, "Scheduled")
    standing = None
    if (unschedulable is not None and unschedulable.status == "True"
            and unschedulable.reason == "NotEnoughResources"
            # Volcano leaves the old condition behind when it later sets Scheduled=True.
            and not (scheduled is not None and scheduled.status == "True"
                     and (scheduled.last_transition or 0.0)
                     >= (unschedulable.last_transition or 0.0))):
        standing = unschedulable
    # Volcano's gang plugin writes that condition before the queue accepts the gang
    # (phase Pending) too: that wait is the queue's admission, not one for capacity.
    capacity = standing if pg.phase != "Pending" else None
    what = _PODGROUP_PHASES.get(pg.phase, "a phase raygate does not know")
    reason = f"{source} is {pg.phase or 'without a phase'}; {what}"
    if standing is not None:
        reason += f"; NotEnoughResources: {standing.message}" if standing.message else (
            "; NotEnoughResources")
    return GangFacts(GangStatus(source, pg.phase, admitted, pg.min_member, running, reason),
                 capacity)


GANG_GROUP = "PodGroup.scheduling.k8s.io"
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
"""kube-scheduler sets it True once the gang was placed whole; it never turns back, even
when members are evicted later (False: ``Unschedulable`` or ``SchedulerError``)."""


def _gang_groups_gang(groups: list[GangGroupView], running: int) -> GangFacts:
    """Kubernetes' own gangs (KubeRay's ``kubernetes-was`` makes one per RayCluster): the
    gang is admitted once every PodGroup is ``PodGroupInitiallyScheduled``; until then
    kube-scheduler binds none of a group's pods unless ``minCount`` of them fit at once."""
    first = groups[0]
    source = GangSource(GANG_GROUP, first.namespace, first.name)
    waiting = []
    for group in groups:
        cond = _latest(group.conditions, INITIALLY_SCHEDULED)
        if cond is None or cond.status != "True":
            waiting.append((group, cond))
    minimum = sum(g.min_count or 0 for g in groups)
    if not waiting:
        return GangFacts(GangStatus(source, "Scheduled", True, minimum, running,
                                    f"{source} was scheduled whole (minCount {minimum})"),
                         None)
    group, cond = waiting[0]
    phase = (cond.reason if cond is not None else "") or "Pending"
    said = f": {_detail(cond)}" if cond is not None else ": kube-scheduler has not tried it yet"
    reason = (f"{GANG_GROUP} {group.namespace}/{group.name} is not scheduled yet "
              f"(minCount {group.min_count}; kube-scheduler binds its pods all or "
              f"nothing){said}")
    return GangFacts(GangStatus(source, phase, False, minimum, running, reason), None)


def _true(wl: WorkloadView, type_: str) -> Condition | None:
    cond = _latest(wl.conditions, type_)
    return cond if cond is not None and cond.status == "True" else None


def _workload_phase(wl: WorkloadView) -> str:
    # Kueue's own order (pkg/workload Status): finished, admitted, quota reserved, pending.
    for type_ in ("Finished", "Admitted", "QuotaReserved"):
        if _true(wl, type_):
            return type_
    return "Pending"


def _kueue_pod_count(wl: WorkloadView, cluster: RayClusterView) -> int:
    if wl.pods is not None:
        return wl.pods  # what the Workload asks quota for (an elastic slice: its own count)
    # Kueue's RayCluster pod sets: the head, and per worker group `replicas` (1 when
    # unset, no clamp, suspended groups included) × numOfHosts.
    return 1 + sum((g.replicas if g.replicas is not None else 1) * g.num_of_hosts
                   for g in cluster.worker_groups)


def _detail(cond: Condition) -> str:
    detail = f"{cond.type}={cond.status}" + (f" ({cond.reason})" if cond.reason else "")
    return f"{detail}: {cond.message}" if cond.message else detail


def _not_admitted_why(wl: WorkloadView) -> str:
    """Why the Workload is not admitted, most current first: finished; why quota is not
    reserved (Kueue's ``Pending``/``Inadmissible`` message); else why reserved quota is no
    admission yet (checks). An eviction is context: Kueue keeps ``Evicted=True`` until
    quota is reserved again."""
    finished = _true(wl, "Finished")
    if finished is not None:
        return _detail(finished)
    quota = _latest(wl.conditions, "QuotaReserved")
    admitted = _latest(wl.conditions, "Admitted")
    current = quota if quota is not None and quota.status != "True" else admitted
    evicted = _true(wl, "Evicted")
    parts = [_detail(current)] if current is not None else []
    if evicted is not None:
        parts.append(f"after {_detail(evicted)}")
    return "; ".join(parts) or "Kueue has not reserved quota for it yet"


def _workload_gang(wl: WorkloadView, cluster: RayClusterView, running: int) -> GangFacts:
    source = GangSource("Workload", wl.namespace, wl.name)
    evicted = _true(wl, "Evicted")
    still_admitted = _true(wl, "Admitted") is not None
    # While Kueue tears an evicted (preempted) Workload down it is still Admitted=True,
    # for seconds: the gang is going, not admitted.
    admitted = still_admitted and evicted is None
    phase = _workload_phase(wl)
    # A new elastic slice: Kueue keeps the old one admitted (and the pods it admitted
    # running) until it reserves quota for the whole new count, then finishes the old.
    what = (f"{source} (the elastic slice that replaces {wl.replacement_for} for a "
            "scale-up)" if wl.replacement_for else str(source))
    if admitted:
        reason = f"{what} is Admitted: quota reserved and every admission check ready"
    elif evicted is not None and still_admitted:
        phase = "Evicted"
        reason = f"{what} is being evicted: {_detail(evicted)}"
    else:
        reason = f"{what} is not admitted: {_not_admitted_why(wl)}"
        if wl.replacement_for:
            reason += f"; the running pods keep {wl.replacement_for}'s admission"
    return GangFacts(GangStatus(source, phase, admitted, _kueue_pod_count(wl, cluster),
                                running, reason, wl.replacement_for), None)


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The LocalQueue a Kueue-managed object names (KubeRay copies a RayJob's onto its
RayCluster)."""
KUEUE_JOBS = frozenset({"RayJob", "RayService"})
"""The owners whose Workload admits the RayCluster they make (Kueue's ``ray.io/rayjob`` and
``ray.io/rayservice`` integrations, on as Kueue ships)."""


def workload_of(wl: WorkloadView, cluster: RayClusterView) -> bool:
    """Is ``wl`` this RayCluster's (owned by it or by its owner)? A Workload left by a
    deleted RayCluster (or RayJob) of the same name has another owner UID."""
    uid = wl.owner.uid if wl.owner is not None else ""
    if not uid:
        return True
    if wl.owner is not None and wl.owner.kind == "RayCluster":
        return not cluster.uid or uid == cluster.uid
    return cluster.owner is not None and uid == cluster.owner.uid


def _not_known_yet(cluster: RayClusterView, running: int) -> GangFacts | None:
    """A RayCluster of a RayJob or RayService queued in Kueue (KubeRay copies the owner's
    labels onto the cluster it makes) whose Workload raygate has not seen: not admitted
    until it has (the Workload's watch event may come after the RayCluster's)."""
    owner, queue = cluster.owner, cluster.labels.get(KUEUE_QUEUE_LABEL)
    if owner is None or owner.kind not in KUEUE_JOBS or not queue:
        return None
    reason = (f"{owner.kind} {cluster.namespace}/{owner.name} is queued in Kueue "
              f"(LocalQueue {queue}); its Workload is not known yet")
    return GangFacts(GangStatus(None, "Pending", False, 0, running, reason), None)


def _pick_workload(workloads: Iterable[WorkloadView]) -> WorkloadView | None:
    """Of several Workloads (elastic slices), the current one: not Finished (an old slice
    ends Finished, WorkloadSliceReplaced); of two live ones, the new slice that replaces
    the other (Kueue's ``workload-slice-replacement-for``: a scale-up waiting for quota);
    else admitted first, then by name."""
    workloads = tuple(workloads)
    live = {f"{wl.namespace}/{wl.name}" for wl in workloads if _true(wl, "Finished") is None}

    def key(wl: WorkloadView) -> tuple[bool, bool, bool, str]:
        phase = _workload_phase(wl)
        return (phase == "Finished", wl.replacement_for not in live, phase != "Admitted",
                wl.name)

    return min(workloads, key=key, default=None)


def podgroup_names(cluster: RayClusterView, pods: Iterable[PodView]) -> list[str]:
    """The PodGroups that may gate the cluster, Volcano's and Kubernetes' own."""
    # KubeRay names the Volcano PodGroup ray-<name>-pg and annotates every pod with it;
    # a RayJob's PodGroup carries the RayJob's name, found through the pods' annotation.
    # Kubernetes' own PodGroup is named in each member's spec.schedulingGroup.
    pods = tuple(pods)
    names = [f"ray-{cluster.name}-pg"]
    named = {p.annotations.get(ANNOTATION_GROUP_NAME, "") for p in pods}
    named |= {p.scheduling_group for p in pods}
    return names + sorted(named - {"", *names})


def gang_of(cluster: RayClusterView, pods: tuple[PodView, ...], view: ClusterView) -> GangFacts:
    running = sum(1 for p in pods if is_running(p))
    names = podgroup_names(cluster, pods)
    for name in names:
        pg = view.podgroup(cluster.namespace, name)
        if pg is not None:
            return _podgroup_gang(pg, running)
    groups = [g for name in names
              if (g := view.gang_group(cluster.namespace, name)) is not None]
    if groups:
        return _gang_groups_gang(groups, running)
    workload = _pick_workload(wl for wl in view.workloads_of(cluster.namespace, cluster.name)
                              if workload_of(wl, cluster))
    if workload is not None:
        return _workload_gang(workload, cluster, running)
    unknown = _not_known_yet(cluster, running)
    if unknown is not None:
        return unknown
    if cluster.suspended:
        # Kueue suspends a queued RayCluster, and keeps it suspended while it replaces
        # the Workload (a non-elastic cluster rescaled): nothing runs until resumed.
        return GangFacts(GangStatus(None, "Suspended", False, 0, running,
                                    "the RayCluster is suspended (spec.suspend): KubeRay "
                                    "creates no pods until it is resumed"), None)
    return GangFacts(GangStatus(None, "", True, 0, running,
                            "no PodGroup or Kueue Workload gates this RayCluster"), None)
