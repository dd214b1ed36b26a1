"""Who admits a RayCluster under Kueue, kept in the indexes so no read walks owner chains.

Kueue admits a RayCluster through the Workload of the job that manages it: the
RayCluster's own (owned by the RayCluster), or, for the cluster a RayJob or RayService
makes, the Workload owned by that RayJob or RayService (Kueue skips a child whose parent
it manages: ``jobframework``'s ``IsOwnerManagedByKueue``). The editor indexes Workloads
by the RayCluster that owns them (by name) and by their owner's UID, and RayClusters by
their owner's UID; an edit of a Workload then names the RayClusters whose admission it
changes in one lookup."""

from __future__ import annotations

from raygate.policy.model import RayClusterView, WorkloadView
from raygate.server.cache.indexes import Editing
from raygate.server.cache.keys import ClusterKey

__all__ = ["index_raycluster", "index_workload", "touched_clusters", "unindex_raycluster",
           "unindex_workload"]

NamespacedKey = tuple[str, str]


def _owner_cluster(view: WorkloadView) -> ClusterKey | None:
    if view.owner is not None and view.owner.kind == "RayCluster":
        return (view.namespace, view.owner.name)
    return None


def index_workload(ix: Editing, key: NamespacedKey, view: WorkloadView) -> None:
    owner = _owner_cluster(view)
    if owner is not None:
        ix.workloads_of.add(owner, key, view)
    if view.owner is not None and view.owner.uid:
        ix.workloads_by_owner.add(view.owner.uid, key, view)


def unindex_workload(ix: Editing, key: NamespacedKey, view: WorkloadView) -> None:
    owner = _owner_cluster(view)
    if owner is not None:
        ix.workloads_of.remove(owner, key)
    if view.owner is not None and view.owner.uid:
        ix.workloads_by_owner.remove(view.owner.uid, key)


def index_raycluster(ix: Editing, key: ClusterKey, view: RayClusterView) -> None:
    if view.owner is not None and view.owner.uid:
        ix.clusters_by_owner.add(view.owner.uid, key, view)


def unindex_raycluster(ix: Editing, key: ClusterKey, view: RayClusterView) -> None:
    if view.owner is not None and view.owner.uid:
        ix.clusters_by_owner.remove(view.owner.uid, key)


def touched_clusters(ix: Editing) -> set[ClusterKey]:
    """The RayClusters whose Workloads an edit changed: by the owning RayCluster's name,
    and those owned by an owner whose Workloads changed (a RayJob's, a RayService's)."""
    clusters = set(ix.workloads_of.touched)
    for uid in ix.workloads_by_owner.touched:
        clusters.update(ix.clusters_by_owner.get(uid).keys())
    return clusters
