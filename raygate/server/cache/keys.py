"""The kinds the cache holds and how it names their objects."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TypeAlias

from raygate.policy.devices import (
    ClaimTemplateView,
    ClaimView,
    DeviceClassView,
    ResourceSliceView,
)
from raygate.policy.model import (
    GangGroupView,
    NodeClaimView,
    NodeView,
    PodEventView,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkloadView,
)

NODE, POD, RAYCLUSTER, PODGROUP, WORKLOAD = "Node", "Pod", "RayCluster", "PodGroup", "Workload"
EVENT, NODECLAIM = "Event", "NodeClaim"
DEVICECLASS, RESOURCESLICE = "DeviceClass", "ResourceSlice"
RESOURCECLAIM, CLAIMTEMPLATE = "ResourceClaim", "ResourceClaimTemplate"
GANGGROUP = "PodGroup.scheduling.k8s.io"
"""Kubernetes' own PodGroup (Volcano's is ``PODGROUP``)."""
KINDS = (DEVICECLASS, RESOURCESLICE, NODE, POD, RAYCLUSTER, PODGROUP, GANGGROUP, WORKLOAD,
         EVENT, NODECLAIM, RESOURCECLAIM, CLAIMTEMPLATE)
"""The kinds the cache holds, in the order a whole snapshot is built (what makes a GPU
node, then nodes, so a pod's node class is known when its preemption is recorded)."""

View: TypeAlias = (NodeView | PodView | RayClusterView | PodGroupView | GangGroupView
                   | WorkloadView | PodEventView | NodeClaimView | DeviceClassView
                   | ResourceSliceView | ClaimView)
ClusterKey: TypeAlias = tuple[str, str]
"""(namespace, name) of a RayCluster."""
ObjectKey: TypeAlias = str | tuple[str, str]
"""How the cache names an object of a kind: a cluster-scoped one (Node, NodeClaim,
DeviceClass, ResourceSlice) by name, a pod by UID, namespaced ones by (namespace, name)."""


@dataclass(frozen=True)
class ClusterObjects:
    """Everything a source delivered, as policy views: a field per kind, named as the
    snapshot's table of that kind (``indexes.PRIMARY``)."""

    deviceclasses: tuple[DeviceClassView, ...] = ()
    resourceslices: tuple[ResourceSliceView, ...] = ()
    nodes: tuple[NodeView, ...] = ()
    pods: tuple[PodView, ...] = ()
    rayclusters: tuple[RayClusterView, ...] = ()
    podgroups: tuple[PodGroupView, ...] = ()
    gang_groups: tuple[GangGroupView, ...] = ()
    workloads: tuple[WorkloadView, ...] = ()
    events: tuple[PodEventView, ...] = ()
    nodeclaims: tuple[NodeClaimView, ...] = ()
    resourceclaims: tuple[ClaimView, ...] = ()
    resourceclaimtemplates: tuple[ClaimTemplateView, ...] = ()
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
    if kind in (NODE, NODECLAIM, DEVICECLASS, RESOURCESLICE):
        return name
    return (namespace, name)


def key_of(view: View) -> ObjectKey:
    if isinstance(view, PodView):
        return pod_key(view.uid, view.namespace, view.name)
    if isinstance(view, NodeView | NodeClaimView | DeviceClassView | ResourceSliceView):
        return view.name
    return (view.namespace, view.name)
