"""Classification: GPU node? GPU pod? Which Ray role does a pod hold in its gang?

Each answer comes with its reason in words, so ``explain`` and the logs can say why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType

from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.devices import claim_gpu_reason
from raygate.policy.model import (
    PREEMPTION_REASON,
    NodeView,
    PodView,
    PreemptionRecord,
    RayClusterView,
    Role,
)

__all__ = [
    "LABEL_ROLE",
    "LABEL_RULE",
    "RoleVerdict",
    "fixed_role_or_floor",
    "gpu_node_reason",
    "gpu_pod_reason",
    "gpu_pod_resources",
    "group_floor",
    "group_roles",
    "is_scheduled",
    "pod_requests",
    "pod_role",
    "preemption_record",
    "written_role",
]

HEAD_GROUP = "headgroup"  # KubeRay's ray.io/group value on the head pod
LABEL_ROLE = "raygate.io/role"
"""The role raygate decided for the pod once, written into it (at its admission, or at
its release from raygate's gate): head, floor or surplus. Every layer reads it."""
LABEL_RULE = "raygate.io/rule"
"""Beside ``LABEL_ROLE``: the placement rule behind the pod's native affinity."""
_WRITTEN = {role.value: role for role in Role}
EMPTY_REASONS: Mapping[str, str] = MappingProxyType({})


def gpu_node_reason(node: NodeView, config: PolicyConfig,
                    dra_gpu_nodes: Mapping[str, str] = EMPTY_REASONS) -> str | None:
    """Why ``node`` is a GPU node (the resource, the label, or its DRA devices: the
    reasons ``dra_gpu_nodes`` holds by node name, ``devices.dra_node_reason``'s), or None
    for a CPU node."""
    for resource in config.gpu_resources:
        if node.allocatable.get(resource, 0) > 0:
            return f"allocatable {resource}={node.allocatable[resource] // 1000}"
    for key, value in config.gpu_node_labels.items():
        if node.labels.get(key) == value:
            return f"label {key}={value}"
    return dra_gpu_nodes.get(node.name)


def gpu_pod_reason(pod: PodView, view: ClusterView, config: PolicyConfig) -> str | None:
    """Why ``pod`` is a GPU pod, or None: it requests a GPU resource (a device plugin's, or
    one a GPU DeviceClass backs), or a resource claim of it asks for a GPU device class."""
    devices = view.gpu_devices()
    gpus = gpu_pod_resources(pod, (*config.gpu_resources, *devices.resources))
    if gpus:
        return f"requests GPU resources ({', '.join(gpus)})"
    if not pod.resource_claims:
        return None
    return claim_gpu_reason(pod.resource_claims, partial(view.resource_claim, pod.namespace),
                            partial(view.claim_template, pod.namespace), devices)


def gpu_pod_resources(pod: PodView, resources: Iterable[str]) -> tuple[str, ...]:
    """Of ``resources``, those any container or init container requests or limits."""
    found: list[str] = []
    for container in (*pod.containers, *pod.init_containers):
        for resource in resources:
            if resource in found:
                continue
            if container.requests.get(resource, 0) > 0 or container.limits.get(resource, 0) > 0:
                found.append(resource)
    return tuple(found)


def pod_requests(pod: PodView) -> dict[str, int]:
    """The pod's effective requests as the scheduler computes them (milli-units):
    the larger of the app containers plus sidecars and any single init container, plus
    the pod overhead; ``pods`` counts 1 (NodeResourcesFit's ``computePodResourceRequest``).
    """
    total: dict[str, int] = {}
    for container in pod.containers:
        _add(total, container.requests)
    # Init containers run one at a time, each beside the sidecars started before it;
    # sidecars also keep running beside the app (k8s.io/component-helpers resource.PodRequests).
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for init in pod.init_containers:
        if init.sidecar:
            _add(total, init.requests)
            _add(sidecars, init.requests)
            during = sidecars
        else:
            during = dict(sidecars)
            _add(during, init.requests)
        for resource, value in during.items():
            init_peak[resource] = max(init_peak.get(resource, 0), value)
    for resource, value in init_peak.items():
        total[resource] = max(total.get(resource, 0), value)
    _add(total, pod.overhead)
    total["pods"] = 1000
    return total


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, value in more.items():
        into[resource] = into.get(resource, 0) + value


def group_floor(cluster: RayClusterView, group: str) -> int:
    """The number of pods of ``group`` that hold the gang floor.

    Mirrors how KubeRay sizes the Volcano PodGroup's ``minMember``:
    ``minReplicas × numOfHosts`` with in-tree autoscaling, else
    ``clamp(replicas, min, max) × numOfHosts``; suspended groups and unknown groups count
    nothing. The head group's floor is 1.
    """
    if group == HEAD_GROUP:
        return 1
    spec = cluster.worker_group(group)
    if spec is None or spec.suspended or cluster.suspended:
        return 0
    if cluster.autoscaling:
        return spec.min_replicas * spec.num_of_hosts
    replicas = spec.min_replicas if spec.replicas is None else spec.replicas
    replicas = min(max(replicas, spec.min_replicas), spec.max_replicas)
    return replicas * spec.num_of_hosts


@dataclass(frozen=True, slots=True)
class RoleVerdict:
    role: Role
    reason: str
    cluster_unknown: bool = False
    """The pod's RayCluster is not in the cache: floor by default, the safe side."""


def _live(pod: PodView) -> bool:
    return not pod.terminal and pod.deleted is None


def is_scheduled(pod: PodView) -> bool:
    """Holds a place on a node for its group: bound, neither terminating nor terminal."""
    return bool(pod.node_name) and _live(pod)


def preemption_record(pod: PodView, on_gpu_node: bool) -> PreemptionRecord | None:
    """What the thrash guard remembers of a Ray pod the scheduler preempted (its
    ``DisruptionTarget`` condition), or None when the scheduler did not preempt it."""
    if not pod.is_ray or not pod.node_name:
        return None
    cond = pod.condition("DisruptionTarget")
    if cond is None or cond.status != "True" or cond.reason != PREEMPTION_REASON:
        return None
    at = cond.last_transition if cond.last_transition is not None else pod.deleted
    if at is None:
        return None
    return PreemptionRecord(pod.group_key, pod.uid, pod.node_name, on_gpu_node, at)


def written_role(pod: PodView) -> Role | None:
    """The role raygate wrote into ``pod`` (``LABEL_ROLE``), or None where it wrote none
    (a pod created while raygate's webhook was not reached, or before raygate ran) or a
    value it does not know (someone else's edit: derived again, never trusted)."""
    value = pod.labels.get(LABEL_ROLE)
    return None if value is None else _WRITTEN.get(value)


def group_roles(
    pods: Iterable[PodView], floor: int, is_gpu_node: Mapping[str, bool] | None = None
) -> dict[str, Role]:
    """Floor or surplus for every live pod of one worker group, by UID.

    A pod keeps the role raygate wrote into it (``written_role``): the role is decided
    once. The floor places no written floor holds go to the pods without one, and
    ``r`` such pods over those places make the surplus, chosen so that losing them hurts
    least: pods on GPU nodes first (they are the ones a GPU job wants gone), then
    pending pods (nothing to lose, and this keeps ``pod_role``'s rule for a pending pod
    consistent), then the youngest. Ties break on the name, so the answer is stable
    across calls. Where fewer live pods hold the floor than it needs (a floor pod gone,
    its replacement not yet made), written surplus pods are counted as floor in the same
    order until the count is whole: a victim never takes a group below its floor.
    """
    live = [p for p in pods if _live(p)]
    gpu = is_gpu_node or {}

    def surplus_first(pod: PodView) -> tuple[int, int, float, str]:
        on_gpu = 0 if pod.node_name and gpu.get(pod.node_name, False) else 1
        pending = 0 if not pod.node_name else 1
        return (on_gpu, pending, -(pod.created or 0.0), pod.name)

    live.sort(key=surplus_first)
    roles = {p.uid: role for p in live if (role := written_role(p)) is not None}
    unwritten = [p for p in live if p.uid not in roles]
    places = max(floor - sum(r is not Role.SURPLUS for r in roles.values()), 0)
    surplus = max(len(unwritten) - places, 0)
    roles.update((p.uid, Role.SURPLUS if i < surplus else Role.FLOOR)
                 for i, p in enumerate(unwritten))
    short = places - (len(unwritten) - surplus)
    if short > 0:  # top up from the written surplus that would hurt most to lose
        written_surplus = [p for p in live if roles[p.uid] is Role.SURPLUS]
        roles.update((p.uid, Role.FLOOR) for p in written_surplus[-short:])
    return roles


def fixed_role_or_floor(pod: PodView, view: ClusterView) -> RoleVerdict | int:
    """The roles no count decides — the head's, and floor for a pod whose RayCluster the
    cache lacks (the safe side) — or else the floor of the pod's group, which decides."""
    if pod.ray_node_type == "head":
        return RoleVerdict(Role.HEAD, "the head pod is always part of the gang floor")
    cluster = view.raycluster(pod.namespace, pod.ray_cluster)
    if cluster is None:
        return RoleVerdict(
            Role.FLOOR,
            f"RayCluster {pod.namespace}/{pod.ray_cluster} is unknown to raygate; "
            "treated as floor (the safe side)",
            cluster_unknown=True,
        )
    return group_floor(cluster, pod.group_key.group)


def pod_role(pod: PodView, view: ClusterView) -> RoleVerdict:
    """The Ray role of ``pod``, which may be unknown to the cache (kube-scheduler sends pods
    its watch saw before ours): classified from the pod plus what the cache knows of its
    RayCluster and group."""
    # A bound pod's role is the count's, written roles first (group_roles).
    written = written_role(pod) if _live(pod) and not pod.node_name else None
    if written is not None:
        return RoleVerdict(written, f"decided once, when raygate first saw it "
                           f"({LABEL_ROLE}={written.value})")
    floor = fixed_role_or_floor(pod, view)
    if isinstance(floor, RoleVerdict):
        return floor
    key = pod.group_key
    if not pod.node_name:
        # A pending pod fills the floor first: it is floor while the group's scheduled
        # pods are below it.
        scheduled = view.scheduled_count(key)
        if scheduled < floor:
            return RoleVerdict(
                Role.FLOOR, f"group {key.group} has {scheduled} of floor {floor} pods scheduled"
            )
        return RoleVerdict(
            Role.SURPLUS,
            f"group {key.group} already has {scheduled} scheduled pods for a floor of {floor}",
        )
    if not _live(pod):
        return RoleVerdict(Role.SURPLUS, "terminating or finished: no longer part of the floor")
    pods = view.group_pods(key)
    if all(p.uid != pod.uid for p in pods):
        pods = (*pods, pod)  # bound, but not in the cache yet (e.g. placed in-session)
    roles = group_roles(pods, floor, _gpu_lookup(view, pods))
    role = roles.get(pod.uid, Role.FLOOR)
    if role is Role.SURPLUS:
        return RoleVerdict(
            Role.SURPLUS, f"one of the pods above floor {floor} in group {key.group}")
    return RoleVerdict(Role.FLOOR, f"one of the {floor} floor pods of group {key.group}")


def _gpu_lookup(view: ClusterView, pods: Iterable[PodView]) -> dict[str, bool]:
    return {p.node_name: bool(view.is_gpu_node(p.node_name)) for p in pods if p.node_name}
