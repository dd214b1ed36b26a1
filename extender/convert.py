"""Wire structs (``extender.wire.kube``) to the policy's frozen views (``plugin.model``).

Quantities become milli-units and RFC 3339 timestamps seconds since the epoch. A value
that cannot be converted raises ``ConversionError`` with the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType

from extender.wire import kube
from plugin.model import (
    EMPTY,
    Condition,
    ContainerResources,
    NodeView,
    OwnerRef,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkerGroupSpec,
    WorkloadView,
)
from plugin.quantity import QuantityError, parse_milli

__all__ = [
    "ConversionError",
    "node_view",
    "pod_view",
    "podgroup_view",
    "raycluster_view",
    "timestamp",
    "workload_view",
]


class ConversionError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{message} - at `{path}`")
        self.path = path


def timestamp(value: str | None, path: str) -> float | None:
    """RFC 3339 (``2026-11-30T04:50:52Z``, as Kubernetes writes metav1.Time) to epoch
    seconds."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ConversionError(path, f"not an RFC 3339 time: {value!r}") from None


def resources(values: kube.ResourceList | None, path: str) -> Mapping[str, int]:
    if not values:
        return EMPTY
    out: dict[str, int] = {}
    for name, quantity in values.items():
        try:
            out[name] = parse_milli(quantity)
        except QuantityError as exc:
            raise ConversionError(f"{path}.{name}", str(exc)) from None
    return MappingProxyType(out)


def _container(c: kube.Container, path: str) -> ContainerResources:
    # restartPolicy Always on an init container makes it a sidecar (KEP-753).
    sidecar = c.restart_policy == "Always"
    if c.resources is None:
        return ContainerResources(sidecar=sidecar)
    return ContainerResources(
        requests=resources(c.resources.requests, f"{path}.resources.requests"),
        limits=resources(c.resources.limits, f"{path}.resources.limits"),
        sidecar=sidecar,
    )


def _controller(refs: list[kube.OwnerReference] | None) -> OwnerRef | None:
    for ref in refs or ():
        if ref.controller:
            return OwnerRef(ref.kind, ref.name, ref.uid, ref.api_version)
    return None


def _conditions(conds: list[kube.Condition] | None, path: str) -> tuple[Condition, ...]:
    return tuple(
        Condition(
            c.type, c.status, c.reason or "", c.message or "",
            timestamp(c.last_transition_time, f"{path}[{i}].lastTransitionTime"),
        )
        for i, c in enumerate(conds or ())
    )


def pod_view(pod: kube.Pod, path: str = "$") -> PodView:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    annotations: dict[str, str] = {}
    if meta.annotations is not None:
        if meta.annotations.preemptable is not None:
            annotations["volcano.sh/preemptable"] = meta.annotations.preemptable
        if meta.annotations.group_name is not None:
            annotations["scheduling.k8s.io/group-name"] = meta.annotations.group_name
        if meta.annotations.task_spec is not None:
            annotations["volcano.sh/task-spec"] = meta.annotations.task_spec
    return PodView(
        uid=meta.uid,
        namespace=meta.namespace,
        name=meta.name,
        labels=meta.labels or {},
        annotations=annotations,
        controller=_controller(meta.owner_references),
        node_name=spec.node_name or "",
        priority=spec.priority or 0,
        containers=tuple(
            _container(c, f"{path}.spec.containers[{i}]")
            for i, c in enumerate(spec.containers or ())
        ),
        init_containers=tuple(
            _container(c, f"{path}.spec.initContainers[{i}]")
            for i, c in enumerate(spec.init_containers or ())
        ),
        overhead=resources(spec.overhead, f"{path}.spec.overhead"),
        phase=status.phase or "",
        conditions=_conditions(status.conditions, f"{path}.status.conditions"),
        created=timestamp(meta.creation_timestamp, f"{path}.metadata.creationTimestamp"),
        deleted=timestamp(meta.deletion_timestamp, f"{path}.metadata.deletionTimestamp"),
        nominated_node_name=status.nominated_node_name or "",
    )


def node_view(node: kube.Node, path: str = "$") -> NodeView:
    return NodeView(
        name=node.metadata.name,
        labels=node.metadata.labels or {},
        allocatable=resources(node.status.allocatable, f"{path}.status.allocatable"),
        unschedulable=bool(node.spec.unschedulable),
    )


def raycluster_view(rc: kube.RayCluster, path: str = "$") -> RayClusterView:
    groups = []
    for i, g in enumerate(rc.spec.worker_group_specs or ()):
        gpath = f"{path}.spec.workerGroupSpecs[{i}]"
        for field, value in (("replicas", g.replicas), ("minReplicas", g.min_replicas),
                             ("maxReplicas", g.max_replicas), ("numOfHosts", g.num_of_hosts)):
            if value is not None and value < 0:
                raise ConversionError(f"{gpath}.{field}", f"must not be negative, got {value}")
        groups.append(WorkerGroupSpec(
            name=g.group_name,
            replicas=g.replicas,
            min_replicas=g.min_replicas or 0,
            max_replicas=2147483647 if g.max_replicas is None else g.max_replicas,
            # KubeRay defaults numOfHosts to 1; 0 is treated the same by its helpers.
            num_of_hosts=g.num_of_hosts or 1,
            suspended=bool(g.suspend),
        ))
    return RayClusterView(
        namespace=rc.metadata.namespace,
        name=rc.metadata.name,
        uid=rc.metadata.uid,
        autoscaling=bool(rc.spec.enable_in_tree_autoscaling),
        suspended=bool(rc.spec.suspend),
        worker_groups=tuple(groups),
        labels=rc.metadata.labels or {},
    )


def podgroup_view(pg: kube.PodGroup, path: str = "$") -> PodGroupView:
    return PodGroupView(
        namespace=pg.metadata.namespace,
        name=pg.metadata.name,
        phase=pg.status.phase or "",
        min_member=pg.spec.min_member or 0,
        owner=_controller(pg.metadata.owner_references),
        conditions=_conditions(pg.status.conditions, f"{path}.status.conditions"),
    )


def workload_view(wl: kube.Workload, path: str = "$") -> WorkloadView:
    return WorkloadView(
        namespace=wl.metadata.namespace,
        name=wl.metadata.name,
        owner=_controller(wl.metadata.owner_references),
        conditions=_conditions(wl.status.conditions, f"{path}.status.conditions"),
        api_version=wl.api_version,
    )
