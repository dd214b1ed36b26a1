"""The live cache at scale: 5,000 nodes and 150,000 pods, listed then watched.

Three processes, on loopback only:

* the API-server double (``testkit/apiserver.py``) holding the cluster as JSON shaped as
  ``kubectl get -o json`` prints it: EKS-like nodes (15% GPU), 300 RayClusters of 100
  pods each (a head, 4 ``baseline`` and 95 ``overflow`` workers; ``bench.payloads``'s
  ~7 KB KubeRay worker pods) and web Deployment pods (~4 KB) for the rest;
* raygate: the list/watch source, the cache and the HTTP server, as ``raygate serve``
  runs them, with a timer on each batch the cache writer applies;
* this driver: it starts both, asks for filter and prioritize over every node name
  (the pending ``baseline`` worker of a RayCluster), then has the double stream pod
  updates at a fixed rate while it asks again.

Reported: time from the source's start to a ready cache (every kind listed), resident
memory then (and its peak), the writer's cost per event under the stream (amortised over
its batches, p50/p99), decode + convert per watch event (measured apart), and filter /
prioritize latency with and without the stream. At the end the cache must hold the
double's last version of every pod, or the run fails.

Run::

    .venv/bin/python -m bench.cache_sync                      # 5,000 nodes, 150,000 pods
    .venv/bin/python -m bench.cache_sync --fast               # 500 nodes, 15,000 pods
    .venv/bin/python -m bench.cache_sync --nodes 2000 --pods 60000 --rate 500 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgspec

from bench.payloads import FLOOR_GROUP, OVERFLOW_GROUP, node, node_names, ray_worker_pod, raycluster

__all__ = ["Result", "main"]

HOST = "127.0.0.1"
TOKEN = "raygate-bench-token"
PODS_PER_RAYCLUSTER = 100
RAY_FRACTION = 0.2
"""Of all pods, those that belong to RayClusters; the rest are web Deployment pods."""
GPU_EVERY = 7  # one node in 7 is a GPU node (~15%)
READY_TIMEOUT_S = 600.0
LONE_EVENTS = 30
"""Pod updates sent 100 ms apart before the stream: the cost of an event applied alone."""

Obj = dict[str, Any]


# --- the cluster as JSON ----------------------------------------------------------------


def _web_pod_template() -> bytes:
    """A web Deployment's pod with an Envoy sidecar, as the API server prints it; the
    ``__X__`` strings are filled per pod."""
    env = [{"name": k, "value": v} for k, v in (
        ("LOG_LEVEL", "info"), ("PORT", "8080"), ("OTEL_EXPORTER_OTLP_ENDPOINT",
                                                  "http://otel-collector.observability:4317"),
        ("DB_HOST", "postgres.__NS__.svc.cluster.local"), ("FEATURE_FLAGS", "search,checkout"))]
    probe = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
             "failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1,
             "timeoutSeconds": 1}
    container_status = {
        "containerID": "containerd://__UID__", "image": "registry.example.com/web:1.42.0",
        "imageID": "registry.example.com/web@sha256:"
                   "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978",
        "lastState": {}, "name": "web", "ready": True, "restartCount": 0, "started": True,
        "state": {"running": {"startedAt": "__T1__"}},
    }
    pod: Obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T07:59:00Z",
                            "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "creationTimestamp": "__T0__",
            "generateName": "web-7d4b9c6f5-",
            "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/part-of": "shop",
                       "pod-template-hash": "7d4b9c6f5", "tier": "frontend"},
            "name": "__NAME__", "namespace": "__NS__",
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": True,
                                 "controller": True, "kind": "ReplicaSet",
                                 "name": "web-7d4b9c6f5", "uid": "__UID__-rs"}],
            "resourceVersion": "__RV__", "uid": "__UID__",
        },
        "spec": {
            "containers": [
                {"name": "web", "image": "registry.example.com/web:1.42.0",
                 "imagePullPolicy": "IfNotPresent", "env": env,
                 "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                 "livenessProbe": probe, "readinessProbe": probe,
                 "resources": {"limits": {"memory": "1Gi"},
                               "requests": {"cpu": "500m", "memory": "1Gi"}},
                 "terminationMessagePath": "/dev/termination-log",
                 "terminationMessagePolicy": "File",
                 "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                   "name": "kube-api-access", "readOnly": True}]},
                {"name": "envoy", "image": "envoyproxy/envoy:v1.31.2",
                 "args": ["--config-path", "/etc/envoy/envoy.yaml", "--log-level", "warn"],
                 "resources": {"limits": {"memory": "256Mi"},
                               "requests": {"cpu": "100m", "memory": "128Mi"}},
                 "volumeMounts": [{"mountPath": "/etc/envoy", "name": "envoy-config"}]},
            ],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "nodeName": "__NODE__",
            "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
            "restartPolicy": "Always", "schedulerName": "default-scheduler",
            "serviceAccountName": "web", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready",
                             "operator": "Exists", "tolerationSeconds": 300},
                            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable",
                             "operator": "Exists", "tolerationSeconds": 300}],
            "volumes": [{"name": "envoy-config",
                         "configMap": {"name": "envoy", "defaultMode": 420}},
                        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt",
                                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
        },
        "status": {
            "conditions": [
                {"lastProbeTime": None, "lastTransitionTime": "__T1__",
                 "status": "True", "type": kind}
                for kind in ("PodReadyToStartContainers", "Initialized")
            ] + [
                {"lastProbeTime": None, "lastTransitionTime": "__T2__",
                 "status": "__READY__", "type": kind} for kind in ("Ready", "ContainersReady")
            ] + [{"lastProbeTime": None, "lastTransitionTime": "__T0__",
                  "status": "True", "type": "PodScheduled"}],
            "containerStatuses": [container_status, {**container_status, "name": "envoy",
                                                     "image": "envoyproxy/envoy:v1.31.2"}],
            "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "phase": "Running",
            "podIP": "__IP__", "podIPs": [{"ip": "__IP__"}], "qosClass": "Burstable",
            "startTime": "__T0__",
        },
    }
    return msgspec.json.encode(pod)


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


# --- process 1: the API-server double ---------------------------------------------------


def _double_main(conn: Connection, n_nodes: int, n_pods: int) -> None:
    from testkit.apiserver import CORE, CRDS, ApiServerDouble

    started = time.perf_counter()
    cluster = build_cluster(n_nodes, n_pods)
    nodes, pods_collection = CORE[:2]
    rayclusters = CRDS[0]
    double = ApiServerDouble(TOKEN)
    double.install(rayclusters)
    double.install(CRDS[1])  # PodGroups: served, none exist
    double.load_raw(nodes, ((("", name), body) for name, body in cluster.nodes))
    double.load_raw(rayclusters, ((("ray", name), body) for name, body in cluster.rayclusters))
    pod_bytes = 0

    def pod_items() -> Any:
        nonlocal pod_bytes
        for pod in cluster.pods:
            body = cluster.render(pod)
            pod_bytes += len(body)
            yield (pod.namespace, pod.name), body

    double.load_raw(pods_collection, pod_items())
    double.start()
    conn.send({"port": double.port, "generate_s": time.perf_counter() - started,
               "pod_json_bytes": pod_bytes, "pods": len(cluster.pods)})
    ready = [True] * len(cluster.pods)
    cursor = 0
    while True:
        command = conn.recv()
        if command[0] == "stream":
            _, count, rate = command
            t0 = time.perf_counter()
            for k in range(count):
                # Walk the pods with a stride, so consecutive updates hit other nodes and
                # RayClusters; each flips readiness, as a probe failing then passing does.
                index = (cursor * 7919) % len(cluster.pods)
                cursor += 1
                ready[index] = not ready[index]
                pod = cluster.pods[index]
                double.write_raw(pods_collection, "MODIFIED", (pod.namespace, pod.name),
                                 cluster.render(pod, ready[index]))
                ahead = t0 + (k + 1) / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            conn.send({"events": count, "seconds": time.perf_counter() - t0,
                       "resource_version": str(double.resource_version)})
        elif command[0] == "stop":
            double.stop()
            conn.send("stopped")
            return


# --- process 2: raygate -----------------------------------------------------------------


def _rss_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, in KiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def _raygate_main(conn: Connection, kubeconfig: str, admission: bool,
                  publish_interval: float | None) -> None:
    import uvloop

    from raygate.plugin.config import PolicyConfig
    from raygate.server.app import build_server
    from raygate.server.cache.cluster import ClusterCache
    from raygate.server.kube.client import KubeTransport, load_connection
    from raygate.server.kube.source import LiveSource
    from raygate.server.kube.transport import WatchSettings
    from raygate.server.listeners import bind_socket

    logging.basicConfig(level=logging.WARNING, format="raygate: %(message)s")
    logging.getLogger("raygate.kube").setLevel(logging.INFO)
    batches: list[tuple[int, float]] = []
    cache = ClusterCache(PolicyConfig(), "bench")
    def on_batch(changes: int, seconds: float) -> None:
        batches.append((changes, seconds))
        if seconds > 0.5:
            logging.getLogger("raygate.kube").info("applied %d changes in %.2fs (CPU)",
                                                   changes, seconds)

    settings = WatchSettings() if publish_interval is None else WatchSettings(
        publish_interval=publish_interval)
    source = LiveSource(cache, KubeTransport(load_connection(kubeconfig, None, {}), settings),
                        settings, on_batch=on_batch)
    server = build_server(cache, bind_socket(HOST, 0), f"{HOST}:0")
    loop = uvloop.new_event_loop()

    def control() -> None:
        started = time.perf_counter()
        source.start()
        while not cache.ready:
            time.sleep(0.01)
        ready_s = time.perf_counter() - started
        if not admission:
            loop.call_soon_threadsafe(server.services.admission.close)
        rss, hwm = _rss_kib()
        conn.send({"ready_s": ready_s, "rss_kib": rss, "hwm_kib": hwm,
                   "http_port": server.http_port, "counts": cache.snapshot.counts(),
                   "batches": len(batches)})
        pods = next(w for w in source.watchers if w.kind == "Pod")
        while True:
            command = conn.recv()
            if command[0] == "reset":
                batches.clear()
                conn.send("ok")
            elif command[0] == "batches":
                conn.send(list(batches))
            elif command[0] == "version":
                conn.send({"pods": pods.resource_version, "rss_kib": _rss_kib()[0],
                           "counts": cache.snapshot.counts(),
                           "applied": sum(n for n, _ in batches)})
            elif command[0] == "stop":
                source.stop()
                loop.call_soon_threadsafe(server.stop)
                conn.send("stopped")
                return

    threading.Thread(target=control, daemon=True).start()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(server.run())


# --- process 3: the driver --------------------------------------------------------------


@dataclass
class Latency:
    requests: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    mean_ms: float = 0.0

    @classmethod
    def of(cls, samples: list[float]) -> Latency:
        if not samples:
            return cls()
        ordered = sorted(samples)
        return cls(len(ordered), ordered[len(ordered) // 2] * 1e3,
                   ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
                   statistics.fmean(ordered) * 1e3)


@dataclass
class Result:
    nodes: int
    pods: int
    pod_json_bytes: int
    ready_s: float
    rss_mib: float
    peak_rss_mib: float
    events: int
    rate_per_s: int
    batches: int
    apply_us_per_event_p50: float
    apply_us_per_event_p99: float
    apply_us_per_event_mean: float
    single_event_batches_us_p50: float
    decode_convert_us_per_event: float
    filter_quiet: Latency = field(default_factory=Latency)
    filter_streaming: Latency = field(default_factory=Latency)
    prioritize_quiet: Latency = field(default_factory=Latency)
    prioritize_streaming: Latency = field(default_factory=Latency)
    rss_after_stream_mib: float = 0.0
    pace_per_s: float = 0.0
    admission_service: bool = True
    machine: str = ""


def _request_body(cluster_nodes: list[str]) -> bytes:
    pod = ray_worker_pod(FLOOR_GROUP, index=99999)
    pod = json.loads(json.dumps(pod).replace("bench", raycluster_name(0)))
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": cluster_nodes},
                      separators=(",", ":")).encode()


def _measure(port: int, body: bytes, until: Callable[[], bool], *, at_least: int,
             at_most: int, pace: float) -> tuple[list[float], list[float]]:
    """A filter then a prioritize, as kube-scheduler asks for one pod, ``pace`` pods a
    second on one keep-alive connection (0: back to back); (filter, prioritize) latencies
    in seconds."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    headers = {"Content-Type": "application/json"}
    filters: list[float] = []
    prioritizes: list[float] = []
    started = time.perf_counter()
    for i in range(at_most):
        if i >= at_least and until():
            break
        if pace:
            ahead = started + i / pace - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        for verb, out in (("filter", filters), ("prioritize", prioritizes)):
            t0 = time.perf_counter()
            conn.request("POST", f"/scheduler/{verb}", body, headers)
            reply = conn.getresponse()
            data = reply.read()
            out.append(time.perf_counter() - t0)
            if reply.status != 200 or not data:
                raise RuntimeError(f"{verb}: HTTP {reply.status}: {data[:200]!r}")
    conn.close()
    return filters, prioritizes


def _decode_convert_cost(cluster: Cluster, samples: int = 3000) -> float:
    """Microseconds to decode one pod watch event and build its view (the watcher's share
    of an event, done before the writer sees it)."""
    from raygate.plugin.quantity import parse_milli
    from raygate.server.cache import convert
    from raygate.server.kube.decode import Decoders, decode_line
    from raygate.server.wire import kube

    decoders = Decoders(kube.Pod)
    lines = [b'{"type":"MODIFIED","object":%s}' % cluster.render(cluster.pods[i * 37 % len(
        cluster.pods)]).replace(b"__RV__", b"1") for i in range(samples)]
    parse_milli.cache_clear()
    t0 = time.perf_counter()
    for line in lines:
        convert.pod_view(decode_line(line, decoders).obj)
    return (time.perf_counter() - t0) / samples * 1e6


def run(n_nodes: int, n_pods: int, events: int, rate: int, quiet_requests: int, *,
        pace: float = 100.0, admission: bool = True,
        publish_interval: float | None = None) -> Result:
    ctx = multiprocessing.get_context("spawn")
    double_conn, double_end = ctx.Pipe()
    double = ctx.Process(target=_double_main, args=(double_end, n_nodes, n_pods),
                         name="apiserver-double", daemon=True)
    double.start()
    info = double_conn.recv()
    print(f"double: {info['pods']} pods, {info['pod_json_bytes'] / 2**20:.0f} MiB of pod JSON "
          f"(avg {info['pod_json_bytes'] / info['pods'] / 1024:.1f} KiB), built in "
          f"{info['generate_s']:.1f}s", flush=True)
    from testkit.apiserver import kubeconfig_text

    workdir = Path(tempfile.mkdtemp(prefix="raygate-cache-bench-"))
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(f"http://{HOST}:{info['port']}", TOKEN))
    raygate_conn, raygate_end = ctx.Pipe()
    raygate = ctx.Process(target=_raygate_main,
                          args=(raygate_end, str(kubeconfig), admission, publish_interval),
                          name="raygate", daemon=True)
    raygate.start()
    try:
        if not raygate_conn.poll(READY_TIMEOUT_S):
            raise RuntimeError("raygate did not become ready")
        ready = raygate_conn.recv()
        print(f"raygate: ready in {ready['ready_s']:.2f}s, {ready['counts']}, "
              f"RSS {ready['rss_kib'] / 1024:.0f} MiB (peak {ready['hwm_kib'] / 1024:.0f})",
              flush=True)
        if ready["counts"]["pods"] != n_pods or ready["counts"]["nodes"] != n_nodes:
            raise RuntimeError(f"cache holds {ready['counts']}, not the cluster")
        cluster = build_cluster(n_nodes, n_pods)
        body = _request_body(cluster.node_names)
        port = ready["http_port"]
        _measure(port, body, lambda: True, at_least=50, at_most=50, pace=0)  # warm up
        quiet_f, quiet_p = _measure(port, body, lambda: True, at_least=quiet_requests,
                                    at_most=quiet_requests, pace=pace)
        raygate_conn.send(("reset",))
        raygate_conn.recv()
        # A trickle first: events far enough apart that each is published alone.
        double_conn.send(("stream", LONE_EVENTS, 10))
        double_conn.recv()
        double_conn.send(("stream", events, rate))
        stream_f, stream_p = _measure(port, body, double_conn.poll, at_least=10,
                                      at_most=10**7, pace=pace)
        streamed = double_conn.recv()
        deadline = time.monotonic() + 60
        while True:  # the cache must catch up with the double's last version
            raygate_conn.send(("version",))
            version = raygate_conn.recv()
            if (version["pods"] == streamed["resource_version"]
                    and version["applied"] >= streamed["events"] + LONE_EVENTS):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"cache at {version['pods']}, API server at "
                                   f"{streamed['resource_version']}")
            time.sleep(0.05)
        raygate_conn.send(("batches",))
        batches: list[tuple[int, float]] = raygate_conn.recv()
        decode_us = _decode_convert_cost(cluster)
    finally:
        for conn, process in ((raygate_conn, raygate), (double_conn, double)):
            if process.is_alive():
                conn.send(("stop",))
                if conn.poll(30):
                    conn.recv()
            process.join(10)
            if process.is_alive():
                process.kill()
    per_event = sorted(s / n * 1e6 for n, s in batches if n)
    singles = sorted(s * 1e6 for n, s in batches if n == 1)
    applied = sum(n for n, _ in batches)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(len(values) * q))] if values else 0.0

    return Result(
        nodes=n_nodes, pods=n_pods, pod_json_bytes=info["pod_json_bytes"],
        ready_s=ready["ready_s"], rss_mib=ready["rss_kib"] / 1024,
        peak_rss_mib=ready["hwm_kib"] / 1024, events=applied, rate_per_s=rate,
        batches=len(batches),
        apply_us_per_event_p50=pct(per_event, 0.5), apply_us_per_event_p99=pct(per_event, 0.99),
        apply_us_per_event_mean=(sum(s for _, s in batches) / applied * 1e6) if applied else 0,
        single_event_batches_us_p50=pct(singles, 0.5),
        decode_convert_us_per_event=decode_us,
        filter_quiet=Latency.of(quiet_f), filter_streaming=Latency.of(stream_f),
        prioritize_quiet=Latency.of(quiet_p), prioritize_streaming=Latency.of(stream_p),
        rss_after_stream_mib=version["rss_kib"] / 1024, admission_service=admission,
        pace_per_s=pace,
        machine=f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
    )


def report(result: Result) -> str:
    r = result
    lines = [
        f"cluster          {r.nodes} nodes, {r.pods} pods "
        f"({r.pod_json_bytes / 2**20:.0f} MiB of pod JSON, "
        f"{r.pod_json_bytes / r.pods / 1024:.1f} KiB each)",
        f"time to ready    {r.ready_s:.2f} s   (LIST of every kind in pages of 500, decoded, "
        "indexed)",
        f"resident memory  {r.rss_mib:.0f} MiB after sync (peak {r.peak_rss_mib:.0f} MiB; "
        f"{r.rss_after_stream_mib:.0f} MiB after the stream)",
        f"event stream     {r.events} pod updates at {r.rate_per_s}/s, applied in "
        f"{r.batches} batches; admission-status service "
        f"{'attached' if r.admission_service else 'detached'}",
        f"apply per event  p50 {r.apply_us_per_event_p50:.1f} us, p99 "
        f"{r.apply_us_per_event_p99:.1f} us, mean {r.apply_us_per_event_mean:.1f} us "
        "(writer's CPU time per batch / its events"
        + (f"; a lone event: {r.single_event_batches_us_p50:.1f} us)"
           if r.single_event_batches_us_p50 else ")"),
        f"decode+convert   {r.decode_convert_us_per_event:.1f} us per pod event "
        "(watcher thread, before the writer)",
        f"latency (ms)     quiet p50 / p99        while streaming p50 / p99   "
        f"({r.pace_per_s:.0f} pods/s: a filter then a prioritize each)",
    ]
    for name, quiet, busy in (("filter", r.filter_quiet, r.filter_streaming),
                              ("prioritize", r.prioritize_quiet, r.prioritize_streaming)):
        lines.append(f"  {name:<14} {quiet.p50_ms:6.2f} / {quiet.p99_ms:6.2f}        "
                     f"{busy.p50_ms:6.2f} / {busy.p99_ms:6.2f}   "
                     f"({quiet.requests} / {busy.requests} requests, {r.nodes} node names)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_sync", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--fast", action="store_true",
                        help="CI smoke size: 500 nodes, 15,000 pods, a short stream")
    parser.add_argument("--events", type=int, default=None,
                        help="pod updates to stream (default: 10 s at --rate)")
    parser.add_argument("--rate", type=int, default=1000, help="pod updates per second")
    parser.add_argument("--requests", type=int, default=1000,
                        help="filter+prioritize pairs measured without the stream")
    parser.add_argument("--pace", type=float, default=100.0,
                        help="filter+prioritize pairs per second, as kube-scheduler asks for "
                             "pods (0: back to back, which keeps a core busy on this side)")
    parser.add_argument("--no-admission", action="store_true",
                        help="detach the admission-status service once synced (it rebuilds "
                             "statuses on the server's event loop after every publish)")
    parser.add_argument("--publish-interval", type=float, default=None, metavar="SECONDS",
                        help="the cache's shortest time between publishes "
                             "(default: WatchSettings.publish_interval)")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = parser.parse_args(argv)
    if args.fast:
        args.nodes, args.pods = 500, 15_000
        args.requests = min(args.requests, 300)
    events = args.events if args.events is not None else args.rate * (2 if args.fast else 10)
    result = run(args.nodes, args.pods, events, args.rate, args.requests, pace=args.pace,
                 admission=not args.no_admission, publish_interval=args.publish_interval)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
