"""Every index of a snapshot in one object (``Indexes``), and the same indexes being
edited (``Editing``): the fields of ``Indexes`` are the one list of them, from which the
empty indexes, the editors and the finished indexes are all made."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from immutables import Map

from raygate.policy.devices import (
    ClaimTemplateView,
    ClaimView,
    DeviceClassView,
    ResourceSliceView,
)
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
from raygate.server.cache.keys import (
    CLAIMTEMPLATE,
    DEVICECLASS,
    EVENT,
    GANGGROUP,
    NODE,
    NODECLAIM,
    POD,
    PODGROUP,
    RAYCLUSTER,
    RESOURCECLAIM,
    RESOURCESLICE,
    WORKLOAD,
    ClusterKey,
)
from raygate.server.cache.maps import _EMPTY, Entry, _Flat, _Nested

__all__ = ["PRIMARY", "Editing", "Indexes"]

NamespacedKey = tuple[str, str]


# How each field of ``Indexes`` is edited (its ``metadata``): a map of key -> value, one
# whose editor also records the keys an edit touched (what ``Changes`` is made of), or a
# map of key -> member -> value, edited an inner map at a time.
_FLAT = {"track": False}
_TRACKED = {"track": True}
_NESTED = {"nested": True}


@dataclass(frozen=True, slots=True)
class Indexes:
    """The persistent maps of one snapshot; ``Indexes()`` is every one of them empty.

    The primary tables hold (resourceVersion, view) by ``keys.ObjectKey``; the others
    are derived from them as the editor keeps them."""

    nodes: Map[str, Entry[NodeView]] = field(default=_EMPTY, metadata=_FLAT)
    pods: Map[str, Entry[PodView]] = field(default=_EMPTY, metadata=_FLAT)
    rayclusters: Map[ClusterKey, Entry[RayClusterView]] = field(default=_EMPTY, metadata=_TRACKED)
    podgroups: Map[NamespacedKey, Entry[PodGroupView]] = field(default=_EMPTY, metadata=_TRACKED)
    gang_groups: Map[NamespacedKey, Entry[GangGroupView]] = field(
        default=_EMPTY, metadata=_TRACKED)
    """Kubernetes' own PodGroups (``scheduling.k8s.io``)."""
    workloads: Map[NamespacedKey, Entry[WorkloadView]] = field(default=_EMPTY, metadata=_FLAT)
    events: Map[NamespacedKey, Entry[PodEventView]] = field(default=_EMPTY, metadata=_FLAT)
    nodeclaims: Map[str, Entry[NodeClaimView]] = field(default=_EMPTY, metadata=_TRACKED)
    by_node: Map[str, Map[str, PodView]] = field(default=_EMPTY, metadata=_NESTED)
    """Pods by node name, then by pod key."""
    by_group: Map[GroupKey, Map[str, PodView]] = field(default=_EMPTY, metadata=_NESTED)
    by_cluster: Map[ClusterKey, Map[str, PodView]] = field(default=_EMPTY, metadata=_NESTED)
    scheduled: Map[GroupKey, int] = field(default=_EMPTY, metadata=_FLAT)
    """Pods of a group counted as scheduled (``classify.is_scheduled``)."""
    preemptions: Map[GroupKey, tuple[PreemptionRecord, ...]] = field(
        default=_EMPTY, metadata=_TRACKED)
    workloads_of: Map[ClusterKey, Map[NamespacedKey, WorkloadView]] = field(
        default=_EMPTY, metadata=_NESTED)
    """Workloads by the RayCluster that owns them."""
    workloads_by_owner: Map[str, Map[NamespacedKey, WorkloadView]] = field(
        default=_EMPTY, metadata=_NESTED)
    """Workloads by their controller owner's UID (a RayJob's, a RayService's)."""
    clusters_by_owner: Map[str, Map[ClusterKey, RayClusterView]] = field(
        default=_EMPTY, metadata=_NESTED)
    """RayClusters by their controller owner's UID: a Workload of that owner changes their
    admission (``owners``)."""
    events_of: Map[str, Map[NamespacedKey, PodEventView]] = field(default=_EMPTY, metadata=_NESTED)
    """Pod events by pod UID."""
    deviceclasses: Map[str, Entry[DeviceClassView]] = field(default=_EMPTY, metadata=_FLAT)
    resourceslices: Map[str, Entry[ResourceSliceView]] = field(default=_EMPTY, metadata=_FLAT)
    resourceclaims: Map[NamespacedKey, Entry[ClaimView]] = field(default=_EMPTY, metadata=_FLAT)
    resourceclaimtemplates: Map[NamespacedKey, Entry[ClaimTemplateView]] = field(
        default=_EMPTY, metadata=_FLAT)
    slices_on: Map[str, Map[str, ResourceSliceView]] = field(default=_EMPTY, metadata=_NESTED)
    """ResourceSlices by the node whose devices they list, then by name."""


PRIMARY: dict[str, str] = {
    DEVICECLASS: "deviceclasses", RESOURCESLICE: "resourceslices",
    NODE: "nodes", POD: "pods", RAYCLUSTER: "rayclusters", PODGROUP: "podgroups",
    GANGGROUP: "gang_groups", WORKLOAD: "workloads", EVENT: "events", NODECLAIM: "nodeclaims",
    RESOURCECLAIM: "resourceclaims", CLAIMTEMPLATE: "resourceclaimtemplates",
}
"""The field of ``Indexes`` (and of ``Editing``) that holds each kind's objects, in the
order of ``keys.KINDS`` (and of ``Snapshot.counts``)."""


class Editing:
    """The indexes of the snapshot being edited: an editor per field of ``Indexes``
    (``maps._Flat``, ``maps._Nested``), each starting from the base's map. Untouched
    maps cost nothing and finish as the very map the base holds."""

    # Declared for the type checker; made from the fields of ``Indexes`` in __init__.
    nodes: _Flat[str, Entry[NodeView]]
    pods: _Flat[str, Entry[PodView]]
    rayclusters: _Flat[ClusterKey, Entry[RayClusterView]]
    podgroups: _Flat[NamespacedKey, Entry[PodGroupView]]
    gang_groups: _Flat[NamespacedKey, Entry[GangGroupView]]
    workloads: _Flat[NamespacedKey, Entry[WorkloadView]]
    events: _Flat[NamespacedKey, Entry[PodEventView]]
    nodeclaims: _Flat[str, Entry[NodeClaimView]]
    by_node: _Nested[str, str, PodView]
    by_group: _Nested[GroupKey, str, PodView]
    by_cluster: _Nested[ClusterKey, str, PodView]
    scheduled: _Flat[GroupKey, int]
    preemptions: _Flat[GroupKey, tuple[PreemptionRecord, ...]]
    workloads_of: _Nested[ClusterKey, NamespacedKey, WorkloadView]
    workloads_by_owner: _Nested[str, NamespacedKey, WorkloadView]
    clusters_by_owner: _Nested[str, ClusterKey, RayClusterView]
    events_of: _Nested[str, NamespacedKey, PodEventView]
    deviceclasses: _Flat[str, Entry[DeviceClassView]]
    resourceslices: _Flat[str, Entry[ResourceSliceView]]
    resourceclaims: _Flat[NamespacedKey, Entry[ClaimView]]
    resourceclaimtemplates: _Flat[NamespacedKey, Entry[ClaimTemplateView]]
    slices_on: _Nested[str, str, ResourceSliceView]

    def __init__(self, base: Indexes) -> None:
        for index in fields(Indexes):
            start = getattr(base, index.name)
            setattr(self, index.name, _Nested(start) if index.metadata.get("nested")
                    else _Flat(start, track=index.metadata["track"]))

    def primary(self, kind: str) -> _Flat[Any, Entry[Any]]:
        table: _Flat[Any, Entry[Any]] = getattr(self, PRIMARY[kind])
        return table

    def finish(self) -> Indexes:
        return Indexes(**{index.name: getattr(self, index.name).finish()
                          for index in fields(Indexes)})
