"""The cluster ``bench.cache_sync``, ``bench.soak`` and ``bench.cache_scale`` serve, as
JSON shaped as ``kubectl get -o json`` prints it: EKS-like nodes (``bench.payloads``,
one in seven a GPU node), RayClusters of 100 pods each (a head, 4 ``baseline`` and 95
``overflow`` workers; ``testkit.ray_pods``' ~7 KB KubeRay worker pods) and web Deployment
pods (~4 KB, ``fixtures/web_pod.json``) for the rest.

Pods are rendered from a few templates (``__X__`` placeholders filled per pod), so that
150,000 of them take seconds; ``ClusterDouble`` serves them from the API-server double of
``testkit/apiserver.py`` and changes them as probes would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from bench.payloads import FLOOR_GROUP, OVERFLOW_GROUP, node, node_names, ray_worker_pod, raycluster

__all__ = ["PODS_PER_RAYCLUSTER", "TOKEN", "Cluster", "ClusterDouble", "PodSpec",
           "build_cluster", "raycluster_name"]

FIXTURES = Path(__file__).parent / "fixtures"
TOKEN = "raygate-bench-token"
PODS_PER_RAYCLUSTER = 100
RAY_FRACTION = 0.2
"""Of all pods, those that belong to RayClusters; the rest are web Deployment pods."""
GPU_EVERY = 7  # one node in 7 is a GPU node (~15%)
STRIDE = 7919
"""Consecutive changes walk the pods with this stride, so they hit other nodes and
RayClusters."""


def _web_pod_template() -> bytes:
    """A web Deployment's pod with an Envoy sidecar, as the API server prints it
    (``fixtures/web_pod.json``); the ``__X__`` strings are filled per pod."""
    return msgspec.json.encode(json.loads((FIXTURES / "web_pod.json").read_text("utf-8")))


def _ray_pod_template(group: str) -> bytes:
    """``bench.payloads``'s running KubeRay worker, its RayCluster name left open."""
    pod = ray_worker_pod(group, index=0, node_name="__NODE__")
    meta = pod["metadata"]
    meta.update(name="__NAME__", uid="__UID__", resourceVersion="__RV__",
                creationTimestamp="__T0__")
    pod["status"]["startTime"] = "__T0__"
    pod["status"]["podIP"] = "__IP__"
    pod["status"]["podIPs"] = [{"ip": "__IP__"}]
    for cond in pod["status"]["conditions"]:
        cond["lastTransitionTime"] = "__T1__"
        if cond["type"] in ("Ready", "ContainersReady"):
            cond["status"], cond["lastTransitionTime"] = "__READY__", "__T2__"
    # Every "bench" in it is the RayCluster's name (labels, owner, service, account).
    return msgspec.json.encode(pod).replace(b"bench", b"__CLUSTER__")


@dataclass(frozen=True, slots=True)
class PodSpec:
    template: int
    name: str
    namespace: str
    uid: str
    node: str
    ip: str
    cluster: str
    created: int
    """Seconds after ``EPOCH``: pods are created over a month, started seconds later."""


EPOCH = datetime(2026, 10, 30, tzinfo=UTC)


@dataclass
class Cluster:
    nodes: list[tuple[str, bytes]]
    rayclusters: list[tuple[str, bytes]]
    pods: list[PodSpec]
    templates: list[bytes]
    node_names: list[str]

    def render(self, pod: PodSpec, ready: bool = True) -> bytes:
        body = self.templates[pod.template]
        t0 = EPOCH + timedelta(seconds=pod.created)
        for placeholder, value in ((b"__NAME__", pod.name), (b"__NS__", pod.namespace),
                                   (b"__UID__", pod.uid), (b"__NODE__", pod.node),
                                   (b"__IP__", pod.ip), (b"__CLUSTER__", pod.cluster),
                                   (b"__READY__", "True" if ready else "False"),
                                   (b"__T0__", _iso(t0)),
                                   (b"__T1__", _iso(t0 + timedelta(seconds=3))),
                                   (b"__T2__", _iso(t0 + timedelta(seconds=11)))):
            body = body.replace(placeholder, value.encode())
        return body


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def raycluster_name(index: int) -> str:
    return f"rc-{index:04d}"


def build_cluster(n_nodes: int, n_pods: int) -> Cluster:
    names = node_names(n_nodes)
    nodes = []
    for i, name in enumerate(names):
        obj = node(name, i, i % GPU_EVERY == 0)
        obj["metadata"]["resourceVersion"] = "__RV__"
        nodes.append((name, msgspec.json.encode(obj)))
    cpu_nodes = [name for i, name in enumerate(names) if i % GPU_EVERY != 0]
    templates = [_web_pod_template(), _ray_pod_template(FLOOR_GROUP),
                 _ray_pod_template(OVERFLOW_GROUP)]
    n_ray_clusters = max(1, int(n_pods * RAY_FRACTION) // PODS_PER_RAYCLUSTER)
    rc_template = msgspec.json.encode(raycluster()).replace(b"bench", b"__CLUSTER__")
    rayclusters = [(raycluster_name(c), rc_template.replace(b"__CLUSTER__",
                                                            raycluster_name(c).encode())
                    .replace(b'"resourceVersion":"4711"', b'"resourceVersion":"__RV__"'))
                   for c in range(n_ray_clusters)]
    pods: list[PodSpec] = []
    for i in range(n_pods):
        ray = i < n_ray_clusters * PODS_PER_RAYCLUSTER
        if ray:
            cluster = raycluster_name(i // PODS_PER_RAYCLUSTER)
            slot = i % PODS_PER_RAYCLUSTER
            template = 1 if slot < 5 else 2  # 5 baseline (floor 4: one surplus), 95 overflow
            name = f"{cluster}-{'baseline' if template == 1 else 'overflow'}-worker-{slot:03d}"
            namespace, host = "ray", cpu_nodes[i % len(cpu_nodes)]
        else:
            cluster, template = "", 0
            namespace = f"shop-{i % 40:02d}"
            name = f"web-7d4b9c6f5-{i:06d}"
            host = names[i % len(names)]
        pods.append(PodSpec(template, name, namespace, f"00000000-0000-4000-8000-{i:012d}",
                            host, f"10.{100 + i // 65536}.{i // 256 % 256}.{i % 256}", cluster,
                            (i * 7919) % (30 * 86400)))
    return Cluster(nodes, rayclusters, pods, templates, names)


class ClusterDouble:
    """The API-server double (``testkit.apiserver``) holding ``cluster``, started, with the
    bearer token ``token``; ``flip`` changes one pod after the other."""

    def __init__(self, cluster: Cluster, token: str = TOKEN) -> None:
        from testkit.apiserver import CORE, CRDS, ApiServerDouble

        self.cluster = cluster
        self.nodes, self.pods = CORE[:2]
        self.rayclusters = CRDS[0]
        self.double = ApiServerDouble(token)
        self.double.install(self.rayclusters)
        self.double.install(CRDS[1])  # PodGroups: served, none exist
        self.double.load_raw(self.nodes, ((("", name), body) for name, body in cluster.nodes))
        self.double.load_raw(self.rayclusters, ((("ray", name), body)
                                                for name, body in cluster.rayclusters))
        self.pod_json_bytes = 0
        self.double.load_raw(self.pods, self._pod_items())
        self.double.start()
        self.ready = [True] * len(cluster.pods)
        self.cursor = 0

    def _pod_items(self) -> Any:
        for pod in self.cluster.pods:
            body = self.cluster.render(pod)
            self.pod_json_bytes += len(body)
            yield (pod.namespace, pod.name), body

    @property
    def port(self) -> int:
        port: int = self.double.port
        return port

    def flip(self) -> None:
        """The next pod (a stride over them) turns not ready, or ready again, as a probe
        failing then passing does."""
        index = (self.cursor * STRIDE) % len(self.cluster.pods)
        self.cursor += 1
        self.ready[index] = not self.ready[index]
        pod = self.cluster.pods[index]
        self.double.write_raw(self.pods, "MODIFIED", (pod.namespace, pod.name),
                              self.cluster.render(pod, self.ready[index]))
