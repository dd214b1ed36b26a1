"""Slim msgspec views of the Kubernetes objects raygate reads.

Field names follow the Kubernetes JSON (camelCase, via ``rename="camel"``). Unknown fields
are ignored, never forbidden: upstream objects grow every release. Only what the policy
and the admission status need is declared; msgspec skips the rest without building it.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

Quantity = str | int | float
ResourceList = dict[str, Quantity]


class _Base(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """camelCase keys as Kubernetes writes them. ``gc=False``: decoded objects never form
    reference cycles; untracked, 150,000 listed pods do not make every garbage collection
    walk them (msgspec's performance tips)."""


class OwnerReference(_Base):
    kind: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    controller: bool | None = None


class PodAnnotations(msgspec.Struct, omit_defaults=True):
    """Only the annotations raygate reads: a pod's annotations can be large
    (``kubectl.kubernetes.io/last-applied-configuration``) and are skipped unbuilt."""

    preemptable: str | None = msgspec.field(default=None, name="volcano.sh/preemptable")
    group_name: str | None = msgspec.field(default=None, name="scheduling.k8s.io/group-name")
    task_spec: str | None = msgspec.field(default=None, name="volcano.sh/task-spec")
    admitted: str | None = msgspec.field(default=None, name="raygate.io/admitted")


class PodMeta(_Base):
    name: str = ""
    generate_name: str = ""
    """Set, with no name, on a pod in its create's admission (KubeRay's pods)."""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] | None = None
    annotations: PodAnnotations | None = None
    owner_references: list[OwnerReference] | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None


class Resources(_Base):
    requests: ResourceList | None = None
    limits: ResourceList | None = None


class Container(_Base):
    name: str = ""
    resources: Resources | None = None
    restart_policy: str | None = None


class SchedulingGate(_Base):
    name: str = ""


class PodResourceClaim(_Base):
    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class Toleration(_Base):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class SchedulingGroup(_Base):
    pod_group_name: str | None = None


class PodSpec(_Base):
    node_name: str | None = None
    priority: int | None = None
    containers: list[Container] | None = None
    init_containers: list[Container] | None = None
    overhead: ResourceList | None = None
    scheduling_gates: list[SchedulingGate] | None = None
    affinity: Any = None
    """Read only for the shape of the node affinity of a pod raygate's placement gate
    holds; any JSON is accepted here (a pod's affinity never fails a request)."""
    resource_claims: list[PodResourceClaim] | None = None
    scheduling_group: SchedulingGroup | None = None
    tolerations: list[Toleration] | None = None
    node_selector: dict[str, str] | None = None


class Condition(_Base):
    type: str = ""
    status: str = ""
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class PodStatus(_Base):
    phase: str | None = None
    conditions: list[Condition] | None = None
    nominated_node_name: str | None = None
    start_time: str | None = None


class Pod(_Base):
    metadata: PodMeta = msgspec.field(default_factory=PodMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class ObjectMeta(_Base):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None


class Taint(_Base):
    key: str = ""
    value: str | None = None
    effect: str = ""


class NodeSpec(_Base):
    unschedulable: bool | None = None
    taints: list[Taint] | None = None


class NodeStatus(_Base):
    allocatable: ResourceList | None = None


class Node(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class WorkerGroupSpec(_Base):
    group_name: str = ""
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    num_of_hosts: int | None = None
    suspend: bool | None = None
    scale_strategy: dict[str, Any] | None = None  # its scaleGate: cache.convert reads it


class RayClusterSpec(_Base):
    enable_in_tree_autoscaling: bool | None = None
    suspend: bool | None = None
    worker_group_specs: list[WorkerGroupSpec] | None = None


class RayClusterAnnotations(msgspec.Struct, omit_defaults=True):
    """Only the annotation raygate reads."""

    scale_up: str | None = msgspec.field(default=None, name="raygate.io/scale-up")


class RayClusterMeta(ObjectMeta):
    annotations: RayClusterAnnotations | None = None


class RayCluster(_Base):
    metadata: RayClusterMeta = msgspec.field(default_factory=RayClusterMeta)
    spec: RayClusterSpec = msgspec.field(default_factory=RayClusterSpec)


class PodGroupSpec(_Base):
    min_member: int | None = None


class PodGroupStatus(_Base):
    phase: str | None = None
    conditions: list[Condition] | None = None


class PodGroup(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
    status: PodGroupStatus = msgspec.field(default_factory=PodGroupStatus)


# --- Kubernetes' own gangs (scheduling.k8s.io/v1beta1, 1.37's GenericWorkload) ---------

class GangPolicy(_Base):
    min_count: int | None = None


class SchedulingPolicy(_Base):
    gang: GangPolicy | None = None


class GangGroupSpec(_Base):
    scheduling_policy: SchedulingPolicy | None = None


class GangGroupStatus(_Base):
    conditions: list[Condition] | None = None


class GangGroup(_Base):
    """A ``scheduling.k8s.io`` PodGroup: its gang's size and its conditions."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: GangGroupSpec = msgspec.field(default_factory=GangGroupSpec)
    status: GangGroupStatus = msgspec.field(default_factory=GangGroupStatus)


class WorkloadPodSet(_Base):
    name: str = ""
    count: int | None = None


class WorkloadSpec(_Base):
    pod_sets: list[WorkloadPodSet] | None = None


class WorkloadStatus(_Base):
    conditions: list[Condition] | None = None


class WorkloadAnnotations(msgspec.Struct, omit_defaults=True):
    """Only the annotation raygate reads: the slice an elastic Workload replaces."""

    replacement_for: str | None = msgspec.field(
        default=None, name="kueue.x-k8s.io/workload-slice-replacement-for")


class WorkloadMeta(ObjectMeta):
    annotations: WorkloadAnnotations | None = None


class Workload(_Base):
    api_version: str = ""
    metadata: WorkloadMeta = msgspec.field(default_factory=WorkloadMeta)
    spec: WorkloadSpec = msgspec.field(default_factory=WorkloadSpec)
    status: WorkloadStatus = msgspec.field(default_factory=WorkloadStatus)


class ObjectReference(_Base):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""


class EventSource(_Base):
    component: str = ""


class EventSeries(_Base):
    last_observed_time: str | None = None


class Event(_Base):
    """A core/v1 Event about a pod (what node autoscalers write: ``reason``, ``message``,
    who, and when it was last seen)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    involved_object: ObjectReference = msgspec.field(default_factory=ObjectReference)
    reason: str = ""
    message: str = ""
    source: EventSource | None = None
    reporting_component: str = ""
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    event_time: str | None = None
    series: EventSeries | None = None


class NodeClaimMeta(_Base):
    name: str = ""
    namespace: str = ""  # cluster-scoped: always ""
    uid: str = ""
    resource_version: str = ""
    deletion_timestamp: str | None = None


class NodeClaimStatus(_Base):
    node_name: str | None = None


class NodeClaim(_Base):
    """A Karpenter NodeClaim (karpenter.sh/v1): its name, its node once registered, and
    whether it is being deleted."""

    metadata: NodeClaimMeta = msgspec.field(default_factory=NodeClaimMeta)
    status: NodeClaimStatus = msgspec.field(default_factory=NodeClaimStatus)


class TypeMeta(_Base):
    """Enough of any object to route it by kind."""

    api_version: str = ""
    kind: str = ""


# --- list and watch envelopes (server.kube) --------------------------------------------

T = TypeVar("T")


class ListMeta(_Base):
    resource_version: str = ""
    # Set when the LIST was cut at ``limit``: pass it back to get the next page.
    continue_: str = msgspec.field(default="", name="continue")


class ObjectList(_Base, Generic[T]):
    """A LIST reply (``PodList``, ``NodeList``, a CRD's ``...List``)."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] | None = None


class WatchEvent(_Base, Generic[T]):
    """One line of a WATCH stream: ``{"type": ..., "object": ...}``."""

    type: str = ""
    object: T | None = None


INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation (value "true") on the BOOKMARK that ends a streaming list's initial
events (``metav1.InitialEventsAnnotationKey``, k8s.io/apimachinery
pkg/apis/meta/v1/types.go; set by k8s.io/apiserver pkg/storage/util.go
``AnnotateInitialEventsEndBookmark``)."""


class BookmarkMeta(_Base):
    resource_version: str = ""
    annotations: dict[str, str] | None = None


class Bookmark(_Base):
    """A BOOKMARK event's object: an empty object of the watched kind but for its
    ``metadata.resourceVersion`` and, ending a streaming list's initial events, the
    ``INITIAL_EVENTS_END`` annotation."""

    metadata: BookmarkMeta = msgspec.field(default_factory=BookmarkMeta)

    @property
    def initial_events_end(self) -> bool:
        return (self.metadata.annotations or {}).get(INITIAL_EVENTS_END) == "true"


class StatusDetails(_Base):
    retry_after_seconds: int | None = None


class Status(_Base):
    """A ``metav1.Status``: the body of an error reply and the object of an ERROR event."""

    code: int = 0
    reason: str = ""
    message: str = ""
    details: StatusDetails | None = None


class ApiResource(_Base):
    name: str = ""
    kind: str = ""


class ApiResourceList(_Base):
    """Discovery of one group/version (``GET /apis/<group>/<version>``)."""

    group_version: str = ""
    resources: list[ApiResource] | None = None


class Metadata(_Base):
    """Any object's identity only: what is left to remove an object raygate cannot read."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


NODE = msgspec.json.Decoder(Node)
"""A Node's JSON (Volcano's NodeInfo carries one) into the struct."""
