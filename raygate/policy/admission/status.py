"""The whole admission status of a RayCluster, and of every RayCluster."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from raygate.policy.admission.autoscalers import signal_inputs
from raygate.policy.admission.gang import GangStatus, gang_of, podgroup_names
from raygate.policy.admission.gates import group_scale_gates
from raygate.policy.admission.groups import GroupStatus, group_status
from raygate.policy.admission.pods import PodStatus, derive_pod, is_listed, pod_facts
from raygate.policy.admission.states import PodState
from raygate.policy.admission.verdicts import SKIPPED_FOR_SIBLING
from raygate.policy.classify import HEAD_GROUP
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.model import Condition, GroupKey, PodView, RayClusterView
from raygate.policy.room import GpuRoom
from raygate.policy.scale_up import scale_up_batch

HELD_BATCH_RECHECK_SECONDS = 1.0
"""How often a held scale-up's status is derived again: whether it fits reads the nodes,
no input the cache tracks per RayCluster, and a batch that fits goes at once."""
ROOM_RECHECK_SECONDS = 5.0
"""How often a status that read whether only GPU nodes have room for a waiting pod is
derived again, for the same reason: its gate is read once per Ray autoscaler loop (5 s),
and a RayCluster with waiting pods, the common case, is derived no more often than that
for it."""
NO_ROOM = frozenset({PodState.WAITING_FOR_CAPACITY, PodState.UNSCHEDULABLE})
"""The states of a pod the scheduler found no room for: whether only GPU nodes have some
is asked of these (``room.GpuRoom``)."""


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


def sibling_verdicts(pods: Iterable[PodView]) -> dict[str, Condition]:
    """Per group, the ``PodScheduled=False`` condition of one of its pods that holds a
    verdict (not Volcano's "skipped for a sibling")."""
    found: dict[str, Condition] = {}
    for pod in pods:
        scheduled = pod.condition("PodScheduled")
        if (scheduled is not None and scheduled.status == "False"
                and SKIPPED_FOR_SIBLING not in scheduled.message):
            found.setdefault(pod.group_key.group, scheduled)
    return found


def admission_status(
    cluster: RayClusterView, view: ClusterView, config: PolicyConfig, now: float
) -> Derivation:
    """The admission status of one RayCluster at ``now``."""
    pods = view.cluster_pods(cluster.namespace, cluster.name)
    gang = gang_of(cluster, pods, view)
    deadlines: list[float] = []
    statuses: list[PodStatus] = []
    siblings = sibling_verdicts(pods)
    batch = scale_up_batch(cluster, view, config, now)
    room = GpuRoom(view, config, now)
    if batch is not None and not batch.release:
        # Whether it fits reads every node: look again each second while it is held.
        deadlines.append(now + HELD_BATCH_RECHECK_SECONDS)
    for pod in pods:
        if not is_listed(pod):
            continue
        status, until = derive_pod(pod_facts(pod, gang, config, now, siblings, view=view,
                                             batch=batch))
        if config.scale_gates and status.state in NO_ROOM and (why := room.why(pod)):
            status = replace(status, gpu_room=why)
        statuses.append(status)
        if until is not None:
            deadlines.append(until)
    statuses.sort(key=lambda s: (s.group != HEAD_GROUP, s.group, s.name, s.uid))
    if room.read:
        deadlines.append(now + ROOM_RECHECK_SECONDS)
    by_group: dict[str, list[PodStatus]] = {}
    for status in statuses:
        by_group.setdefault(status.group, []).append(status)
    groups: list[GroupStatus] = []
    for name in (HEAD_GROUP, *(g.name for g in cluster.worker_groups)):
        group, until = group_status(cluster, name, view, gang=gang.status,
                              pods=by_group.get(name, ()), config=config, now=now)
        spec = cluster.worker_group(name)
        groups.append(replace(group, scale_gates=group_scale_gates(
            group, by_group.get(name, ()), spec.scale_gates if spec is not None else (),
            writing=config.scale_gates)))
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
        names = tuple(podgroup_names(cluster, pods))
    groups = (HEAD_GROUP, *(g.name for g in cluster.worker_groups))
    return (
        config, cluster, pods,
        tuple(view.podgroup(cluster.namespace, n) for n in names),
        view.workloads_of(cluster.namespace, cluster.name),
        tuple(view.preemptions(GroupKey(cluster.namespace, cluster.name, g)) for g in groups),
        signal_inputs(pods, view),
        names,
    )


def admission_statuses(
    view: ClusterView, config: PolicyConfig, now: float
) -> dict[tuple[str, str], Derivation]:
    """Every RayCluster's status, by (namespace, name)."""
    return {(c.namespace, c.name): admission_status(c, view, config, now)
            for c in view.rayclusters()}
