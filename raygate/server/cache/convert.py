"""Wire structs (``raygate.server.wire.kube``) to the policy's frozen views
(``raygate.policy.model``).

Quantities become milli-units and RFC 3339 timestamps seconds since the epoch. A value
that cannot be converted raises ``ConversionError`` with the field path.

Pods are most of a cluster and most of a pod's conversion is work every pod of its
Deployment or Ray worker group repeats: the same requests and limits parsed into the same
mappings, the same label set, the same few timestamps. Those parts are immutable, so
``PodViews`` builds each once and shares it: a sync of 150,000 pods is faster and the
cache smaller, and a request's pod converts in less time.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from raygate.contract.errors import BadRequest
from raygate.policy.admission.autoscalers import wanted
from raygate.policy.constraints import Taint
from raygate.policy.devices import PodClaim
from raygate.policy.model import (
    ANNOTATION_PREEMPTABLE,
    EMPTY,
    LABEL_CLUSTER,
    Condition,
    ContainerResources,
    GangGroupView,
    NodeClaimView,
    NodeView,
    OwnerRef,
    PodEventView,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkerGroupSpec,
    WorkloadView,
)
from raygate.policy.native import ANNOTATION_ADMITTED
from raygate.policy.quantity import QuantityError, parse_milli
from raygate.policy.scale_up import ALL_OR_NOTHING, KEEPS_PODS_OFF
from raygate.server.cache.convert_gated import UNGATED, gated
from raygate.server.cache.memo import Memo
from raygate.server.wire import kube

__all__ = [
    "POD_CONDITIONS",
    "ConversionError",
    "PodViews",
    "event_view",
    "node_view",
    "nodeclaim_view",
    "pod_view",
    "podgroup_view",
    "raycluster_view",
    "timestamp",
    "wanted_event",
    "workload_view",
]


class ConversionError(BadRequest):
    """A request's object raygate cannot read is the request's fault: the fronts let it
    travel as the ``BadRequest`` it is, its path in the message."""

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


_NONE: Mapping[str, str] = MappingProxyType({})

POD_CONDITIONS = frozenset({"PodScheduled", "Ready", "DisruptionTarget"})
"""The pod conditions raygate reads (``PodView.condition`` in ``raygate.policy.admission``
and ``raygate.server.cache.cluster``); the others (Initialized, ContainersReady, ...) are
left out of the views the cache holds: at 150,000 pods they are a quarter of the memory.
A rule that reads another condition type adds it here."""


class PodViews:
    """Pods to views, sharing the parts that repeat, each kind in a bounded ``Memo``
    (threads may share an instance)."""

    def __init__(self, limit: int = 50_000, *, unbound_ray_constraints: bool = False) -> None:
        self._unbound_ray_constraints = unbound_ray_constraints
        """Keep where an unbound Ray pod may go (``raygate.policy.room`` reads it off the
        cache's views); the request paths' converter does not: a filter or webhook call
        never needs it, and building it costs a third of the view."""
        self._resources: Memo[tuple[tuple[str, kube.Quantity], ...], Mapping[str, int]] = (
            Memo(limit))
        self._containers: Memo[tuple[object, ...], ContainerResources] = Memo(limit)
        self._labels: Memo[tuple[tuple[str, str], ...], dict[str, str]] = Memo(limit)
        self._times: Memo[str, float | None] = Memo(limit)

    def __call__(self, pod: kube.Pod, path: str = "$") -> PodView:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        annotations = _annotations(meta.annotations) if meta.annotations is not None else {}
        conditions = []
        for i, c in enumerate(status.conditions or ()):
            if c.type in POD_CONDITIONS:
                conditions.append(Condition(
                    c.type, c.status, c.reason or "", c.message or "",
                    self._time(c.last_transition_time, path,
                               ".status.conditions[%d].lastTransitionTime", i)))
        containers: tuple[ContainerResources, ...] = ()
        init_containers: tuple[ContainerResources, ...] = ()
        if spec.containers:
            containers = tuple(self._container(c, path, ".spec.containers[%d]", i)
                               for i, c in enumerate(spec.containers))
        if spec.init_containers:
            init_containers = tuple(self._container(c, path, ".spec.initContainers[%d]", i)
                                    for i, c in enumerate(spec.init_containers))
        unbound_ray = (self._unbound_ray_constraints and not spec.node_name
                       and LABEL_CLUSTER in (meta.labels or _NONE))
        gates, shape, constraints = (gated(spec, unbound_ray=unbound_ray)
                                     if spec.scheduling_gates or unbound_ray else UNGATED)
        return PodView(
            uid=meta.uid,
            namespace=meta.namespace,
            name=meta.name,
            labels=self._label_set(meta.labels),
            annotations=annotations or _NONE,
            controller=_controller(meta.owner_references),
            node_name=spec.node_name or "",
            priority=spec.priority or 0,
            containers=containers,
            init_containers=init_containers,
            overhead=self._quantities(spec.overhead, path, ".spec.overhead"),
            phase=status.phase or "",
            conditions=tuple(conditions),
            created=self._time(meta.creation_timestamp, path, ".metadata.creationTimestamp"),
            deleted=self._time(meta.deletion_timestamp, path, ".metadata.deletionTimestamp"),
            nominated_node_name=status.nominated_node_name or "",
            scheduling_gates=gates,
            node_affinity=shape,
            constraints=constraints,
            resource_claims=pod_claims(spec.resource_claims),
            scheduling_group=(spec.scheduling_group.pod_group_name or ""
                              if spec.scheduling_group is not None else ""),
        )

    # The field paths of errors are only built when a value is converted, not reused:
    # ``path`` + ``where % index``.

    def _label_set(self, labels: dict[str, str] | None) -> Mapping[str, str]:
        if not labels:
            return _NONE
        key = tuple(labels.items())
        shared = self._labels.get(key)
        return shared if shared is not None else self._labels.put(key, labels)

    def _quantities(self, values: kube.ResourceList | None, path: str, where: str,
                    index: int = 0) -> Mapping[str, int]:
        if not values:
            return EMPTY
        key = tuple(values.items())
        shared = self._resources.get(key)
        if shared is None:
            where = where % index if "%" in where else where
            shared = self._resources.put(key, resources(values, path + where))
        return shared

    def _container(self, c: kube.Container, path: str, where: str,
                   index: int) -> ContainerResources:
        res = c.resources
        # restartPolicy Always on an init container makes it a sidecar (KEP-753).
        sidecar = c.restart_policy == "Always"
        if res is None:
            return ContainerResources(sidecar=sidecar)
        key = (tuple(res.requests.items()) if res.requests else (),
               tuple(res.limits.items()) if res.limits else (), sidecar)
        shared = self._containers.get(key)
        if shared is None:
            at = path + where % index
            shared = self._containers.put(key, ContainerResources(
                requests=self._quantities(res.requests, at, ".resources.requests"),
                limits=self._quantities(res.limits, at, ".resources.limits"),
                sidecar=sidecar,
            ))
        return shared

    def _time(self, value: str | None, path: str, where: str,
              index: int = 0) -> float | None:
        if not value:
            return None
        seconds = self._times.get(value)
        if seconds is None:
            where = where % index if "%" in where else where
            seconds = self._times.put(value, timestamp(value, path + where))
        return seconds


def _annotations(kept: kube.PodAnnotations) -> dict[str, str]:
    """The annotations a view keeps, of those raygate reads."""
    out: dict[str, str] = {}
    for key, value in ((ANNOTATION_PREEMPTABLE, kept.preemptable),
                       ("scheduling.k8s.io/group-name", kept.group_name),
                       ("volcano.sh/task-spec", kept.task_spec),
                       (ANNOTATION_ADMITTED, kept.admitted)):
        if value is not None:
            out[key] = value
    return out


def pod_claims(claims: list[kube.PodResourceClaim] | None) -> tuple[PodClaim, ...]:
    """A pod spec's ``resourceClaims`` (also a pod template's: ``raygate check``)."""
    if not claims:
        return ()
    return tuple(PodClaim(c.name, c.resource_claim_name or "",
                          c.resource_claim_template_name or "") for c in claims)


pod_view = PodViews()
"""Pod to view, with what repeats from pod to pod shared: the request path's converter
(the list/watch path has one of its own: ``raygate.server.kube.resources``)."""


def node_view(node: kube.Node, path: str = "$") -> NodeView:
    return NodeView(
        name=node.metadata.name,
        labels=node.metadata.labels or {},
        allocatable=resources(node.status.allocatable, f"{path}.status.allocatable"),
        unschedulable=bool(node.spec.unschedulable),
        taints=_keep_off(node.spec.taints) if node.spec.taints else (),
    )


def _keep_off(taints: list[kube.Taint]) -> tuple[Taint, ...]:
    return tuple(Taint(t.key, t.value or "", t.effect) for t in taints
                 if t.effect in KEEPS_PODS_OFF)


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
            scale_gates=_scale_gates(g.scale_strategy),
        ))
    return RayClusterView(
        namespace=rc.metadata.namespace,
        name=rc.metadata.name,
        uid=rc.metadata.uid,
        autoscaling=bool(rc.spec.enable_in_tree_autoscaling),
        suspended=bool(rc.spec.suspend),
        worker_groups=tuple(groups),
        labels=rc.metadata.labels or {},
        all_or_nothing=(rc.metadata.annotations is not None
                        and rc.metadata.annotations.scale_up == ALL_OR_NOTHING),
        owner=_controller(rc.metadata.owner_references),
    )


def _scale_gates(strategy: dict[str, Any] | None) -> tuple[Mapping[str, str], ...]:
    """Each ``scaleGate`` entry's string fields (the schema's key among them, whichever
    it is); anything that is no list of objects reads as none."""
    entries = (strategy or {}).get("scaleGate")
    if not isinstance(entries, list):
        return ()
    return tuple(MappingProxyType({k: v for k, v in e.items() if isinstance(v, str)})
                 for e in entries if isinstance(e, dict))


def podgroup_view(pg: kube.PodGroup, path: str = "$") -> PodGroupView:
    return PodGroupView(
        namespace=pg.metadata.namespace,
        name=pg.metadata.name,
        phase=pg.status.phase or "",
        min_member=pg.spec.min_member or 0,
        owner=_controller(pg.metadata.owner_references),
        conditions=_conditions(pg.status.conditions, f"{path}.status.conditions"),
    )


def gang_group_view(pg: kube.GangGroup, path: str = "$") -> GangGroupView:
    spec = pg.spec
    gang = spec.scheduling_policy.gang if spec.scheduling_policy is not None else None
    return GangGroupView(
        namespace=pg.metadata.namespace, name=pg.metadata.name,
        min_count=(gang.min_count or 0) if gang is not None else None,
        conditions=_conditions(pg.status.conditions, f"{path}.status.conditions"))


def workload_view(wl: kube.Workload, path: str = "$") -> WorkloadView:
    annotations = wl.metadata.annotations
    return WorkloadView(
        namespace=wl.metadata.namespace,
        name=wl.metadata.name,
        owner=_controller(wl.metadata.owner_references),
        conditions=_conditions(wl.status.conditions, f"{path}.status.conditions"),
        api_version=wl.api_version,
        pods=(sum(max(0, ps.count or 0) for ps in wl.spec.pod_sets)
              if wl.spec.pod_sets is not None else None),
        replacement_for=(annotations.replacement_for or "") if annotations else "",
    )


def event_view(event: kube.Event, path: str = "$") -> PodEventView:
    """A pod's Event. Its time is when it was last seen: ``series.lastObservedTime``
    (events.k8s.io writers), ``lastTimestamp`` (core/v1 recorders, which count repeats
    on one object), ``eventTime``, then ``firstTimestamp``."""
    series = event.series.last_observed_time if event.series is not None else None
    for field, value in (("series.lastObservedTime", series),
                         ("lastTimestamp", event.last_timestamp),
                         ("eventTime", event.event_time),
                         ("firstTimestamp", event.first_timestamp)):
        if value:
            at = timestamp(value, f"{path}.{field}")
            break
    else:
        at = None
    return PodEventView(
        namespace=event.metadata.namespace, name=event.metadata.name,
        pod_uid=event.involved_object.uid, reason=event.reason, message=event.message,
        component=event_component(event), at=at)


def wanted_event(event: kube.Event) -> bool:
    """Is this one of the pod events the cache holds (``autoscalers.wanted``)?"""
    return wanted(event.reason, event_component(event), event.message)


def event_component(event: kube.Event) -> str:
    source = event.source.component if event.source is not None else ""
    return source or event.reporting_component


def nodeclaim_view(claim: kube.NodeClaim, path: str = "$") -> NodeClaimView:
    return NodeClaimView(name=claim.metadata.name, node_name=claim.status.node_name or "",
                         deleting=bool(claim.metadata.deletion_timestamp))

