"""Frozen views of the Kubernetes objects the policy reads.

Only the fields a rule uses are here. Quantities are integer milli-units
(``raygate.policy.quantity``); timestamps are seconds since the epoch as floats.
``raygate.server`` builds these from wire structs; nothing in ``raygate.policy`` knows the
JSON shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from raygate.policy.constraints import NodeConstraints, Taint
from raygate.policy.devices import PodClaim

__all__ = [
    "EMPTY",
    "Condition",
    "ContainerResources",
    "GangGroupView",
    "GroupKey",
    "NodeAffinityShape",
    "NodeClaimView",
    "NodeView",
    "OwnerRef",
    "PodEventView",
    "PodGroupView",
    "PodView",
    "PreemptionRecord",
    "RayClusterView",
    "Role",
    "WorkerGroupSpec",
    "WorkloadView",
]

EMPTY: Mapping[str, int] = MappingProxyType({})
_NO_LABELS: Mapping[str, str] = MappingProxyType({})

# KubeRay's pod labels (ray-operator/controllers/ray/utils/constant.go).
LABEL_CLUSTER = "ray.io/cluster"
LABEL_NODE_TYPE = "ray.io/node-type"
LABEL_GROUP = "ray.io/group"
# Volcano's per-pod opt-out from preemption, as an annotation or a label (Volcano reads
# both, the annotation first); raygate honours it under every scheduler.
ANNOTATION_PREEMPTABLE = "volcano.sh/preemptable"
# Go's strconv.ParseBool, which Volcano parses the value with.
_GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
             **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}
# The DisruptionTarget reason kube-scheduler writes on the victims of its preemptions;
# Volcano writes the same.
PREEMPTION_REASON = "PreemptionByScheduler"
# Set by KubeRay's Volcano integration on every pod of the gang.
ANNOTATION_GROUP_NAME = "scheduling.k8s.io/group-name"


class Role(Enum):
    """A Ray pod's place in its gang."""

    HEAD = "head"
    FLOOR = "floor"
    SURPLUS = "surplus"


@dataclass(frozen=True, slots=True)
class GroupKey:
    """A Ray group: ``(namespace, RayCluster name, group name)``; the head's group is
    KubeRay's ``headgroup``."""

    namespace: str
    cluster: str
    group: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.cluster}/{self.group}"


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: float | None = None


@dataclass(frozen=True, slots=True)
class NodeAffinityShape:
    """What a JSON Patch that narrows a gated pod's node affinity must know of it: a patch
    adds to a list that exists and creates one that does not (and ``add`` on a member that
    exists replaces it)."""

    affinity: bool = False
    """``spec.affinity`` is there."""
    node_affinity: bool = False
    """``spec.affinity.nodeAffinity`` is there."""
    required_terms: tuple[bool, ...] | None = None
    """None: no required node selector; else one entry per ``nodeSelectorTerms`` term,
    True when it has a ``matchExpressions`` list."""
    preferred: bool = False
    """A ``preferredDuringSchedulingIgnoredDuringExecution`` list is there."""


@dataclass(frozen=True, slots=True)
class ContainerResources:
    requests: Mapping[str, int] = field(default_factory=lambda: EMPTY)
    limits: Mapping[str, int] = field(default_factory=lambda: EMPTY)
    # An init container with restartPolicy Always is a sidecar: it runs beside the app
    # containers, so its requests add to theirs (KEP-753).
    sidecar: bool = False


@dataclass(frozen=True, slots=True)
class PodView:
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    annotations: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    controller: OwnerRef | None = None
    node_name: str = ""
    priority: int = 0
    containers: tuple[ContainerResources, ...] = ()
    init_containers: tuple[ContainerResources, ...] = ()
    overhead: Mapping[str, int] = field(default_factory=lambda: EMPTY)
    phase: str = ""
    conditions: tuple[Condition, ...] = ()
    created: float | None = None
    deleted: float | None = None
    nominated_node_name: str = ""
    scheduling_gates: tuple[str, ...] = ()
    node_affinity: NodeAffinityShape | None = None
    """Kept only while raygate's placement gate is on the pod: its release patch needs it."""
    constraints: NodeConstraints | None = None
    """Kept only while raygate's placement gate is on the pod or it is an unbound Ray pod:
    whether a held scale-up fits the nodes (``raygate.policy.scale_up``) and whether only
    GPU nodes have room for a waiting pod (``raygate.policy.room``) need them."""
    resource_claims: tuple[PodClaim, ...] = ()
    """``spec.resourceClaims``: the DRA claims its containers may use."""
    scheduling_group: str = ""
    """``spec.schedulingGroup.podGroupName``: the Kubernetes PodGroup whose gang it is in."""

    @property
    def ray_cluster(self) -> str:
        """The RayCluster: the controller owner when it is one, else KubeRay's label."""
        if self.controller is not None and self.controller.kind == "RayCluster":
            return self.controller.name
        return self.labels.get(LABEL_CLUSTER, "")

    @property
    def ray_node_type(self) -> str:
        return self.labels.get(LABEL_NODE_TYPE, "")

    @property
    def is_ray(self) -> bool:
        return LABEL_CLUSTER in self.labels and self.ray_node_type in ("head", "worker")

    @property
    def opted_out_of_preemption(self) -> str:
        """Where the pod says ``volcano.sh/preemptable`` is false ("annotation" or
        "label"), or "" when it may be preempted. Volcano's rule (``GetPodPreemptable``):
        the annotation wins over the label; a value ``strconv.ParseBool`` cannot read
        means not preemptable."""
        for where, values in (("annotation", self.annotations), ("label", self.labels)):
            value = values.get(ANNOTATION_PREEMPTABLE)
            if value is not None:
                return "" if _GO_BOOLS.get(value, False) else where
        return ""

    @property
    def group_key(self) -> GroupKey:
        return GroupKey(self.namespace, self.ray_cluster, self.labels.get(LABEL_GROUP, ""))

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed pods hold no resources and are not members any more."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, type_: str) -> Condition | None:
        for cond in self.conditions:
            if cond.type == type_:
                return cond
        return None


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    allocatable: Mapping[str, int] = field(default_factory=lambda: EMPTY)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    """Those that keep pods off (``NoSchedule``, ``NoExecute``)."""


@dataclass(frozen=True, slots=True)
class WorkerGroupSpec:
    name: str
    replicas: int | None = None
    min_replicas: int = 0
    max_replicas: int = 2147483647
    num_of_hosts: int = 1
    suspended: bool = False
    scale_gates: tuple[Mapping[str, str], ...] = ()
    """``scaleStrategy.scaleGate``: each entry's string fields, in order, whoever wrote it
    (kuberay#5094; ``policy.scale_gates``); () where the CRD has no such field."""


@dataclass(frozen=True, slots=True)
class RayClusterView:
    namespace: str
    name: str
    uid: str = ""
    autoscaling: bool = False
    suspended: bool = False
    worker_groups: tuple[WorkerGroupSpec, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    all_or_nothing: bool = False
    """Annotated ``raygate.io/scale-up: all-or-nothing`` (``raygate.policy.scale_up``)."""
    owner: OwnerRef | None = None  # the controller owner: a RayJob's, a RayService's

    def worker_group(self, name: str) -> WorkerGroupSpec | None:
        for group in self.worker_groups:
            if group.name == name:
                return group
        return None


@dataclass(frozen=True, slots=True)
class PodGroupView:
    namespace: str
    name: str
    phase: str = ""
    min_member: int = 0
    owner: OwnerRef | None = None
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True)
class GangGroupView:
    """Kubernetes' own PodGroup (``scheduling.k8s.io/v1beta1``, 1.37's ``GenericWorkload``):
    kube-scheduler places its pods (those whose ``spec.schedulingGroup.podGroupName`` names
    it) all or nothing."""

    namespace: str
    name: str
    min_count: int | None = None
    """``schedulingPolicy.gang.minCount``; None for the ``basic`` policy (no gang)."""
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkloadView:
    namespace: str
    name: str
    owner: OwnerRef | None = None
    conditions: tuple[Condition, ...] = ()
    api_version: str = ""
    pods: int | None = None  # Σ spec.podSets[].count: what Kueue asks quota for, if given
    replacement_for: str = ""  # <ns>/<name> of the elastic slice it replaces, if any


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    """A Ray pod the scheduler preempted: what the thrash guard remembers."""

    group: GroupKey
    pod_uid: str
    node_name: str
    on_gpu_node: bool
    at: float


@dataclass(frozen=True, slots=True)
class PodEventView:
    """An Event a node autoscaler wrote about a pod (core/v1, ``involvedObject`` a Pod):
    only those ``raygate.policy.admission.autoscalers`` reads are kept."""

    namespace: str
    name: str
    """The Event's own name."""
    pod_uid: str
    reason: str
    message: str = ""
    component: str = ""
    """Who wrote it: ``source.component``, else ``reportingComponent``."""
    at: float | None = None
    """When it was last seen (a repeated event is one object whose time moves on)."""


@dataclass(frozen=True, slots=True)
class NodeClaimView:
    """A Karpenter NodeClaim (karpenter.sh/v1): a node being launched or launched."""

    name: str
    node_name: str = ""
    """The node it brought, once registered."""
    deleting: bool = False
