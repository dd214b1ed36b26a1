"""Drive the real Ray 2.60.0 autoscaler v2 offline: its ``Autoscaler`` (instance manager,
reconciler, scheduler, subscribers) and ``KubeRayProvider`` — stock, or raygate's
subclass — over a fake Kubernetes API (Ray's own ``IKubernetesHttpApiClient``), a fake
KubeRay controller and a fake GCS, with time injected into Ray's modules.

Import this module only once Ray is known to be importable (``tests.ray_required`` tells
first).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest
from ray.autoscaler._private.kuberay.autoscaling_config import AutoscalingConfigProducer
from ray.autoscaler._private.kuberay.node_provider import IKubernetesHttpApiClient
from ray.autoscaler.v2 import autoscaler as ray_autoscaler
from ray.autoscaler.v2.instance_manager.cloud_providers.kuberay.cloud_provider import (
    KubeRayProvider,
)
from ray.autoscaler.v2.instance_manager.config import KubeRayConfigReader
from ray.core.generated import autoscaler_pb2, instance_manager_pb2

from raygate.ray_autoscaler.provider import (
    AdmissionAwareKubeRayProvider,
    AdvisorFactory,
    Installation,
    install,
)
from testkit.builders import Obj
from tests.conftest import FakeClock

__all__ = ["RAY_TIME_MODULES", "Bench", "FakeGcs", "FakeKube", "RayTime", "Side"]

RAY_TIME_MODULES = (
    "ray.autoscaler.v2.instance_manager.common",  # status timestamps, has_timeout
    "ray.autoscaler.v2.instance_manager.reconciler",
    "ray.autoscaler.v2.scheduler",
    "ray.autoscaler.v2.instance_manager.subscribers.cloud_resource_monitor",
    "ray.autoscaler.v2.instance_manager.cloud_providers.kuberay.cloud_provider",
)
"""The Ray modules that read the clock on the paths these tests drive."""


class RayTime:
    """Stands in for the ``time`` module inside ``RAY_TIME_MODULES``: the test's clock,
    shared with the raygate server, and no sleeping."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def time(self) -> float:
        return self.clock.now

    def time_ns(self) -> int:
        return round(self.clock.now * 1e9)

    def monotonic(self) -> float:
        return self.clock.now

    def sleep(self, seconds: float) -> None:
        raise AssertionError(f"Ray tried to sleep {seconds} s in a test")


def patch_ray_time(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    fake = RayTime(clock)
    for module in RAY_TIME_MODULES:
        monkeypatch.setattr(f"{module}.time", fake)


NewPod = Callable[[str, str, float], Obj]
"""(pod name, worker group, now) to the pod KubeRay creates, as the scheduler then
leaves it (pending for some reason, or running)."""


class FakeKube(IKubernetesHttpApiClient):  # type: ignore[misc]  # Ray is untyped here
    """The Kubernetes API as ``KubeRayProvider`` and ``AutoscalingConfigProducer`` use it
    (GET the RayCluster and its pods, JSON-patch the RayCluster), plus ``kuberay()``: what
    the KubeRay operator does between two autoscaler loops."""

    def __init__(self, cluster: Obj, pods: list[Obj], new_pod: NewPod, clock: FakeClock,
                 extras: tuple[Obj, ...] = ()) -> None:
        self.cluster = copy.deepcopy(cluster)
        self.name = cluster["metadata"]["name"]
        self._version = itertools.count(1000)
        self.cluster["metadata"]["resourceVersion"] = str(next(self._version))
        self.pods = {p["metadata"]["name"]: copy.deepcopy(p) for p in pods}
        self.new_pod = new_pod
        self.clock = clock
        self.extras = extras
        self.patches: list[tuple[float, list[Obj]]] = []
        """(when, JSON patch) of every PATCH the autoscaler sent that was applied."""
        self.refused: list[list[Obj]] = []
        """Every PATCH refused, as the API server refuses one (a failed ``test``, a path
        that is not there): Ray sees an error."""
        self.before_patch: Callable[[], None] = lambda: None
        """Another writer, between the autoscaler's read and its write."""
        self.created: list[str] = []
        self.deleted: list[str] = []
        self._serial = itertools.count()

    # --- IKubernetesHttpApiClient ---

    def get(self, path: str) -> Obj:
        if path == f"rayclusters/{self.name}":
            return self.raycluster()
        if path.startswith("pods?labelSelector="):
            assert path.startswith(f"pods?labelSelector=ray.io/cluster%3D{self.name}")
            return {"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": str(next(self._version))},
                    "items": [copy.deepcopy(p) for p in self.pods.values()]}
        raise AssertionError(f"unexpected GET {path}")

    def patch(self, path: str, payload: list[Obj],
              content_type: str = "application/json-patch+json") -> Obj:
        """RFC 6902, all or nothing, as the API server applies a JSON Patch."""
        assert path == f"rayclusters/{self.name}", path
        assert content_type == "application/json-patch+json"
        self.before_patch()
        try:
            patched = jsonpatch.apply_patch(self.cluster, [self._lenient(op) for op in payload])
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
            self.refused.append(copy.deepcopy(payload))
            raise RuntimeError(f"422: the patch is refused: {error}") from error
        self.cluster = patched
        self.touch()
        self.patches.append((self.clock.now, copy.deepcopy(payload)))
        return self.raycluster()

    def _lenient(self, op: Obj) -> Obj:
        """The API server applies JSON Patches with evanphx/json-patch v4, whose
        ``replace`` of a missing object member adds it (RFC 6902 says to fail): Ray's
        scale-down write of a group with no ``scaleStrategy`` relies on that."""
        if op["op"] != "replace":
            return op
        parent, _, key = op["path"].rpartition("/")
        try:
            container = jsonpatch.JsonPointer(parent).resolve(self.cluster)
        except jsonpatch.JsonPointerException:
            return op
        missing = isinstance(container, dict) and key not in container
        return {**op, "op": "add"} if missing else op

    def delete(self, path: str) -> Obj:
        raise AssertionError(f"unexpected DELETE {path}")

    # --- the rest of the cluster ---

    def raycluster(self) -> Obj:
        return copy.deepcopy(self.cluster)

    def touch(self) -> None:
        """A new resourceVersion: the RayCluster was written."""
        self.cluster["metadata"]["resourceVersion"] = str(next(self._version))

    def objects(self) -> list[Obj]:
        """What raygate sees: the RayCluster, its pods, the extras (a PodGroup, ...)."""
        return [copy.deepcopy(self.cluster), *copy.deepcopy(list(self.pods.values())),
                *self.extras]

    def group_pods(self, group: str) -> list[str]:
        return [n for n, p in self.pods.items()
                if p["metadata"]["labels"].get("ray.io/group") == group]

    def group(self, name: str) -> Obj:
        (spec,) = [g for g in self.cluster["spec"]["workerGroupSpecs"]
                   if g["groupName"] == name]
        return spec  # type: ignore[no-any-return]

    def kuberay(self) -> None:
        """KubeRay's reconcilePods for ordinary groups: delete every
        pod in workersToDelete, then create pods up to the desired count; with in-tree
        autoscaling it never deletes pods by itself."""
        for spec in self.cluster["spec"]["workerGroupSpecs"]:
            group = spec["groupName"]
            for name in spec.get("scaleStrategy", {}).get("workersToDelete", []):
                if name in self.pods:
                    del self.pods[name]
                    self.deleted.append(name)
            desired = min(max(spec.get("replicas", 0), spec["minReplicas"]),
                          spec["maxReplicas"]) * spec.get("numOfHosts", 1)
            for _ in range(desired - len(self.group_pods(group))):
                name = f"{self.name}-{group}-worker-n{next(self._serial)}"
                self.pods[name] = self.new_pod(name, group, self.clock.now)
                self.created.append(name)

    def replicas(self, group: str) -> int:
        return int(self.group(group).get("replicas", 0))


class FakeGcs:
    """The GCS as the autoscaler loop reads it: every Ray-running pod is a node of its
    group, busy (no room left, never idle); ``demand`` is the tasks' resource requests
    (bundle, count), of which each running worker serves one, the rest pending."""

    address = "127.0.0.1:6379"

    def __init__(self, kube: FakeKube, demand: list[tuple[dict[str, float], int]]) -> None:
        self.kube = kube
        self.demand = demand
        self._version = itertools.count(1)

    def get_cluster_resource_state(self) -> bytes:
        state = autoscaler_pb2.ClusterResourceState(
            cluster_resource_state_version=next(self._version), cluster_session_name="test")
        served = 0
        for name, pod in self.kube.pods.items():
            if "containerStatuses" not in pod["status"]:
                continue
            labels = pod["metadata"]["labels"]
            group = labels["ray.io/group"]
            if labels["ray.io/node-type"] == "head":
                # How Ray tells the head (ray.autoscaler.v2.utils.is_head_node).
                total = {"CPU": 0.0, "node:__internal_head__": 1.0}
            else:
                total = {"CPU": float(self.kube.group(group)["template"]["spec"]
                                      ["containers"][0]["resources"]["limits"]["cpu"])}
                served += 1
            state.node_states.add(
                node_id=hashlib.sha224(name.encode()).digest(), instance_id=name,
                ray_node_type_name=group, node_ip_address="10.0.0.1",
                status=autoscaler_pb2.NodeStatus.RUNNING, total_resources=total,
                available_resources=dict.fromkeys(total, 0.0), idle_duration_ms=0)
        for bundle, count in self.demand:
            pending, served = max(0, count - served), max(0, served - count)
            if pending:
                state.pending_resource_requests.add(
                    request=autoscaler_pb2.ResourceRequest(resources_bundle=bundle),
                    count=pending)
        return bytes(autoscaler_pb2.GetClusterResourceStateReply(
            cluster_resource_state=state).SerializeToString())


STATUS_NAMES = instance_manager_pb2.Instance.InstanceStatus.Name


@dataclass
class Side:
    """One autoscaler over one fake cluster: ``loop()`` is one autoscaler iteration, then
    KubeRay's reaction."""

    name: str
    kube: FakeKube
    gcs: FakeGcs
    autoscaler: Any
    ray: Callable[[], AbstractContextManager[None]]
    """How Ray is patched while this side runs."""
    before_loop: Callable[[], None] = lambda: None
    history: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    transitions: list[str] = field(default_factory=list)
    """Every instance status change of this side, as the instance manager logs it:
    "Update instance A->B (id=…, type=…, cloud_instance_id=…, ray_id=…): details"."""

    def loop(self) -> Any:
        self.before_loop()
        with self.ray(), _transitions(self.transitions):
            state = self.autoscaler.update_autoscaling_state()
        # update_autoscaling_state logs and swallows any error, returning None.
        assert state is not None, f"{self.name}: the autoscaler loop failed (see the log)"
        self.kube.kuberay()
        self.history.append((self.kube.clock.now, self.workers()))
        return state

    def instances(self) -> list[Any]:
        reply = self.autoscaler._instance_manager.get_instance_manager_state(
            instance_manager_pb2.GetInstanceManagerStateRequest())
        return list(reply.state.instances)

    def workers(self) -> dict[str, str]:
        """Instance status by pod name for the worker instances that are neither
        TERMINATED nor ALLOCATION_FAILED; a launch in flight has no pod yet, and shows as
        ``<group #n>``."""
        out: dict[str, str] = {}
        in_flight = []
        for i in self.instances():
            if (i.node_kind == instance_manager_pb2.NodeKind.HEAD
                    or i.status in (instance_manager_pb2.Instance.TERMINATED,
                                    instance_manager_pb2.Instance.ALLOCATION_FAILED)):
                continue
            if i.cloud_instance_id:
                out[i.cloud_instance_id] = STATUS_NAMES(i.status)
            else:
                in_flight.append((i.instance_type, STATUS_NAMES(i.status)))
        for n, (group, status) in enumerate(sorted(in_flight)):
            out[f"<{group} #{n}>"] = status
        return out

    def details(self, pod: str) -> list[str]:
        """"A->B: details" for each status change of ``pod``'s instances."""
        return [m.split(" ", 2)[2].split(" (", 1)[0] + ": " + m.split("): ", 1)[1]
                for m in self.transitions if f"cloud_instance_id={pod}," in m]

    def failed_launches(self) -> list[str]:
        """Why each launch failed (REQUESTED -> ALLOCATION_FAILED), request ids left out."""
        return [re.sub(r" with request id [\w-]+", "", m.split("): launch failed with ", 1)[1])
                for m in self.transitions if "REQUESTED->ALLOCATION_FAILED" in m]

    @property
    def provider(self) -> Any:
        return self.autoscaler._cloud_instance_provider

    def advice(self) -> Any:
        provider = self.provider
        assert isinstance(provider, AdmissionAwareKubeRayProvider)
        return provider.advice


@contextmanager
def _transitions(into: list[str]) -> Iterator[None]:
    logger = logging.getLogger("ray.autoscaler.v2.instance_manager.instance_manager")
    handler = _Collect(into)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Update instance "):
            self.into.append(message)


class Bench:
    """The sides of one test: stock ones run Ray as shipped, the raygate one runs with
    raygate's hooks installed (``raygate.ray_autoscaler.provider.install``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
        self.monkeypatch = monkeypatch
        self.clock = clock
        self.installation: Installation | None = None
        self.sides: list[Side] = []
        patch_ray_time(monkeypatch, clock)

    def _shipped(self) -> AbstractContextManager[None]:
        return nullcontext() if self.installation is None else self.installation.undone()

    @staticmethod
    def _autoscaler(kube: FakeKube) -> Any:
        # The real config path: the RayCluster CR through Ray's AutoscalingConfigProducer.
        producer = AutoscalingConfigProducer(kube.name, kube.cluster["metadata"]["namespace"])
        producer.kubernetes_api_client = kube
        return ray_autoscaler.Autoscaler(
            session_name="raygate-test", config_reader=KubeRayConfigReader(producer),
            gcs_client=FakeGcs(kube, []))

    def stock(self, kube: FakeKube, demand: list[tuple[dict[str, float], int]]) -> Side:
        with self._shipped(), self.monkeypatch.context() as patch:
            patch.setattr(ray_autoscaler, "KubeRayProvider",
                          functools.partial(KubeRayProvider, k8s_api_client=kube))
            autoscaler = self._autoscaler(kube)
        assert type(autoscaler._cloud_instance_provider) is KubeRayProvider
        return self._side("stock", kube, autoscaler, demand, self._shipped)

    def raygate(self, kube: FakeKube, demand: list[tuple[dict[str, float], int]],
                advisor: AdvisorFactory, before_loop: Callable[[], None]) -> Side:
        assert self.installation is None, "one raygate side per test"
        self.installation = install(advisor, clock=self.clock, k8s_api_client=kube)
        autoscaler = self._autoscaler(kube)
        assert isinstance(autoscaler._cloud_instance_provider, AdmissionAwareKubeRayProvider)
        side = self._side("raygate", kube, autoscaler, demand, nullcontext)
        side.before_loop = before_loop
        return side

    def _side(self, name: str, kube: FakeKube, autoscaler: Any,
              demand: list[tuple[dict[str, float], int]],
              ray: Callable[[], AbstractContextManager[None]]) -> Side:
        autoscaler._gcs_client.demand = demand
        side = Side(name, kube, autoscaler._gcs_client, autoscaler, ray)
        self.sides.append(side)
        return side

    def close(self) -> None:
        for side in self.sides:
            if isinstance(side.provider, AdmissionAwareKubeRayProvider):
                side.provider.advisor.close()
        if self.installation is not None:
            self.installation.undo()
