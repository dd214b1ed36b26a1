"""Pod views for the list/watch path: ``extender.convert.pod_view``, with what repeats
from pod to pod built once and shared.

Converting is most of a sync's CPU at 150,000 pods, and most of a pod's conversion is
work every pod of its Deployment or Ray worker group repeats: the same requests and limits
parsed into the same mappings, the same label set, the same few timestamps. Those parts
are immutable, so one object can serve every pod that has them: the sync is faster and
the cache smaller. The views are equal to ``convert.pod_view``'s, which remains the one
definition of a pod view (``tests/test_kube_views.py`` compares them on every pod shape
the tests know), but for one thing: only the conditions raygate reads are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from extender import convert
from extender.wire import kube
from plugin.model import EMPTY, Condition, ContainerResources, OwnerRef, PodView

__all__ = ["POD_CONDITIONS", "PodViews"]

K = TypeVar("K")
V = TypeVar("V")

_NONE: Mapping[str, str] = MappingProxyType({})

POD_CONDITIONS = frozenset({"PodScheduled", "Ready", "DisruptionTarget"})
"""The pod conditions raygate reads (``PodView.condition`` in ``plugin.admission`` and
``extender.cache``); the others (Initialized, ContainersReady, ...) are left out of the
views the cache holds: at 150,000 pods they are a quarter of the memory. A rule that
reads another condition type adds it here."""


class _Memo(dict[K, V]):
    """A dict that forgets everything when it holds ``limit`` entries: bounded, and the
    shapes a cluster uses now come back at once."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def keep(self, key: K, value: V) -> V:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value


class PodViews:
    """``convert.pod_view`` with shared parts. One per watcher thread (not locked)."""

    def __init__(self, limit: int = 50_000) -> None:
        self._resources: _Memo[tuple[tuple[str, kube.Quantity], ...], Mapping[str, int]] = (
            _Memo(limit))
        self._containers: _Memo[tuple[object, ...], ContainerResources] = _Memo(limit)
        self._labels: _Memo[tuple[tuple[str, str], ...], dict[str, str]] = _Memo(limit)
        self._times: _Memo[str, float | None] = _Memo(limit)

    def __call__(self, pod: kube.Pod, path: str = "$") -> PodView:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        annotations: dict[str, str] = {}
        if meta.annotations is not None:
            if meta.annotations.preemptable is not None:
                annotations["volcano.sh/preemptable"] = meta.annotations.preemptable
            if meta.annotations.group_name is not None:
                annotations["scheduling.k8s.io/group-name"] = meta.annotations.group_name
            if meta.annotations.task_spec is not None:
                annotations["volcano.sh/task-spec"] = meta.annotations.task_spec
        controller = None
        for ref in meta.owner_references or ():
            if ref.controller:
                controller = OwnerRef(ref.kind, ref.name, ref.uid, ref.api_version)
                break
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
        return PodView(
            uid=meta.uid,
            namespace=meta.namespace,
            name=meta.name,
            labels=self._label_set(meta.labels),
            annotations=annotations or _NONE,
            controller=controller,
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
        )

    # The field paths of errors are only built when a value is converted, not reused:
    # ``path`` + ``where % index``.

    def _label_set(self, labels: dict[str, str] | None) -> Mapping[str, str]:
        if not labels:
            return _NONE
        key = tuple(labels.items())
        shared = self._labels.get(key)
        return shared if shared is not None else self._labels.keep(key, labels)

    def _quantities(self, values: kube.ResourceList | None, path: str, where: str,
                    index: int = 0) -> Mapping[str, int]:
        if not values:
            return EMPTY
        key = tuple(values.items())
        shared = self._resources.get(key)
        if shared is None:
            where = where % index if "%" in where else where
            shared = self._resources.keep(key, convert.resources(values, path + where))
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
            shared = self._containers.keep(key, ContainerResources(
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
            seconds = self._times.keep(value, convert.timestamp(value, path + where))
        return seconds
