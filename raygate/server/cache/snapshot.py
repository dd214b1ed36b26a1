"""The cluster cache: indexed, immutable snapshots that a request reads without locks.

A request takes ``cache.snapshot`` once and reads one consistent state for its whole
life. A source makes the next snapshot and swaps it in with one reference assignment
(``ClusterCache.publish``): snapshot files build one whole (``editor.build_snapshot(objects,
config)``); the Kubernetes list/watch (``raygate.server.kube``) edits the current one, a
batch of watch events at a time (``SnapshotEditor(snapshot)`` ... ``finish()``).

Every index is a persistent map (``immutables.Map``, the hash array mapped trie behind
CPython's contextvars), all of them held by one ``indexes.Indexes``: an edit copies only
the O(log n) path to what changed and shares everything else with the snapshot it started
from, so a watch event costs microseconds at 150,000 pods and the snapshot a reader holds
never changes under it. Two hot-path structures stay plain, because kube-scheduler asks
them once per node name and a HAMT lookup is several times slower than a dict's:
``gpu_node_names`` (a frozenset) and ``node_classes`` (a dict). They change only when a
node appears, disappears or changes class, and an edit then copies them once (O(nodes)).

Pods are indexed by UID, by node, by RayCluster group and by RayCluster. The tuples of
``pods_on_node``, ``group_pods``, ``cluster_pods`` and ``rayclusters`` come in no
particular order; ``Snapshot`` implements ``raygate.policy.cluster_view.ClusterView``."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, TypeVar

from immutables import Map

from raygate.policy.admission.gang import KUEUE_JOBS, workload_of
from raygate.policy.classify import pod_requests
from raygate.policy.config import PolicyConfig
from raygate.policy.devices import ClaimView, GpuDevices, gpu_devices
from raygate.policy.model import (
    EMPTY,
    GangGroupView,
    GroupKey,
    NodeClaimView,
    NodeView,
    PodEventView,
    PodGroupView,
    PodView,
    PreemptionRecord,
    RayClusterView,
    WorkloadView,
)
from raygate.server.cache.autoscaling import latest
from raygate.server.cache.indexes import PRIMARY, Indexes
from raygate.server.cache.keys import (
    KINDS,
    NODE,
    RAYCLUSTER,
    ClusterKey,
    ClusterObjects,
    ObjectKey,
    View,
)
from raygate.server.cache.maps import Entry, _values
from raygate.server.cache.memo import Memo

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Changes:
    """What an edit changed that admission statuses read: which RayClusters saw their
    object, a pod, a Workload or a preemption record change, and which PodGroups
    changed (a PodGroup belongs to the clusters that name it)."""

    clusters: frozenset[ClusterKey]
    podgroups: frozenset[tuple[str, str]]

    def __or__(self, other: Changes) -> Changes:
        return Changes(self.clusters | other.clusters, self.podgroups | other.podgroups)


def _held(table: Map[Any, Entry[V]], key: Any) -> V | None:
    """The view ``table`` holds under ``key``, if any."""
    entry = table.get(key)
    return None if entry is None else entry[1]


class _Requested:
    """Per node, the summed requests of the pods on it (terminal ones aside), memoised by
    the identity of the node's pod map: an edit replaces only the maps of the nodes it
    touched, so across snapshots an unchanged node is summed once, and nothing is summed
    until asked (only a held all-or-nothing scale-up asks)."""

    def __init__(self, limit: int = 50_000) -> None:
        self._memo: Memo[int, tuple[Map[str, PodView], Mapping[str, int]]] = Memo(limit)

    def of(self, pods: Map[str, PodView] | None) -> Mapping[str, int]:
        if pods is None:
            return EMPTY
        hit = self._memo.get(id(pods))
        if hit is not None and hit[0] is pods:
            return hit[1]
        total: dict[str, int] = {}
        for pod in pods.values():
            if not pod.terminal:  # a terminating pod still holds its room
                for resource, amount in pod_requests(pod).items():
                    total[resource] = total.get(resource, 0) + amount
        # The map is kept with its sum, so its id cannot be reused while the entry lives.
        return self._memo.put(id(pods), (pods, MappingProxyType(total)))[1]


_REQUESTED = _Requested()
_serials = itertools.count(1)
"""Snapshot serial numbers, unique in the process."""


class Snapshot:
    """One immutable, indexed state of the cluster. Implements
    ``raygate.policy.cluster_view.ClusterView``.

    Made by ``raygate.server.cache.editor`` only: ``build_snapshot(objects, config)``
    builds one whole, ``SnapshotEditor(snapshot)`` starts the next from this one.
    Nothing a snapshot holds is ever modified after it is built.
    """

    config: PolicyConfig
    gpu_node_names: frozenset[str]
    """GPU nodes by name: ``in`` is the filter's per-node question."""
    node_classes: dict[str, bool]
    """Is each known node a GPU node. Read-only, and the very same dict in the snapshots
    that follow until a node appears, goes or changes class: its identity tells a reader
    that memoises per node class (the scheduler front's prioritize entries) when to look
    again."""
    dra_gpu_nodes: dict[str, str]
    """Node name -> why its ResourceSlices make it a GPU node (``devices.dra_node_reason``);
    read-only, decided when a slice or a DeviceClass changes."""
    serial: int
    base_serial: int
    """The serial of the snapshot this one was edited from (0: built from nothing)."""
    changes: Changes | None
    """What changed from the base; None when unknown (a snapshot built whole, a bulk
    load, a policy change): a reader must look at everything."""

    indexes: Indexes
    _gpu_devices: GpuDevices
    _follows_claims: bool
    _ignored: Counter[str]

    @classmethod
    def empty(cls, config: PolicyConfig) -> Snapshot:
        snap = cls.__new__(cls)
        snap.config = config
        snap.serial, snap.base_serial, snap.changes = next(_serials), 0, None
        snap.gpu_node_names = frozenset()
        snap.node_classes = {}
        snap._gpu_devices, snap.dra_gpu_nodes = gpu_devices((), config), {}
        snap.indexes = Indexes()
        snap._follows_claims = False
        snap._ignored = Counter()
        return snap

    # --- policy.cluster_view.ClusterView ---------------------------------------------------
    def node(self, name: str) -> NodeView | None:
        return _held(self.indexes.nodes, name)

    def nodes(self) -> tuple[NodeView, ...]:
        return self._node_views

    def is_gpu_node(self, name: str) -> bool | None:
        return self.node_classes.get(name)

    def pod(self, uid: str) -> PodView | None:
        return _held(self.indexes.pods, uid)

    def pods_on_node(self, name: str) -> tuple[PodView, ...]:
        return _values(self.indexes.by_node.get(name))

    def requested_on(self, name: str) -> Mapping[str, int]:
        return _REQUESTED.of(self.indexes.by_node.get(name))

    def group_pods(self, key: GroupKey) -> tuple[PodView, ...]:
        return _values(self.indexes.by_group.get(key))

    def scheduled_count(self, key: GroupKey) -> int:
        return self.indexes.scheduled.get(key, 0)

    def raycluster(self, namespace: str, name: str) -> RayClusterView | None:
        return _held(self.indexes.rayclusters, (namespace, name))

    def preemptions(self, key: GroupKey) -> tuple[PreemptionRecord, ...]:
        return self.indexes.preemptions.get(key, ())

    def rayclusters(self) -> tuple[RayClusterView, ...]:
        return self._raycluster_views

    def cluster_pods(self, namespace: str, cluster: str) -> tuple[PodView, ...]:
        return _values(self.indexes.by_cluster.get((namespace, cluster)))

    def pod_clusters(self) -> tuple[tuple[str, str], ...]:
        """``(namespace, RayCluster)`` of every Ray pod's cluster, known or not."""
        return tuple(self.indexes.by_cluster.keys())

    def podgroup(self, namespace: str, name: str) -> PodGroupView | None:
        return _held(self.indexes.podgroups, (namespace, name))

    def gang_group(self, namespace: str, name: str) -> GangGroupView | None:
        return _held(self.indexes.gang_groups, (namespace, name))

    def workloads_of(self, namespace: str, cluster: str) -> tuple[WorkloadView, ...]:
        own = _values(self.indexes.workloads_of.get((namespace, cluster)))
        entry = self.indexes.rayclusters.get((namespace, cluster))
        if entry is None:
            return own
        view = entry[1]
        owner = view.owner
        if (owner is None or owner.kind not in KUEUE_JOBS or not owner.uid
                or any(workload_of(w, view) for w in own)):
            return own
        # The cluster a RayJob or RayService made: the Workload of its owner admits it.
        return _values(self.indexes.workloads_by_owner.get(owner.uid))

    def pod_event(self, uid: str) -> PodEventView | None:
        return latest(_values(self.indexes.events_of.get(uid)))

    def node_claim(self, name: str) -> NodeClaimView | None:
        return _held(self.indexes.nodeclaims, name)

    def follows_node_claims(self) -> bool:
        return self._follows_claims

    def gpu_devices(self) -> GpuDevices:
        return self._gpu_devices

    def resource_claim(self, namespace: str, name: str) -> ClaimView | None:
        return _held(self.indexes.resourceclaims, (namespace, name))

    def claim_template(self, namespace: str, name: str) -> ClaimView | None:
        return _held(self.indexes.resourceclaimtemplates, (namespace, name))

    # --- for status endpoints, logs and the list/watch source ---------------------------
    @cached_property
    def _raycluster_views(self) -> tuple[RayClusterView, ...]:
        return self._views(RAYCLUSTER)

    @cached_property
    def _node_views(self) -> tuple[NodeView, ...]:
        return self._views(NODE)

    def _views(self, kind: str) -> tuple[Any, ...]:
        return tuple(view for _, view in self.primary(kind).values())

    @cached_property
    def objects(self) -> ClusterObjects:
        """Every object of the snapshot (built on first use: O(objects))."""
        return ClusterObjects(**{PRIMARY[kind]: self._views(kind) for kind in KINDS},
                              ignored=Counter(self._ignored))

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self.indexes, name)) for name in PRIMARY.values()}

    def count(self, kind: str) -> int:
        return len(self.primary(kind))

    def version_of(self, kind: str, key: ObjectKey) -> Entry[View] | None:
        """(resourceVersion, view) of the object ``key`` of ``kind``, if held."""
        entry: Entry[View] | None = self.primary(kind).get(key)
        return entry

    def primary(self, kind: str) -> Map[Any, Entry[Any]]:
        """The table of ``kind``'s objects: (resourceVersion, view) by object key."""
        table: Map[Any, Entry[Any]] = getattr(self.indexes, PRIMARY[kind])
        return table
