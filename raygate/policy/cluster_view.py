"""What the policy may ask of the cluster (``ClusterView``): one immutable snapshot,
answered without I/O. ``raygate.server``'s snapshot implements it; the views it answers
with are ``raygate.policy.model``'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from raygate.policy.devices import ClaimView, GpuDevices
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

__all__ = ["ClusterView"]


class ClusterView(Protocol):
    """What the policy may ask of the cluster. ``raygate.server``'s snapshot implements it.

    Every method answers from one immutable snapshot, without I/O; implementations
    precompute what the hot path asks (``is_gpu_node`` in O(1)).
    """

    @property
    def dra_gpu_nodes(self) -> Mapping[str, str]:
        """Node name -> why its ResourceSlices make it a GPU node (decided when they
        change)."""
        ...

    def node(self, name: str) -> NodeView | None:
        ...

    def nodes(self) -> tuple[NodeView, ...]:
        ...

    def is_gpu_node(self, name: str) -> bool | None:
        """True/False for a known node; None for a node the cache has never seen."""
        ...

    def pod(self, uid: str) -> PodView | None:
        ...

    def pods_on_node(self, name: str) -> tuple[PodView, ...]:
        ...

    def requested_on(self, name: str) -> Mapping[str, int]:  # terminating pods included
        ...

    def group_pods(self, key: GroupKey) -> tuple[PodView, ...]:
        """Every pod of the group the cache holds, terminating and terminal ones included."""
        ...

    def scheduled_count(self, key: GroupKey) -> int:
        """Pods of the group bound to a node, neither terminating nor terminal: O(1)."""
        ...

    def raycluster(self, namespace: str, name: str) -> RayClusterView | None:
        ...

    def preemptions(self, key: GroupKey) -> tuple[PreemptionRecord, ...]:
        """Scheduler preemptions of the group's pods the cache saw (kept after the pods
        are deleted, for the thrash-guard window)."""
        ...

    def rayclusters(self) -> tuple[RayClusterView, ...]:
        ...

    def cluster_pods(self, namespace: str, cluster: str) -> tuple[PodView, ...]:
        """Every pod of the RayCluster (head and workers, by ``ray.io/cluster`` or the
        controller owner), terminating and terminal ones included."""
        ...

    def podgroup(self, namespace: str, name: str) -> PodGroupView | None:
        ...

    def gang_group(self, namespace: str, name: str) -> GangGroupView | None:
        """Kubernetes' own PodGroup ``name`` (not Volcano's: ``podgroup``)."""
        ...

    def workloads_of(self, namespace: str, cluster: str) -> tuple[WorkloadView, ...]:
        """Kueue Workloads owned by the RayCluster, else by its owner (RayJob, RayService)."""
        ...

    def pod_event(self, uid: str) -> PodEventView | None:
        """The latest node-autoscaler event about the pod ``uid`` the cache holds."""
        ...

    def node_claim(self, name: str) -> NodeClaimView | None:
        ...

    def gpu_devices(self) -> GpuDevices:
        """What the cluster's DeviceClasses say about GPUs (``devices.gpu_devices``)."""
        ...

    def resource_claim(self, namespace: str, name: str) -> ClaimView | None:
        ...

    def claim_template(self, namespace: str, name: str) -> ClaimView | None:
        ...

    def follows_node_claims(self) -> bool:
        """Whether NodeClaims are known (Karpenter's CRD served): when not, a NodeClaim
        that ``node_claim`` does not find may exist all the same."""
        ...
