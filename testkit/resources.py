"""What the API-server double (``testkit.apiserver``) can serve: its resources by kind,
group, version and plural, the core ones it always serves, the custom ones a test
installs, and the Status body of its error replies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ["CORE", "CRDS", "DRA", "Collection", "Key", "Obj", "status"]

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds


@dataclass(frozen=True)
class Collection:
    """One resource the double can serve."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        if not self.group:
            return f"/api/{self.version}/{self.plural}"
        return f"/apis/{self.group}/{self.version}/{self.plural}"


CORE = (Collection("Node", "", "v1", "nodes"), Collection("Pod", "", "v1", "pods"),
        Collection("Event", "", "v1", "events"))
CRDS = (
    Collection("RayCluster", "ray.io", "v1", "rayclusters"),
    Collection("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups"),
    Collection("Workload", "kueue.x-k8s.io", "v1beta2", "workloads"),
    Collection("Workload", "kueue.x-k8s.io", "v1beta1", "workloads"),
    Collection("NodeClaim", "karpenter.sh", "v1", "nodeclaims"),
)
DRA = tuple(Collection(kind, "resource.k8s.io", "v1", plural) for kind, plural in (
    ("DeviceClass", "deviceclasses"), ("ResourceSlice", "resourceslices"),
    ("ResourceClaim", "resourceclaims"), ("ResourceClaimTemplate", "resourceclaimtemplates")))
"""Dynamic Resource Allocation (built in since 1.34): ``install`` them for a cluster that
serves it; a double without them is an older cluster."""


def status(code: int, reason: str, message: str) -> bytes:
    """The body of an error reply: a ``Status`` of ``reason`` (``NotFound``, ...)."""
    return msgspec.json.encode({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": message, "reason": reason,
                                "code": code})
