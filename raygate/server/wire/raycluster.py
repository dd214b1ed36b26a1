"""The parts of a RayCluster manifest ``raygate check`` reads: group sizes, the pod
templates' resources, resource claims, tolerations, node selectors and scheduler,
autoscaler options, labels, scale gates. (The cache's slimmer ``kube.RayCluster`` skips
templates.)"""

from __future__ import annotations

from typing import Any

import msgspec

from raygate.server.wire.kube import Container, PodResourceClaim, Resources

__all__ = ["PodSpec", "RayClusterManifest"]


class _Base(msgspec.Struct, rename="camel", omit_defaults=True):
    """camelCase keys, as in a RayCluster manifest."""


class Toleration(_Base):
    key: str | None = None
    operator: str | None = None
    effect: str | None = None


class PodSpec(_Base):
    containers: list[Container] | None = None
    tolerations: list[Toleration] | None = None
    scheduler_name: str | None = None
    node_selector: dict[str, str] | None = None
    resource_claims: list[PodResourceClaim] | None = None
    affinity: Any = None
    """Read for its required node affinity (raygate check's RG013); any JSON is accepted
    here, the CRD's schema judges it."""


class Template(_Base):
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class HeadGroupSpec(_Base):
    template: Template = msgspec.field(default_factory=Template)


class WorkerGroupSpec(_Base):
    group_name: str | None = None
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    num_of_hosts: int | None = None
    priority: int | None = None
    scale_strategy: dict[str, Any] | None = None
    """Read for its ``scaleGate`` entries (raygate check's RG018); the CRD's schema judges
    the rest."""
    template: Template = msgspec.field(default_factory=Template)


class AutoscalerOptions(_Base):
    resources: Resources | None = None


class Spec(_Base):
    enable_in_tree_autoscaling: bool | None = None
    head_group_spec: HeadGroupSpec = msgspec.field(default_factory=HeadGroupSpec)
    worker_group_specs: list[WorkerGroupSpec] | None = None
    autoscaler_options: AutoscalerOptions | None = None


class Meta(_Base):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class RayClusterManifest(_Base):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: Spec = msgspec.field(default_factory=Spec)
