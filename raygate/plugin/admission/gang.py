"""The gang of a RayCluster: the Volcano PodGroup or Kueue Workload that admits it, its
phase, whether it is admitted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from raygate.plugin.admission.states import is_running
from raygate.plugin.model import (
    ANNOTATION_GROUP_NAME,
    ClusterView,
    Condition,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkloadView,
)


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
    "Pending": "the gang waits for Volcano to find room for all its members",
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
    return GangFacts(GangStatus(source, pg.phase, admitted, pg.min_member, running, reason),
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
    # clamp, suspended groups included) × numOfHosts.
    return 1 + sum((g.replicas if g.replicas is not None else 1) * g.num_of_hosts
                   for g in cluster.worker_groups)


def _workload_gang(wl: WorkloadView, cluster: RayClusterView, running: int) -> GangFacts:
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
    return GangFacts(GangStatus(source, phase, admitted, _kueue_pod_count(cluster), running,
                            reason), None)


def _pick_workload(workloads: Iterable[WorkloadView]) -> WorkloadView | None:
    """Of several Workloads (elastic slices), the live one: not Finished (an old slice
    is Finished with WorkloadSliceReplaced), admitted first, then by name."""

    def key(wl: WorkloadView) -> tuple[bool, bool, str]:
        phase = _workload_phase(wl)
        return (phase == "Finished", phase != "Admitted", wl.name)

    return min(workloads, key=key, default=None)


def podgroup_names(cluster: RayClusterView, pods: Iterable[PodView]) -> list[str]:
    # KubeRay names the Volcano PodGroup ray-<name>-pg and annotates every pod with it;
    # a RayJob's PodGroup carries the RayJob's name, found through the pods' annotation.
    names = [f"ray-{cluster.name}-pg"]
    return names + sorted(
        {p.annotations.get(ANNOTATION_GROUP_NAME, "") for p in pods} - {"", *names})


def gang_of(cluster: RayClusterView, pods: tuple[PodView, ...], view: ClusterView) -> GangFacts:
    running = sum(1 for p in pods if is_running(p))
    for name in podgroup_names(cluster, pods):
        pg = view.podgroup(cluster.namespace, name)
        if pg is not None:
            return _podgroup_gang(pg, running)
    workload = _pick_workload(view.workloads_of(cluster.namespace, cluster.name))
    if workload is not None:
        return _workload_gang(workload, cluster, running)
    return GangFacts(GangStatus(None, "", True, 0, running,
                            "no PodGroup or Kueue Workload gates this RayCluster"), None)
