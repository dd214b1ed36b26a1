"""What ``raygate check``'s rules read and say: a RayCluster as its manifest writes it
(``LintCluster``, its groups and head), what raygate sees of the live cluster
(``ClusterFacts``), and a ``Finding``. The rules are ``raygate.policy.lint.rules``'s (RG0xx) and
``raygate.policy.lint.manifest``'s (RG1xx)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from raygate.policy.constraints import NodeRequirement
from raygate.policy.devices import (
    NO_GPU_DEVICES,
    ClaimTemplateView,
    ClaimView,
    GpuDevices,
    PodClaim,
)

__all__ = ["ClusterFacts", "Finding", "GroupSpec", "HeadSpec", "LintCluster", "Severity",
           "Toleration", "floor_pods", "group_label", "group_path", "object_ref"]


def object_ref(kind: str, namespace: str, name: str, generate_name: str = "") -> str:
    """``RayJob ray/train``; an object named by the API server from its ``generateName``
    shows that prefix: ``RayJob ray/train-<generated>``."""
    name = name or (f"{generate_name}<generated>" if generate_name else "")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}".rstrip()



class Severity(Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    effect: str = ""


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A worker group as written in the manifest (``None``: the field is absent)."""

    index: int
    name: str | None
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    num_of_hosts: int | None = None
    resources: Mapping[str, int] = field(default_factory=dict)
    """Requests or limits of the template's containers, summed (milli-units)."""
    tolerations: tuple[Toleration, ...] = ()
    scheduler_name: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    claims: tuple[PodClaim, ...] = ()
    """The template's ``spec.resourceClaims``."""
    priority: int | None = None
    """KubeRay 1.7's ``priority``: the Ray autoscaler's preference between groups."""
    node_affinity: tuple[tuple[NodeRequirement, ...], ...] | None = None
    """The template's required node affinity: its terms (ORed), None when it has none."""
    scale_gates: tuple[str, ...] = ()
    """``scaleStrategy.scaleGate``: each entry's gate (``contract.scale_gate.gate_key``;
    "" for an entry that names none), in order."""


@dataclass(frozen=True, slots=True)
class HeadSpec:
    """The head group's pod template, as far as the rules read it."""

    resources: Mapping[str, int] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    claims: tuple[PodClaim, ...] = ()
    node_affinity: tuple[tuple[NodeRequirement, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class LintCluster:
    namespace: str
    name: str
    autoscaling: bool
    groups: tuple[GroupSpec, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    head_scheduler_name: str = ""
    autoscaler_requests: Mapping[str, int] | None = None
    """``autoscalerOptions.resources.requests``, None when unset (KubeRay's default)."""
    kind: str = "RayCluster"
    """The object written: a RayCluster, or a RayJob or RayService embedding its spec
    (KubeRay copies their labels and annotations to the RayCluster it creates)."""
    spec_path: str = "spec"
    """Where the RayCluster's spec is in that object (``manifest.RAY_KINDS``)."""
    head: HeadSpec = field(default_factory=HeadSpec)
    generate_name: str = ""

    @property
    def ref(self) -> str:
        return object_ref(self.kind, self.namespace, self.name, self.generate_name)


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What raygate sees of the live cluster; None offline."""

    gpu_nodes: int
    volcano_installed: bool
    kueue_installed: bool
    gpu_devices: GpuDevices = NO_GPU_DEVICES
    """What the DeviceClasses say about GPUs (``devices.gpu_devices``)."""
    claims: Mapping[tuple[str, str], ClaimView] = field(default_factory=dict)
    """The ResourceClaims read, by (namespace, name)."""
    claim_templates: Mapping[tuple[str, str], ClaimTemplateView] = field(default_factory=dict)
    """The ResourceClaimTemplates read, by (namespace, name)."""


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    severity: Severity
    object: str
    path: str
    message: str
    fix: str


# --- what every rule writes of a group --------------------------------------------------

def group_path(cluster: LintCluster, group: GroupSpec, leaf: str = "") -> str:
    path = f"{cluster.spec_path}.workerGroupSpecs[{group.index}]"
    return f"{path}.{leaf}" if leaf else path


def group_label(group: GroupSpec) -> str:
    return f"worker group {group.name!r}" if group.name else f"worker group #{group.index}"


def floor_pods(cluster: LintCluster, group: GroupSpec) -> int:
    """The group's floor as KubeRay sizes a gang: ``minReplicas`` (autoscaled) or
    ``replicas``, times ``numOfHosts``."""
    hosts = group.num_of_hosts or 1
    if cluster.autoscaling:
        return (group.min_replicas or 0) * hosts
    return (group.replicas or 0) * hosts
