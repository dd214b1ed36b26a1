"""The cluster cache: indexed, immutable snapshots that a request reads without locks.

A request takes ``cache.snapshot`` once and reads one consistent state for its whole
life. A source makes the next snapshot and swaps it in with one reference assignment
(``ClusterCache.publish``): snapshot files build one whole (``Snapshot(objects,
config)``); the Kubernetes list/watch (``raygate.extender.kube``) edits the current one, a batch
of watch events at a time (``snapshot.edit()`` ... ``finish()``).

Every index is a persistent map (``immutables.Map``, the hash array mapped trie behind
CPython's contextvars): an edit copies only the O(log n) path to what changed and shares
everything else with the snapshot it started from, so a watch event costs microseconds
at 150,000 pods and the snapshot a reader holds never changes under it. Two hot-path
structures stay plain, because kube-scheduler asks them once per node name and a HAMT
lookup is several times slower than a dict's: ``gpu_node_names`` (a frozenset) and
``prioritize_entries`` (a dict). They change only when a node appears, disappears or
changes class, and an edit then copies them once (O(nodes)).

Pods are indexed by UID, by node, by RayCluster group and by RayCluster. The tuples of
``pods_on_node``, ``group_pods``, ``cluster_pods`` and ``rayclusters`` come in no
particular order; ``Snapshot`` implements ``raygate.plugin.model.ClusterView``.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, cast

import msgspec
from immutables import Map

from raygate.extender.wire.scheduler import HostPriority
from raygate.plugin.classify import gpu_node_reason, is_scheduled, preemption_record
from raygate.plugin.config import PolicyConfig
from raygate.plugin.model import (
    GroupKey,
    NodeView,
    PodGroupView,
    PodView,
    PreemptionRecord,
    RayClusterView,
    WorkloadView,
)
from raygate.plugin.placement import score

if TYPE_CHECKING:
    from immutables._protocols import MapMutation

HOST_PRIORITY = msgspec.json.Encoder()
"""Each node's prioritize entry (``HostPriority``, kube-scheduler's PascalCase) is encoded
when the node changes, not per request: prioritize joins the entries' bytes."""

__all__ = [
    "KINDS",
    "Changes",
    "ClusterCache",
    "ClusterObjects",
    "KindReport",
    "KindSync",
    "Snapshot",
    "SnapshotEditor",
    "SyncStatus",
    "View",
    "key_of",
    "object_key",
]

NODE, POD, RAYCLUSTER, PODGROUP, WORKLOAD = "Node", "Pod", "RayCluster", "PodGroup", "Workload"
KINDS = (NODE, POD, RAYCLUSTER, PODGROUP, WORKLOAD)
"""The kinds the cache holds, in the order a whole snapshot is built (nodes first, so a
pod's node class is known when its preemption is recorded)."""

View: TypeAlias = NodeView | PodView | RayClusterView | PodGroupView | WorkloadView
ClusterKey: TypeAlias = tuple[str, str]
"""(namespace, name) of a RayCluster."""
ObjectKey: TypeAlias = str | tuple[str, str]
"""How the cache names an object of a kind: a node by name, a pod by UID, the namespaced
custom resources by (namespace, name)."""

V = TypeVar("V")
KT = TypeVar("KT")
MT = TypeVar("MT")
VT = TypeVar("VT")
Entry: TypeAlias = tuple[str, V]
"""(resourceVersion, view): the version lets a re-list keep the views it already has."""

_EMPTY: Map[Any, Any] = Map()


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


def pod_key(uid: str, namespace: str, name: str) -> str:
    # Every pod the API server returns has a UID; a hand-written snapshot file may not.
    return uid or f"{namespace}/{name}"


def object_key(kind: str, namespace: str, name: str, uid: str) -> ObjectKey:
    """The key of an object of ``kind`` from its metadata alone (for an object raygate
    could not read, to remove the version it holds)."""
    if kind == POD:
        return pod_key(uid, namespace, name)
    if kind == NODE:
        return name
    return (namespace, name)


def key_of(view: View) -> ObjectKey:
    if isinstance(view, PodView):
        return pod_key(view.uid, view.namespace, view.name)
    if isinstance(view, NodeView):
        return view.name
    return (view.namespace, view.name)


@dataclass(frozen=True, slots=True)
class Changes:
    """What an edit changed that admission statuses read: which RayClusters saw their
    object, a pod, a Workload or a preemption record change, and which PodGroups
    changed (a PodGroup belongs to the clusters that name it)."""

    clusters: frozenset[ClusterKey]
    podgroups: frozenset[tuple[str, str]]

    def __or__(self, other: Changes) -> Changes:
        return Changes(self.clusters | other.clusters, self.podgroups | other.podgroups)


_serials = itertools.count(1)
"""Snapshot serial numbers, unique in the process."""


class Snapshot:
    """One immutable, indexed state of the cluster. Implements ``raygate.plugin.model.ClusterView``.

    ``Snapshot(objects, config)`` builds one whole; ``edit()`` starts the next from this
    one. Nothing a snapshot holds is ever modified after it is built.
    """

    config: PolicyConfig
    gpu_node_names: frozenset[str]
    """GPU nodes by name: ``in`` is the filter's per-node question."""
    prioritize_entries: dict[str, bytes]
    """The prioritize reply entry of each known node for a managed pod, built once per
    node, not per request (the score depends only on the node's class). Read-only."""
    serial: int
    base_serial: int
    """The serial of the snapshot this one was edited from (0: built from nothing)."""
    changes: Changes | None
    """What changed from the base; None when unknown (a snapshot built whole, a bulk
    load, a policy change): a reader must look at everything."""

    _nodes: Map[str, Entry[NodeView]]
    _gpu: dict[str, bool]
    _pods: Map[str, Entry[PodView]]
    _by_node: Map[str, Map[str, PodView]]
    _by_group: Map[GroupKey, Map[str, PodView]]
    _by_cluster: Map[tuple[str, str], Map[str, PodView]]
    _scheduled: Map[GroupKey, int]
    _preemptions: Map[GroupKey, tuple[PreemptionRecord, ...]]
    _rayclusters: Map[tuple[str, str], Entry[RayClusterView]]
    _podgroups: Map[tuple[str, str], Entry[PodGroupView]]
    _workloads: Map[tuple[str, str], Entry[WorkloadView]]
    _workloads_of: Map[tuple[str, str], Map[tuple[str, str], WorkloadView]]
    _ignored: Counter[str]

    def __init__(
        self,
        objects: ClusterObjects,
        config: PolicyConfig,
        remembered_preemptions: Iterable[PreemptionRecord] = (),
    ) -> None:
        editor = SnapshotEditor(Snapshot.empty(config), whole=True)
        editor.remember(remembered_preemptions)
        views: Iterable[View]
        for views in (objects.nodes, objects.pods, objects.rayclusters, objects.podgroups,
                      objects.workloads):
            for view in views:
                editor.upsert(view)
        editor.finish(into=self)
        self._ignored = Counter(objects.ignored)
        # The objects as given: what `objects` answers for a snapshot built whole.
        self.__dict__["objects"] = objects

    @classmethod
    def empty(cls, config: PolicyConfig) -> Snapshot:
        snap = cls.__new__(cls)
        snap.config = config
        snap.serial, snap.base_serial, snap.changes = next(_serials), 0, None
        snap.gpu_node_names = frozenset()
        snap.prioritize_entries = {}
        snap._gpu = {}
        snap._nodes = snap._pods = snap._by_node = snap._by_group = _EMPTY
        snap._by_cluster = snap._scheduled = snap._preemptions = _EMPTY
        snap._rayclusters = snap._podgroups = snap._workloads = snap._workloads_of = _EMPTY
        snap._ignored = Counter()
        return snap

    def edit(self) -> SnapshotEditor:
        """Start the snapshot that follows this one (one writer at a time)."""
        return SnapshotEditor(self)

    def with_config(self, config: PolicyConfig) -> Snapshot:
        """The same objects under another policy (GPU classes and indexes rebuilt:
        O(objects), for a reloaded config file). Versions and preemption records carry
        over, so a later re-list keeps the views it finds unchanged."""
        editor = SnapshotEditor(Snapshot.empty(config), whole=True)
        editor.remember(r for records in self._preemptions.values() for r in records)
        for kind in (NODE, POD, RAYCLUSTER, PODGROUP, WORKLOAD):
            for resource_version, view in self._primary(kind).values():
                editor.upsert(view, resource_version)
        snap = editor.finish()
        snap._ignored = Counter(self._ignored)
        return snap

    # --- plugin.model.ClusterView -------------------------------------------------------
    def node(self, name: str) -> NodeView | None:
        entry = self._nodes.get(name)
        return None if entry is None else entry[1]

    def is_gpu_node(self, name: str) -> bool | None:
        return self._gpu.get(name)

    def pod(self, uid: str) -> PodView | None:
        entry = self._pods.get(uid)
        return None if entry is None else entry[1]

    def pods_on_node(self, name: str) -> tuple[PodView, ...]:
        return _values(self._by_node.get(name))

    def group_pods(self, key: GroupKey) -> tuple[PodView, ...]:
        return _values(self._by_group.get(key))

    def scheduled_count(self, key: GroupKey) -> int:
        return self._scheduled.get(key, 0)

    def raycluster(self, namespace: str, name: str) -> RayClusterView | None:
        entry = self._rayclusters.get((namespace, name))
        return None if entry is None else entry[1]

    def preemptions(self, key: GroupKey) -> tuple[PreemptionRecord, ...]:
        return self._preemptions.get(key, ())

    def rayclusters(self) -> tuple[RayClusterView, ...]:
        return self._raycluster_views

    def cluster_pods(self, namespace: str, cluster: str) -> tuple[PodView, ...]:
        return _values(self._by_cluster.get((namespace, cluster)))

    def podgroup(self, namespace: str, name: str) -> PodGroupView | None:
        entry = self._podgroups.get((namespace, name))
        return None if entry is None else entry[1]

    def workloads_of(self, namespace: str, cluster: str) -> tuple[WorkloadView, ...]:
        return _values(self._workloads_of.get((namespace, cluster)))

    # --- for status endpoints, logs and the list/watch source ---------------------------
    @cached_property
    def _raycluster_views(self) -> tuple[RayClusterView, ...]:
        return tuple(view for _, view in self._rayclusters.values())

    @cached_property
    def objects(self) -> ClusterObjects:
        """Every object of the snapshot (built on first use: O(objects))."""
        return ClusterObjects(
            nodes=tuple(view for _, view in self._nodes.values()),
            pods=tuple(view for _, view in self._pods.values()),
            rayclusters=self._raycluster_views,
            podgroups=tuple(view for _, view in self._podgroups.values()),
            workloads=tuple(view for _, view in self._workloads.values()),
            ignored=Counter(self._ignored),
        )

    def counts(self) -> dict[str, int]:
        return {
            "nodes": len(self._nodes),
            "pods": len(self._pods),
            "rayclusters": len(self._rayclusters),
            "podgroups": len(self._podgroups),
            "workloads": len(self._workloads),
        }

    def count(self, kind: str) -> int:
        return len(self._primary(kind))

    def version_of(self, kind: str, key: ObjectKey) -> Entry[View] | None:
        """(resourceVersion, view) of the object ``key`` of ``kind``, if held."""
        entry: Entry[View] | None = self._primary(kind).get(key)
        return entry

    def _primary(self, kind: str) -> Map[Any, Entry[Any]]:
        tables: dict[str, Map[Any, Entry[Any]]] = {
            NODE: self._nodes, POD: self._pods, RAYCLUSTER: self._rayclusters,
            PODGROUP: self._podgroups, WORKLOAD: self._workloads,
        }
        return tables[kind]


class _Values:
    """``tuple(inner.values())`` for the inner maps of the indexes, built once per map.

    An index entry that no edit touched is the very same map in the next snapshot, so
    its tuple is built on the first read and every later reader, in this snapshot or the
    next ones, gets the same tuple object (callers that compare what they read between
    snapshots see identity, a pointer check). Entries go when their map does."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[weakref.ref[Map[Any, Any]], tuple[Any, ...]]] = {}

    def __call__(self, inner: Map[Any, V] | None) -> tuple[V, ...]:
        if inner is None:
            return ()
        key = id(inner)
        hit = self._memo.get(key)
        if hit is not None and hit[0]() is inner:
            return hit[1]
        values = tuple(inner.values())
        self._memo[key] = (weakref.ref(inner, partial(self._forget, key)), values)
        return values

    def _forget(self, key: int, ref: weakref.ref[Map[Any, Any]]) -> None:
        hit = self._memo.get(key)
        if hit is not None and hit[0] is ref:
            self._memo.pop(key, None)


_values = _Values()


class _Flat(Generic[KT, VT]):
    """A map being edited. Its first write makes a new persistent map (``Map.set``,
    O(log n) copied nodes); from the second on, writes go to one in-place mutation, which
    costs more to open but less per write. Untouched maps cost nothing."""

    __slots__ = ("map", "mut", "touched", "written")

    def __init__(self, base: Map[KT, VT], *, track: bool = False) -> None:
        self.map = base
        self.mut: MapMutation[KT, VT] | None = None
        self.written = False
        self.touched: set[KT] | None = set() if track else None
        """With ``track``: every key written or removed."""

    def get(self, key: KT, default: VT | None = None) -> VT | None:
        mut = self.mut
        return mut.get(key, default) if mut is not None else self.map.get(key, default)

    def __contains__(self, key: object) -> bool:
        mut = self.mut
        return key in mut if mut is not None else key in self.map

    def __len__(self) -> int:
        mut = self.mut
        return len(mut) if mut is not None else len(self.map)

    def set(self, key: KT, value: VT) -> None:
        if self.touched is not None:
            self.touched.add(key)
        mut = self.mut
        if mut is not None:
            mut[key] = value
        elif self.written:
            mut = self.mut = self.map.mutate()
            mut[key] = value
        else:
            self.map, self.written = self.map.set(key, value), True

    def pop(self, key: KT) -> VT | None:
        value = self.get(key)
        if value is None:
            return None
        if self.touched is not None:
            self.touched.add(key)
        mut = self.mut
        if mut is not None:
            del mut[key]
        elif self.written:
            mut = self.mut = self.map.mutate()
            del mut[key]
        else:
            self.map, self.written = self.map.delete(key), True
        return value

    def finish(self) -> Map[KT, VT]:
        """The edited map; the editor stays usable (the next write opens a mutation)."""
        if self.mut is not None:
            self.map, self.mut = self.mut.finish(), None
        return self.map


class _Nested(Generic[KT, MT, VT]):
    """An index of maps (key -> member -> view) being edited: each inner map the edit
    touches is edited once and put back by ``finish``; emptied ones are removed."""

    __slots__ = ("inner", "outer", "touched")

    def __init__(self, base: Map[KT, Map[MT, VT]]) -> None:
        self.outer = _Flat(base)
        self.inner: dict[KT, _Flat[MT, VT]] = {}
        self.touched: set[KT] = set()
        """Every key whose map this edit opened."""

    def _open(self, key: KT) -> _Flat[MT, VT]:
        inner = self.inner.get(key)
        if inner is None:
            inner = self.inner[key] = _Flat(self.outer.get(key) or _EMPTY)
            self.touched.add(key)
        return inner

    def add(self, key: KT, member: MT, value: VT) -> None:
        self._open(key).set(member, value)

    def remove(self, key: KT, member: MT) -> None:
        self._open(key).pop(member)

    def finish(self) -> Map[KT, Map[MT, VT]]:
        for key, inner in self.inner.items():
            done = inner.finish()
            if len(done):
                self.outer.set(key, done)
            else:
                self.outer.pop(key)
        self.inner.clear()
        return self.outer.finish()


class SnapshotEditor:
    """Builds the snapshot that follows ``base`` from upserts, deletes and re-lists.

    ``base`` is never modified: readers may hold it for as long as they like. Each
    operation costs O(log n) per index it touches; ``finish`` returns the new snapshot,
    after which the editor must not be used. One editor per writer: not thread-safe.
    """

    def __init__(self, base: Snapshot, *, whole: bool = False) -> None:
        """``whole``: the edit builds a snapshot from nothing (its changes are not
        itemised: nobody holds the empty base)."""
        self._base = base
        self._config = base.config
        self._nodes = _Flat(base._nodes)
        self._pods = _Flat(base._pods)
        self._by_node = _Nested(base._by_node)
        self._by_group = _Nested(base._by_group)
        self._by_cluster = _Nested(base._by_cluster)
        self._scheduled = _Flat(base._scheduled)
        self._preemptions = _Flat(base._preemptions, track=True)
        self._rayclusters = _Flat(base._rayclusters, track=True)
        self._podgroups = _Flat(base._podgroups, track=True)
        self._workloads = _Flat(base._workloads)
        self._workloads_of = _Nested(base._workloads_of)
        # Copied on the first change of a node's class or of the node set.
        self._gpu: dict[str, bool] | None = None
        self._entries: dict[str, bytes] | None = None
        self._new_nodes: list[str] = []
        self._bulk = whole
        """Built from nothing, or pods loaded in bulk (``_load_pods``): changes are not
        itemised."""
        self._done = False

    # --- operations ---------------------------------------------------------------------
    def upsert(self, view: View, resource_version: str = "") -> None:
        """Add ``view`` or replace the object with the same key."""
        if isinstance(view, PodView):
            self._upsert_pod(view, resource_version)
        elif isinstance(view, NodeView):
            self._upsert_node(view, resource_version)
        elif isinstance(view, RayClusterView):
            self._rayclusters.set((view.namespace, view.name), (resource_version, view))
        elif isinstance(view, PodGroupView):
            self._podgroups.set((view.namespace, view.name), (resource_version, view))
        else:
            self._upsert_workload(view, resource_version)

    def delete(self, kind: str, key: ObjectKey) -> bool:
        """Remove the object ``key`` of ``kind``; False when it was not there."""
        if kind == POD:
            uid = cast(str, key)
            old_pod = self._pods.pop(uid)
            if old_pod is None:
                return False
            self._unindex_pod(uid, old_pod[1])
            return True
        if kind == NODE:
            name = cast(str, key)
            if self._nodes.pop(name) is None:
                return False
            gpu, entries = self._writable_gpu()
            gpu.pop(name, None)
            entries.pop(name, None)
            return True
        namespaced = cast(tuple[str, str], key)
        if kind == WORKLOAD:
            old_wl = self._workloads.pop(namespaced)
            if old_wl is None:
                return False
            self._unindex_workload(namespaced, old_wl[1])
            return True
        if kind == RAYCLUSTER:
            return self._rayclusters.pop(namespaced) is not None
        return self._podgroups.pop(namespaced) is not None

    def replace(self, kind: str, items: Iterable[tuple[str, View]]) -> tuple[int, int]:
        """Make the objects of ``kind`` exactly ``items`` ((resourceVersion, view) pairs,
        as a LIST returns them): upsert each, delete the others. Returns (upserted,
        deleted)."""
        if kind == POD and not len(self._pods):
            return self._load_pods(items), 0
        seen: set[ObjectKey] = set()
        upserted = 0
        for resource_version, view in items:
            seen.add(key_of(view))
            self.upsert(view, resource_version)
            upserted += 1
        tables: dict[str, _Flat[Any, Any]] = {
            NODE: self._nodes, POD: self._pods, RAYCLUSTER: self._rayclusters,
            PODGROUP: self._podgroups, WORKLOAD: self._workloads,
        }
        primary = tables[kind]
        stale = [key for key in primary.finish() if key not in seen]
        for key in stale:
            self.delete(kind, key)
        return upserted, len(stale)

    def remember(self, records: Iterable[PreemptionRecord]) -> None:
        """Keep thrash-guard records whose pods this snapshot may no longer hold."""
        for record in records:
            self._add_record(record)

    def forget_preemptions_before(self, cutoff: float) -> int:
        """Drop preemption records older than ``cutoff`` (seconds since the epoch) whose
        pods are gone; returns how many. Records are few (recent preemptions only), so
        this scans them all."""
        dropped = 0
        changes: list[tuple[GroupKey, tuple[PreemptionRecord, ...]]] = []
        for key, records in self._preemptions.finish().items():
            kept = tuple(r for r in records if r.at >= cutoff or r.pod_uid in self._pods)
            if len(kept) != len(records):
                dropped += len(records) - len(kept)
                changes.append((key, kept))
        for key, kept in changes:
            if kept:
                self._preemptions.set(key, kept)
            else:
                self._preemptions.pop(key)
        return dropped

    def finish(self, into: Snapshot | None = None) -> Snapshot:
        if self._done:
            raise RuntimeError("SnapshotEditor.finish called twice")
        self._done = True
        base = self._base
        if self._new_nodes:
            self._fix_records_on(self._new_nodes)
        snap = into if into is not None else Snapshot.__new__(Snapshot)
        snap.config = self._config
        snap.serial, snap.base_serial = next(_serials), base.serial
        snap.changes = None if self._bulk else self._changes()
        if self._gpu is None or self._entries is None:
            snap._gpu, snap.prioritize_entries = base._gpu, base.prioritize_entries
            snap.gpu_node_names = base.gpu_node_names
        else:
            snap._gpu, snap.prioritize_entries = self._gpu, self._entries
            snap.gpu_node_names = frozenset(name for name, gpu in self._gpu.items() if gpu)
        snap._nodes = self._nodes.finish()
        snap._pods = self._pods.finish()
        snap._by_node = self._by_node.finish()
        snap._by_group = self._by_group.finish()
        snap._by_cluster = self._by_cluster.finish()
        snap._scheduled = self._scheduled.finish()
        snap._preemptions = self._preemptions.finish()
        snap._rayclusters = self._rayclusters.finish()
        snap._podgroups = self._podgroups.finish()
        snap._workloads = self._workloads.finish()
        snap._workloads_of = self._workloads_of.finish()
        snap._ignored = base._ignored
        return snap

    def _changes(self) -> Changes:
        clusters = set(self._by_cluster.touched) | self._workloads_of.touched
        clusters.update(cast(set[ClusterKey], self._rayclusters.touched))
        clusters.update((g.namespace, g.cluster)
                        for g in cast(set[GroupKey], self._preemptions.touched))
        return Changes(frozenset(clusters),
                       frozenset(cast(set[tuple[str, str]], self._podgroups.touched)))

    # --- nodes --------------------------------------------------------------------------
    def _writable_gpu(self) -> tuple[dict[str, bool], dict[str, bytes]]:
        if self._gpu is None or self._entries is None:
            self._gpu = dict(self._base._gpu)
            self._entries = dict(self._base.prioritize_entries)
        return self._gpu, self._entries

    def _upsert_node(self, view: NodeView, resource_version: str) -> None:
        known = view.name in self._nodes
        self._nodes.set(view.name, (resource_version, view))
        is_gpu = gpu_node_reason(view, self._config) is not None
        gpu = self._gpu if self._gpu is not None else self._base._gpu
        if gpu.get(view.name) is is_gpu:
            return  # same class: nothing the hot path reads changes
        gpu, entries = self._writable_gpu()
        gpu[view.name] = is_gpu
        entries[view.name] = HOST_PRIORITY.encode(HostPriority(host=view.name, score=score(is_gpu)))
        if not known:
            self._new_nodes.append(view.name)

    # --- pods ---------------------------------------------------------------------------
    def _is_gpu(self, node_name: str) -> bool:
        gpu = self._gpu if self._gpu is not None else self._base._gpu
        return gpu.get(node_name, False)

    def _upsert_pod(self, view: PodView, resource_version: str) -> None:
        key = pod_key(view.uid, view.namespace, view.name)
        old = self._pods.get(key)
        if old is not None:
            was = old[1]
            if was is view:  # a re-list handing back the view the cache holds
                return
            if was == view:
                # A change to fields raygate does not read (container statuses, IPs, ...):
                # keep the view readers hold, so an unchanged pod stays the same object.
                self._pods.set(key, (resource_version, was))
                return
            if (was.node_name == view.node_name and was.labels == view.labels
                    and was.controller == view.controller):
                # The common update (status, conditions): same node, same group.
                self._pods.set(key, (resource_version, view))
                self._reindex_pod(key, was, view)
                return
            self._unindex_pod(key, was)
        self._pods.set(key, (resource_version, view))
        if view.node_name:
            self._by_node.add(view.node_name, key, view)
        if view.is_ray:
            group = view.group_key
            self._by_group.add(group, key, view)
            self._by_cluster.add((group.namespace, group.cluster), key, view)
            if is_scheduled(view):
                self._scheduled.set(group, (self._scheduled.get(group) or 0) + 1)
            record = preemption_record(view, self._is_gpu(view.node_name))
            if record is not None:
                self._add_record(record)

    def _reindex_pod(self, key: str, was: PodView, view: PodView) -> None:
        """``view`` replaces ``was`` under the same node and group keys."""
        if view.node_name:
            self._by_node.add(view.node_name, key, view)
        if view.is_ray:
            group = view.group_key
            self._by_group.add(group, key, view)
            self._by_cluster.add((group.namespace, group.cluster), key, view)
            counted, counts = is_scheduled(was), is_scheduled(view)
            if counted != counts:
                left = (self._scheduled.get(group) or 0) + (1 if counts else -1)
                if left > 0:
                    self._scheduled.set(group, left)
                else:
                    self._scheduled.pop(group)
            record = preemption_record(view, self._is_gpu(view.node_name))
            if record is not None:
                self._add_record(record)

    def _load_pods(self, items: Iterable[tuple[str, View]]) -> int:
        """``replace`` into no pods (the first LIST): indexes built as dicts and made
        persistent maps in one go (C loops), several times faster than upserts."""
        pods = {pod_key(v.uid, v.namespace, v.name): (rv, v)
                for rv, v in items if isinstance(v, PodView)}
        by_node: dict[str, dict[str, PodView]] = {}
        by_group: dict[GroupKey, dict[str, PodView]] = {}
        by_cluster: dict[tuple[str, str], dict[str, PodView]] = {}
        scheduled: Counter[GroupKey] = Counter()
        for key, (_, view) in pods.items():
            if view.node_name:
                by_node.setdefault(view.node_name, {})[key] = view
            if view.is_ray:
                group = view.group_key
                by_group.setdefault(group, {})[key] = view
                by_cluster.setdefault((group.namespace, group.cluster), {})[key] = view
                if is_scheduled(view):
                    scheduled[group] += 1
                record = preemption_record(view, self._is_gpu(view.node_name))
                if record is not None:
                    self._add_record(record)
        # With no pods, every pod index is empty, whatever this edit did to it before.
        self._bulk = True
        self._pods = _Flat(Map(pods))
        self._by_node = _Nested(Map({k: Map(v) for k, v in by_node.items()}))
        self._by_group = _Nested(Map({k: Map(v) for k, v in by_group.items()}))
        self._by_cluster = _Nested(Map({k: Map(v) for k, v in by_cluster.items()}))
        self._scheduled = _Flat(Map(scheduled))
        return len(pods)

    def _unindex_pod(self, key: str, view: PodView) -> None:
        if view.node_name:
            self._by_node.remove(view.node_name, key)
        if view.is_ray:
            group = view.group_key
            self._by_group.remove(group, key)
            self._by_cluster.remove((group.namespace, group.cluster), key)
            if is_scheduled(view):
                left = (self._scheduled.get(group) or 0) - 1
                if left > 0:
                    self._scheduled.set(group, left)
                else:
                    self._scheduled.pop(group)
        # Preemption records stay: the thrash guard needs them after the pod is gone.

    # --- workloads ----------------------------------------------------------------------
    @staticmethod
    def _owner_cluster(view: WorkloadView) -> tuple[str, str] | None:
        if view.owner is not None and view.owner.kind == "RayCluster":
            return (view.namespace, view.owner.name)
        return None

    def _upsert_workload(self, view: WorkloadView, resource_version: str) -> None:
        key = (view.namespace, view.name)
        old = self._workloads.get(key)
        if old is not None:
            self._unindex_workload(key, old[1])
        self._workloads.set(key, (resource_version, view))
        owner = self._owner_cluster(view)
        if owner is not None:
            self._workloads_of.add(owner, key, view)

    def _unindex_workload(self, key: tuple[str, str], view: WorkloadView) -> None:
        owner = self._owner_cluster(view)
        if owner is not None:
            self._workloads_of.remove(owner, key)

    # --- preemption records -------------------------------------------------------------
    def _add_record(self, record: PreemptionRecord) -> None:
        records = self._preemptions.get(record.group) or ()
        if record not in records:
            self._preemptions.set(record.group, (*records, record))

    def _fix_records_on(self, node_names: list[str]) -> None:
        """Records made before their node was known say "not a GPU node": correct them
        now that it is (a pod can be listed before its node)."""
        names = set(node_names)
        changes = []
        for key, records in self._preemptions.finish().items():
            fixed = tuple(
                PreemptionRecord(r.group, r.pod_uid, r.node_name, self._is_gpu(r.node_name),
                                 r.at)
                if r.node_name in names and not r.on_gpu_node else r
                for r in records)
            if fixed != records:
                changes.append((key, fixed))
        for key, fixed in changes:
            self._preemptions.set(key, fixed)


JOURNAL_LENGTH = 1024
"""Publishes remembered by ``changes_between``: a reader further behind looks at all."""


# --- the cache and its sync status ------------------------------------------------------


class KindReport(msgspec.Struct, rename="camel", omit_defaults=True):
    """One kind's list/watch state as ``/readyz`` shows it."""

    resource: str
    state: str
    synced: bool
    objects: int
    events: int
    relists: int
    errors: int
    last_event_age_seconds: float | None = None
    last_error: str = ""


class KindSync:
    """The list/watch state of one kind. Written by the source's threads, read by
    ``/readyz`` and metrics (single attribute writes: a reader may see one counter a step
    ahead of another, never a torn value)."""

    __slots__ = ("errors", "events", "kind", "last_error", "last_event",
                 "objects", "relists", "resource", "state", "synced")

    def __init__(self, kind: str, resource: str = "") -> None:
        self.kind = kind
        self.resource = resource
        """``plural.version.group`` being watched (empty until discovered)."""
        self.state = "pending"
        """pending | listing | watching | backoff | absent (a CRD not installed)."""
        self.synced = False
        """The first complete LIST is in the cache; stays True through re-lists."""
        self.objects = 0
        self.events: Counter[str] = Counter()
        """Watch events applied, by type (ADDED, MODIFIED, DELETED, BOOKMARK, ...)."""
        self.relists = 0
        """LISTs after the first: 410 Gone, a CRD that came back."""
        self.errors = 0
        """Failed requests, broken streams, objects raygate could not read."""
        self.last_error = ""
        self.last_event: float | None = None
        """Monotonic time of the last event, bookmark or LIST page received."""


class SyncStatus:
    """Per-kind list/watch state of a cluster source: readiness, ``/readyz`` details and
    the counters a metrics exporter reads."""

    def __init__(self, kinds: Iterable[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.kinds: dict[str, KindSync] = {kind: KindSync(kind) for kind in kinds}
        self.clock = clock

    def ready(self) -> bool:
        """Every kind has completed its first LIST, or is a CRD that is not installed."""
        return all(k.synced or k.state == "absent" for k in self.kinds.values())

    def absent(self) -> list[str]:
        return [k.kind for k in self.kinds.values() if k.state == "absent"]

    def report(self) -> dict[str, KindReport]:
        now = self.clock()
        return {
            k.kind: KindReport(
                resource=k.resource, state=k.state, synced=k.synced, objects=k.objects,
                events=sum(k.events.values()), relists=k.relists, errors=k.errors,
                last_event_age_seconds=(None if k.last_event is None
                                        else round(max(now - k.last_event, 0.0), 3)),
                last_error=k.last_error,
            )
            for k in self.kinds.values()
        }


class ClusterCache:
    """Holds the current snapshot. Readers take ``cache.snapshot`` once per request; a
    source replaces it whole (one reference assignment, atomic under the GIL)."""

    def __init__(self, config: PolicyConfig, source: str) -> None:
        self.source = source
        self.snapshot = Snapshot.empty(config)
        self.ready = False
        self.sync: SyncStatus | None = None
        """Per-kind list/watch state when the source is a cluster; None for files."""
        self._listeners: list[Callable[[Snapshot], None]] = []
        self._reconfigure: Callable[[PolicyConfig], None] | None = None
        self._lock = threading.Lock()
        self._journal: deque[tuple[int, int, Changes | None]] = deque(maxlen=JOURNAL_LENGTH)
        """(serial, base serial, changes) of the last snapshots published."""

    def changes_between(self, old: Snapshot, new: Snapshot) -> Changes | None:
        """What changed from ``old`` to ``new`` (both published, ``new`` the later), or
        None when that is not known: a snapshot built whole, a bulk load, or ``old`` too
        far back."""
        if old is new:
            return Changes(frozenset(), frozenset())
        links = {serial: (base, changes) for serial, base, changes in list(self._journal)}
        total: Changes | None = None
        serial = new.serial
        while serial != old.serial:
            base, changes = links.get(serial, (0, None))
            if changes is None:
                return None
            total = changes if total is None else total | changes
            serial = base
        return total

    def set_policy(self, config: PolicyConfig) -> None:
        """Serve ``config`` from now on: the current objects are re-classified and
        published under it (by the source's writer when one follows a cluster, so the
        change never races an event). Safe from any thread."""
        if self._reconfigure is not None:
            self._reconfigure(config)
            return
        with self._lock:
            self.publish(self.snapshot.with_config(config))

    def follow_writer(self, reconfigure: Callable[[PolicyConfig], None]) -> None:
        """A source that edits snapshots in a thread of its own takes policy changes
        through ``reconfigure`` from now on."""
        self._reconfigure = reconfigure

    def publish(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` the current one, then tell every listener (in the publishing
        thread: a listener must be quick and must not block, e.g. schedule work on its
        own event loop with ``call_soon_threadsafe``)."""
        # Journal first: whoever sees the new snapshot finds how it came about.
        self._journal.append((snapshot.serial, snapshot.base_serial, snapshot.changes))
        self.snapshot = snapshot
        self.ready = True
        for listener in list(self._listeners):
            listener(snapshot)

    def add_listener(self, listener: Callable[[Snapshot], None]) -> Callable[[], None]:
        """Call ``listener`` after each publish; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)
