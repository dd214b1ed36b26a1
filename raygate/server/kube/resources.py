"""The kinds raygate lists and watches, and how each maps to the cache.

Core kinds (Node, Pod, Event) are always served. The custom resources may not be installed:
each is looked up by discovery, in order of preference of its versions, before it is
listed; a kind that is not served is reported absent and looked up again later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from raygate.server.cache import convert, devices, keys
from raygate.server.cache.convert import PodViews
from raygate.server.wire import dra, kube

__all__ = ["RESOURCES", "Resource", "Served"]


@dataclass(frozen=True)
class Resource:
    kind: str
    """The cache's name of the kind (``raygate.server.cache.keys.KINDS``)."""
    group: str
    """API group; "" for the core group (``/api/v1``)."""
    versions: tuple[str, ...]
    """Versions to use, most preferred first."""
    plural: str
    wire: type[msgspec.Struct]
    view: Callable[[Any], keys.View]
    """Wire object to the policy's view (``raygate.server.cache.convert``)."""
    crd: bool = False
    """A custom resource, or an API group a cluster may not serve: may be absent, found
    by discovery."""
    field_selector: str = ""
    """Asked of the API server on LIST and WATCH: only the objects that match come."""
    keep: Callable[[Any], bool] | None = None
    """Of the wire objects that come, those the cache holds (None: all); the others are
    dropped before they are converted."""

    def served(self, version: str) -> Served:
        return Served(self, version)


@dataclass(frozen=True)
class Served:
    """A resource at the version the API server serves it."""

    resource: Resource
    version: str

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def group_version(self) -> str:
        group = self.resource.group
        return f"{group}/{self.version}" if group else self.version

    @property
    def path(self) -> str:
        """The collection across all namespaces (cluster-scoped kinds have no other)."""
        # Core kinds live under /api/<version>, every named group under
        # /apis/<group>/<version>; without /namespaces/<ns> a path spans all namespaces.
        if not self.resource.group:
            return f"/api/{self.version}/{self.resource.plural}"
        return f"/apis/{self.resource.group}/{self.version}/{self.resource.plural}"

    @property
    def discovery_path(self) -> str:
        return f"/apis/{self.group_version}"

    def __str__(self) -> str:
        """``plural.version.group``, as kubectl names a resource."""
        parts = [self.resource.plural, self.version, self.resource.group]
        return ".".join(p for p in parts if p)


_DRA = ("v1", "v1beta2")

RESOURCES: tuple[Resource, ...] = (
    # Dynamic Resource Allocation (GA in 1.34; v1beta2, the same shapes, in 1.33): what
    # makes a node a GPU node, before the nodes.
    Resource(keys.DEVICECLASS, "resource.k8s.io", _DRA, "deviceclasses", dra.DeviceClass,
             devices.device_class_view, crd=True),
    Resource(keys.RESOURCESLICE, "resource.k8s.io", _DRA, "resourceslices",
             dra.ResourceSlice, devices.resource_slice_view, crd=True),
    Resource(keys.NODE, "", ("v1",), "nodes", kube.Node, convert.node_view),
    # Pods are most of a cluster: their views share what repeats (``convert.PodViews``).
    Resource(keys.POD, "", ("v1",), "pods", kube.Pod, PodViews(unbound_ray_constraints=True)),
    Resource(keys.RAYCLUSTER, "ray.io", ("v1",), "rayclusters", kube.RayCluster,
             convert.raycluster_view, crd=True),
    Resource(keys.PODGROUP, "scheduling.volcano.sh", ("v1beta1",), "podgroups",
             kube.PodGroup, convert.podgroup_view, crd=True),
    # Kubernetes' own gangs: served with 1.37's GenericWorkload gate (beta, off by default).
    Resource(keys.GANGGROUP, "scheduling.k8s.io", ("v1beta1",), "podgroups",
             kube.GangGroup, convert.gang_group_view, crd=True),
    # v1beta2 is Kueue's storage version since 0.16; older installs serve only v1beta1.
    Resource(keys.WORKLOAD, "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads",
             kube.Workload, convert.workload_view, crd=True),
    # What node autoscalers said of pods. One watch of every pod Event, the few reasons
    # read picked here (``keep``): a field selector cannot say "any of four reasons", and
    # four watches, one per reason, would be four LISTs and streams to get the same.
    Resource(keys.EVENT, "", ("v1",), "events", kube.Event, convert.event_view,
             field_selector="involvedObject.kind=Pod", keep=convert.wanted_event),
    Resource(keys.NODECLAIM, "karpenter.sh", ("v1",), "nodeclaims", kube.NodeClaim,
             convert.nodeclaim_view, crd=True),
    # What a pod's resource claims ask for.
    Resource(keys.RESOURCECLAIM, "resource.k8s.io", _DRA, "resourceclaims",
             dra.ResourceClaim, devices.resource_claim_view, crd=True),
    Resource(keys.CLAIMTEMPLATE, "resource.k8s.io", _DRA, "resourceclaimtemplates",
             dra.ResourceClaimTemplate, devices.claim_template_view, crd=True),
)
