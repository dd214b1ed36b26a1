"""The cluster cache: an indexed, immutable snapshot that a request reads without locks.

A source (snapshot files today, list/watch later) builds a new ``Snapshot`` and swaps it
into ``ClusterCache.snapshot`` in one assignment; a request takes the reference once and
reads a consistent view for its whole life. ``Snapshot`` implements ``plugin``'s
``ClusterView`` and precomputes what the hot path asks per node.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from plugin.classify import gpu_node_reason
from plugin.config import PolicyConfig
from plugin.model import (
    GroupKey,
    NodeView,
    PodGroupView,
    PodView,
    PreemptionRecord,
    RayClusterView,
    WorkloadView,
)
from plugin.placement import score

__all__ = ["ClusterCache", "ClusterObjects", "Snapshot"]

# kube-scheduler's DisruptionTarget reason for its own preemptions; Volcano writes the
# same (ecosystem.md §4.1, §2.4).
PREEMPTION_REASON = "PreemptionByScheduler"


@dataclass(frozen=True)
class ClusterObjects:
    """Everything a source delivered, as policy views."""

    nodes: tuple[NodeView, ...] = ()
    pods: tuple[PodView, ...] = ()
    rayclusters: tuple[RayClusterView, ...] = ()
    podgroups: tuple[PodGroupView, ...] = ()
    workloads: tuple[WorkloadView, ...] = ()
    ignored: Counter[str] = field(default_factory=Counter)
    """Objects of kinds raygate does not use, by kind."""


def preemption_record(pod: PodView, on_gpu_node: bool) -> PreemptionRecord | None:
    """The thrash-guard record of a Ray pod the scheduler preempted, if it was."""
    if not pod.is_ray or not pod.node_name:
        return None
    cond = pod.condition("DisruptionTarget")
    if cond is None or cond.status != "True" or cond.reason != PREEMPTION_REASON:
        return None
    at = cond.last_transition if cond.last_transition is not None else pod.deleted
    if at is None:
        return None
    return PreemptionRecord(pod.group_key, pod.uid, pod.node_name, on_gpu_node, at)


class Snapshot:
    """One immutable, indexed state of the cluster. Implements ``plugin.model.ClusterView``."""

    def __init__(
        self,
        objects: ClusterObjects,
        config: PolicyConfig,
        remembered_preemptions: Iterable[PreemptionRecord] = (),
    ) -> None:
        self.objects = objects
        self.config = config
        self._nodes = {n.name: n for n in objects.nodes}
        gpu = {n.name: gpu_node_reason(n, config) is not None for n in objects.nodes}
        self._gpu = gpu
        self.gpu_node_names: frozenset[str] = frozenset(n for n, g in gpu.items() if g)
        # Reply bytes built once per node, not per request: the prioritize entry of each
        # known node for a managed pod (the score depends only on the node's class).
        self.prioritize_entries: dict[str, bytes] = {
            name: b'{"Host":%s,"Score":%d}' % (msgspec.json.encode(name), score(is_gpu))
            for name, is_gpu in gpu.items()
        }
        self._pods = {p.uid: p for p in objects.pods}
        by_node: defaultdict[str, list[PodView]] = defaultdict(list)
        by_group: defaultdict[GroupKey, list[PodView]] = defaultdict(list)
        by_cluster: defaultdict[tuple[str, str], list[PodView]] = defaultdict(list)
        scheduled: Counter[GroupKey] = Counter()
        preemptions: defaultdict[GroupKey, list[PreemptionRecord]] = defaultdict(list)
        for remembered in remembered_preemptions:
            preemptions[remembered.group].append(remembered)
        for pod in objects.pods:
            if pod.node_name:
                by_node[pod.node_name].append(pod)
            if pod.is_ray:
                key = pod.group_key
                by_group[key].append(pod)
                by_cluster[(key.namespace, key.cluster)].append(pod)
                if pod.node_name and not pod.terminal and pod.deleted is None:
                    scheduled[key] += 1
                record = preemption_record(pod, gpu.get(pod.node_name, False))
                if record is not None and record not in preemptions[record.group]:
                    preemptions[record.group].append(record)
        self._by_node = {k: tuple(v) for k, v in by_node.items()}
        self._by_group = {k: tuple(v) for k, v in by_group.items()}
        self._scheduled = dict(scheduled)
        self._preemptions = {k: tuple(v) for k, v in preemptions.items()}
        self._by_cluster = {k: tuple(v) for k, v in by_cluster.items()}
        self._rayclusters = {(r.namespace, r.name): r for r in objects.rayclusters}
        self._podgroups = {(g.namespace, g.name): g for g in objects.podgroups}
        workloads: defaultdict[tuple[str, str], list[WorkloadView]] = defaultdict(list)
        for workload in objects.workloads:
            if workload.owner is not None and workload.owner.kind == "RayCluster":
                workloads[(workload.namespace, workload.owner.name)].append(workload)
        self._workloads = {k: tuple(v) for k, v in workloads.items()}

    # --- plugin.model.ClusterView -------------------------------------------------------
    def node(self, name: str) -> NodeView | None:
        return self._nodes.get(name)

    def is_gpu_node(self, name: str) -> bool | None:
        return self._gpu.get(name)

    def pod(self, uid: str) -> PodView | None:
        return self._pods.get(uid)

    def pods_on_node(self, name: str) -> tuple[PodView, ...]:
        return self._by_node.get(name, ())

    def group_pods(self, key: GroupKey) -> tuple[PodView, ...]:
        return self._by_group.get(key, ())

    def scheduled_count(self, key: GroupKey) -> int:
        return self._scheduled.get(key, 0)

    def raycluster(self, namespace: str, name: str) -> RayClusterView | None:
        return self._rayclusters.get((namespace, name))

    def preemptions(self, key: GroupKey) -> tuple[PreemptionRecord, ...]:
        return self._preemptions.get(key, ())

    def rayclusters(self) -> tuple[RayClusterView, ...]:
        return self.objects.rayclusters

    def cluster_pods(self, namespace: str, cluster: str) -> tuple[PodView, ...]:
        return self._by_cluster.get((namespace, cluster), ())

    def podgroup(self, namespace: str, name: str) -> PodGroupView | None:
        return self._podgroups.get((namespace, name))

    def workloads_of(self, namespace: str, cluster: str) -> tuple[WorkloadView, ...]:
        return self._workloads.get((namespace, cluster), ())

    # --- for status endpoints and logs --------------------------------------------------
    def counts(self) -> dict[str, int]:
        o = self.objects
        return {
            "nodes": len(o.nodes),
            "pods": len(o.pods),
            "rayclusters": len(o.rayclusters),
            "podgroups": len(o.podgroups),
            "workloads": len(o.workloads),
        }


class ClusterCache:
    """Holds the current snapshot. Readers take ``cache.snapshot`` once per request; a
    source replaces it whole (one reference assignment, atomic under the GIL)."""

    def __init__(self, config: PolicyConfig, source: str) -> None:
        self.source = source
        self.snapshot = Snapshot(ClusterObjects(), config)
        self.ready = False
        self._listeners: list[Callable[[Snapshot], None]] = []

    def publish(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` the current one, then tell every listener (in the publishing
        thread: a listener must be quick and must not block, e.g. schedule work on its
        own event loop with ``call_soon_threadsafe``)."""
        self.snapshot = snapshot
        self.ready = True
        for listener in list(self._listeners):
            listener(snapshot)

    def add_listener(self, listener: Callable[[Snapshot], None]) -> Callable[[], None]:
        """Call ``listener`` after each publish; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)
