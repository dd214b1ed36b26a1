"""``SnapshotEditor``: the next snapshot made from the current one, a batch of changes at a
time; what each edit changed is journalled (``Changes``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import cast

from immutables import Map

from raygate.policy.classify import gpu_node_reason, is_scheduled, preemption_record
from raygate.policy.config import PolicyConfig
from raygate.policy.devices import ClaimView, DeviceClassView, ResourceSliceView
from raygate.policy.model import (
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
from raygate.server.cache.autoscaling import AUTOSCALER_KINDS, AutoscalerTables
from raygate.server.cache.devices import DEVICE_KINDS, DeviceTables
from raygate.server.cache.indexes import PRIMARY, Editing
from raygate.server.cache.keys import (
    GANGGROUP,
    KINDS,
    NODE,
    NODECLAIM,
    POD,
    RAYCLUSTER,
    WORKLOAD,
    ClusterKey,
    ClusterObjects,
    ObjectKey,
    View,
    key_of,
    pod_key,
)
from raygate.server.cache.maps import _Flat, _Nested
from raygate.server.cache.owners import (
    index_raycluster,
    index_workload,
    touched_clusters,
    unindex_raycluster,
    unindex_workload,
)
from raygate.server.cache.records import fix_on, forget_before
from raygate.server.cache.snapshot import Changes, Snapshot, _serials


def build_snapshot(objects: ClusterObjects, config: PolicyConfig) -> Snapshot:
    """A snapshot of ``objects`` built whole (a snapshot file, the demo): its ``changes``
    are None, and its ``objects`` are those given."""
    editor = SnapshotEditor(Snapshot.empty(config), whole=True)
    for kind in KINDS:
        view: View
        for view in getattr(objects, PRIMARY[kind]):
            editor.upsert(view)
    editor.autoscaling.follows_claims = bool(objects.nodeclaims)
    snap = editor.finish()
    snap._ignored = Counter(objects.ignored)
    snap.__dict__["objects"] = objects  # what the cached property would rebuild
    return snap


def reconfigured(snapshot: Snapshot, config: PolicyConfig) -> Snapshot:
    """The same objects under another policy (GPU classes and indexes rebuilt:
    O(objects), for a reloaded config file). Versions and preemption records carry
    over, so a later re-list keeps the views it finds unchanged."""
    editor = SnapshotEditor(Snapshot.empty(config), whole=True)
    editor.remember(r for records in snapshot.indexes.preemptions.values() for r in records)
    editor.autoscaling.follows_claims = snapshot._follows_claims
    for kind in KINDS:
        for resource_version, view in snapshot.primary(kind).values():
            editor.upsert(view, resource_version)
    snap = editor.finish()
    snap._ignored = Counter(snapshot._ignored)
    return snap


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
        self._indexes = Editing(base.indexes)
        self.autoscaling = AutoscalerTables(self._indexes, base._follows_claims)
        self.devices = DeviceTables(self._indexes, self._config, base._gpu_devices,
                                    base.dra_gpu_nodes)
        # Copied on the first change of a node's class or of the node set.
        self._gpu: dict[str, bool] | None = None
        self._new_nodes: list[str] = []
        """Nodes that became known, or a GPU node by their slices: their preemption
        records are corrected at ``finish``."""
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
            self._upsert_raycluster(view, resource_version)
        elif isinstance(view, PodGroupView):
            self._indexes.podgroups.set((view.namespace, view.name), (resource_version, view))
        elif isinstance(view, GangGroupView):
            self._indexes.gang_groups.set((view.namespace, view.name), (resource_version, view))
        elif isinstance(view, PodEventView | NodeClaimView):
            self.autoscaling.upsert(view, resource_version, self._indexes.pods)
        elif isinstance(view, DeviceClassView | ResourceSliceView | ClaimView):
            self.devices.upsert(view, resource_version)
            self._reclassify()
        else:
            self._upsert_workload(view, resource_version)

    def delete(self, kind: str, key: ObjectKey) -> bool:
        """Remove the object ``key`` of ``kind``; False when it was not there."""
        if kind in AUTOSCALER_KINDS:
            return self.autoscaling.delete(kind, key)
        if kind in DEVICE_KINDS:
            gone = self.devices.delete(kind, key)
            self._reclassify()
            return gone
        if kind == POD:
            uid = cast(str, key)
            old_pod = self._indexes.pods.pop(uid)
            if old_pod is None:
                return False
            self._unindex_pod(uid, old_pod[1])
            return True
        if kind == NODE:
            name = cast(str, key)
            if self._indexes.nodes.pop(name) is None:
                return False
            self._writable_gpu().pop(name, None)
            return True
        namespaced = cast(tuple[str, str], key)
        if kind == WORKLOAD:
            old_wl = self._indexes.workloads.pop(namespaced)
            if old_wl is None:
                return False
            unindex_workload(self._indexes, namespaced, old_wl[1])
            return True
        if kind == RAYCLUSTER:
            old_rc = self._indexes.rayclusters.pop(namespaced)
            if old_rc is not None:
                unindex_raycluster(self._indexes, namespaced, old_rc[1])
            return old_rc is not None
        if kind == GANGGROUP:
            return self._indexes.gang_groups.pop(namespaced) is not None
        return self._indexes.podgroups.pop(namespaced) is not None

    def replace(self, kind: str, items: Iterable[tuple[str, View]]) -> tuple[int, int]:
        """Make the objects of ``kind`` exactly ``items`` ((resourceVersion, view) pairs,
        as a LIST returns them): upsert each, delete the others. Returns (upserted,
        deleted)."""
        if kind == POD and not len(self._indexes.pods):
            return self._load_pods(items), 0
        self.autoscaling.follows_claims |= kind == NODECLAIM
        seen: set[ObjectKey] = set()
        upserted = 0
        for resource_version, view in items:
            seen.add(key_of(view))
            self.upsert(view, resource_version)
            upserted += 1
        stale = [key for key in self._indexes.primary(kind).finish() if key not in seen]
        for key in stale:
            self.delete(kind, key)
        return upserted, len(stale)

    def remember(self, records: Iterable[PreemptionRecord]) -> None:
        """Keep thrash-guard records whose pods this snapshot may no longer hold."""
        for record in records:
            self._add_record(record)

    def forget_preemptions_before(self, cutoff: float) -> int:
        """Drop preemption records older than ``cutoff`` (seconds since the epoch) whose
        pods are gone; returns how many (``records.forget_before``)."""
        return forget_before(self._indexes.preemptions, self._indexes.pods, cutoff)

    def forget_events(self, cutoff: float) -> int:
        """Drop the pod events no longer kept (``AutoscalerTables.forget``)."""
        return self.autoscaling.forget(self._indexes.pods, cutoff)

    def absent(self, kind: str) -> None:
        """``kind`` is not served (a CRD not installed): it has no objects, and raygate
        no longer follows NodeClaims when it is theirs."""
        self.replace(kind, ())
        self.autoscaling.follows_claims &= kind != NODECLAIM

    def finish(self) -> Snapshot:
        if self._done:
            raise RuntimeError("SnapshotEditor.finish called twice")
        self._done = True
        base = self._base
        if self._new_nodes:
            fix_on(self._indexes.preemptions, self._new_nodes, self._is_gpu)
        snap = Snapshot.__new__(Snapshot)
        snap.config = self._config
        snap.serial, snap.base_serial = next(_serials), base.serial
        snap.changes = None if self._bulk else self._changes()
        if self._gpu is None:
            snap.node_classes, snap.gpu_node_names = base.node_classes, base.gpu_node_names
        else:
            snap.node_classes = self._gpu
            snap.gpu_node_names = frozenset(name for name, gpu in self._gpu.items() if gpu)
        snap._gpu_devices, snap.dra_gpu_nodes = self.devices.devices, self.devices.dra_gpu_nodes
        snap.indexes = self._indexes.finish()
        snap._follows_claims = self.autoscaling.follows_claims
        snap._ignored = base._ignored
        return snap

    def _changes(self) -> Changes:
        clusters = set(self._indexes.by_cluster.touched) | touched_clusters(self._indexes)
        clusters.update(cast(set[ClusterKey], self._indexes.rayclusters.touched))
        clusters.update((g.namespace, g.cluster)
                        for g in cast(set[GroupKey], self._indexes.preemptions.touched))
        clusters |= self.autoscaling.clusters(self._indexes.pods, self._gpu is not None)
        # Volcano's and Kubernetes' own PodGroups alike: a status reads them by name.
        podgroups = {*(self._indexes.podgroups.touched or ()),
                     *(self._indexes.gang_groups.touched or ())}
        return Changes(frozenset(clusters), frozenset(cast(set[tuple[str, str]], podgroups)))

    # --- nodes --------------------------------------------------------------------------
    def _writable_gpu(self) -> dict[str, bool]:
        if self._gpu is None:
            self._gpu = dict(self._base.node_classes)
        return self._gpu

    def _upsert_node(self, view: NodeView, resource_version: str) -> None:
        known = view.name in self._indexes.nodes
        self._indexes.nodes.set(view.name, (resource_version, view))
        if self._classify(view) and not known:
            self._new_nodes.append(view.name)

    def _classify(self, view: NodeView) -> bool:
        """Class ``view`` by its reasons; True when that changed its class (same class:
        nothing the hot path reads changes)."""
        is_gpu = gpu_node_reason(view, self._config, self.devices.dra_gpu_nodes) is not None
        gpu = self._gpu if self._gpu is not None else self._base.node_classes
        if gpu.get(view.name) is is_gpu:
            return False
        self._writable_gpu()[view.name] = is_gpu
        return True

    def _reclassify(self) -> None:
        """Class again the nodes whose DRA devices an edit changed; a node that became a
        GPU node by its slices has its preemption records corrected as a new node's are
        (slices can come after the pods)."""
        for name in self.devices.reclassify:
            entry = self._indexes.nodes.get(name)
            if entry is not None and self._classify(entry[1]):
                self._new_nodes.append(name)
        self.devices.reclassify.clear()

    # --- pods ---------------------------------------------------------------------------
    def _is_gpu(self, node_name: str) -> bool:
        gpu = self._gpu if self._gpu is not None else self._base.node_classes
        return gpu.get(node_name, False)

    def _upsert_pod(self, view: PodView, resource_version: str) -> None:
        key = pod_key(view.uid, view.namespace, view.name)
        old = self._indexes.pods.get(key)
        if old is not None:
            was = old[1]
            if was is view:  # a re-list handing back the view the cache holds
                return
            if was == view:
                # A change to fields raygate does not read (container statuses, IPs, ...):
                # keep the view readers hold, so an unchanged pod stays the same object.
                self._indexes.pods.set(key, (resource_version, was))
                return
            if (was.node_name == view.node_name and was.labels == view.labels
                    and was.controller == view.controller):
                # The common update (status, conditions): same node, same group.
                self._indexes.pods.set(key, (resource_version, view))
                self._reindex_pod(key, was, view)
                return
            self._unindex_pod(key, was)
        self._indexes.pods.set(key, (resource_version, view))
        if view.node_name:
            self._indexes.by_node.add(view.node_name, key, view)
        if view.is_ray:
            group = view.group_key
            self._indexes.by_group.add(group, key, view)
            self._indexes.by_cluster.add((group.namespace, group.cluster), key, view)
            if is_scheduled(view):
                self._indexes.scheduled.set(group, (self._indexes.scheduled.get(group) or 0) + 1)
            record = preemption_record(view, self._is_gpu(view.node_name))
            if record is not None:
                self._add_record(record)

    def _reindex_pod(self, key: str, was: PodView, view: PodView) -> None:
        """``view`` replaces ``was`` under the same node and group keys."""
        if view.node_name:
            self._indexes.by_node.add(view.node_name, key, view)
        if view.is_ray:
            group = view.group_key
            self._indexes.by_group.add(group, key, view)
            self._indexes.by_cluster.add((group.namespace, group.cluster), key, view)
            counted, counts = is_scheduled(was), is_scheduled(view)
            if counted != counts:
                left = (self._indexes.scheduled.get(group) or 0) + (1 if counts else -1)
                if left > 0:
                    self._indexes.scheduled.set(group, left)
                else:
                    self._indexes.scheduled.pop(group)
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
        ix = self._indexes
        ix.pods = _Flat(Map(pods))
        ix.by_node = _Nested(Map({k: Map(v) for k, v in by_node.items()}))
        ix.by_group = _Nested(Map({k: Map(v) for k, v in by_group.items()}))
        ix.by_cluster = _Nested(Map({k: Map(v) for k, v in by_cluster.items()}))
        ix.scheduled = _Flat(Map(scheduled))
        return len(pods)

    def _unindex_pod(self, key: str, view: PodView) -> None:
        if view.node_name:
            self._indexes.by_node.remove(view.node_name, key)
        if view.is_ray:
            group = view.group_key
            self._indexes.by_group.remove(group, key)
            self._indexes.by_cluster.remove((group.namespace, group.cluster), key)
            if is_scheduled(view):
                left = (self._indexes.scheduled.get(group) or 0) - 1
                if left > 0:
                    self._indexes.scheduled.set(group, left)
                else:
                    self._indexes.scheduled.pop(group)
        # Preemption records stay: the thrash guard needs them after the pod is gone.

    # --- workloads and who owns them (``owners``) ------------------------------------
    def _upsert_raycluster(self, view: RayClusterView, resource_version: str) -> None:
        key = (view.namespace, view.name)
        old = self._indexes.rayclusters.get(key)
        if old is not None:
            unindex_raycluster(self._indexes, key, old[1])
        self._indexes.rayclusters.set(key, (resource_version, view))
        index_raycluster(self._indexes, key, view)

    def _upsert_workload(self, view: WorkloadView, resource_version: str) -> None:
        key = (view.namespace, view.name)
        old = self._indexes.workloads.get(key)
        if old is not None:
            unindex_workload(self._indexes, key, old[1])
        self._indexes.workloads.set(key, (resource_version, view))
        index_workload(self._indexes, key, view)

    # --- preemption records -------------------------------------------------------------
    def _add_record(self, record: PreemptionRecord) -> None:
        records = self._indexes.preemptions.get(record.group) or ()
        if record not in records:
            self._indexes.preemptions.set(record.group, (*records, record))
