"""The live cache at scale on the real kube-apiserver: 5,000 nodes and 150,000 pods.

``bench/cache_sync.py`` measures raygate's cache against the API-server double of
``testkit/apiserver.py``; this measures it against the testbed's own etcd and
kube-apiserver (``testbed.cluster.Testbed(control_plane_only=True)``: the versions of
``testbed/modules``, the CRDs of KubeRay, Volcano and Kueue installed, nothing else
running — no scheduler, no controllers, no kubelet or kwok to change a pod meanwhile).

1. **Load** (not measured, only its rate printed): the cluster of ``bench.cache_sync``
   created through the API by concurrent requests over the admin client certificate —
   nodes of ``bench.payloads.node`` (15 % GPU), 300 RayClusters with a Volcano PodGroup
   each (named as KubeRay names them; no pod refers to it, as in ``bench.cache_sync``),
   and the pods, bound at create (``spec.nodeName``), their status (Running, Ready)
   written by a second request as a kubelet would: the API server drops the status a
   create carries. 20 % are KubeRay workers (~7 KB), the rest ~4 KB web pods, in 41
   namespaces whose ServiceAccounts are created first (admission requires them).
2. **Start**: ``python -m raygate serve --kubeconfig=<admin>`` with the settings of
   ``deploy/base/configmap.yaml`` (authz off: nothing here reviews tokens), a process
   of its own. Measured: seconds from the process's start to ``/readyz`` 200 (every kind
   listed: the cache is published) and to the ``cache synced`` log line; resident memory
   (psutil) then, and its peak (``VmHWM``) then and at the end.
3. **Changes**: 1,000 distinct RayCluster worker pods, 20 a second, each turned not Ready
   by a status patch (``Ready``/``ContainersReady`` False) as a failing probe does. A
   pod that is not ready enters its RayCluster's admission status (``raygate.plugin.
   admission``: every pod not running), which raygate's admission-status API serves with
   an ETag and a long-poll (``GET /v1/namespaces/ray/rayclusters/<rc>/admission?
   waitForChange=<etag>``): the long-poll answers as soon as a snapshot holding the
   change is published and the status derived from it, without polling. Timed: from
   just before the PATCH is sent to the long-poll's reply listing the pod — the API
   server's write, its watch fan-out, raygate's decode, apply, publish and one
   RayCluster's derivation, and a loopback round trip; the PATCH's own round trip is
   reported beside it. At 20 a second a change usually waits for the cache's next
   publish slot (``WatchSettings.publish_interval``, 50 ms); 100 more changes, 250 ms
   apart, show a change published alone.
4. **The initial LIST, taken apart** (``list_alone``), with raygate stopped: raygate's
   LIST of nodes and pods again, page after page, timing kube-apiserver's pages and
   raygate's own decode and convert of them apart (in raygate they overlap), and each
   page again as protobuf: which side of the connection the time to ready is spent on.

Checks (the run fails on these, never on slowness): raygate's ``/readyz`` counts the
objects loaded, every changed pod is in its cluster's admission status, raygate logged
no error and exits cleanly, no component crashed.

Run::

    .venv/bin/python -m bench.cache_scale              # 5,000 nodes, 150,000 pods
    .venv/bin/python -m bench.cache_scale --fast       # 500 nodes, 5,000 pods, 200 changes
                                                       # (2-3 min)
    .venv/bin/python -m bench.cache_scale --nodes 2000 --pods 60000 --json out.json

The testbed's binaries must be built (``python -m testbed build``; cached).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgspec
import psutil
import yaml

from bench.cache_sync import PODS_PER_RAYCLUSTER, Cluster, PodSpec, build_cluster
from raygate.server.kube.decode import Decoders, decode_page, next_continue
from raygate.server.kube.resources import RESOURCES
from raygate.server.kube.transport import WatchSettings
from testbed.cluster import DEPLOY, REPO, Testbed, TestbedError
from testbed.processes import StartError, free_port

__all__ = ["Result", "main", "run"]

Obj = dict[str, Any]
T = TypeVar("T")

HOST = "127.0.0.1"
LOAD_WORKERS = 16
"""Concurrent requests while loading: enough to keep kube-apiserver and etcd busy on two
cores (this side spends ~0.6 ms of CPU per request; kube-apiserver 3-6 ms, most of it
decoding, validating and tracking managed fields of a 5-14 KB pod)."""
ETCD_QUOTA_BYTES = 8 * 2**30
"""etcd's default quota (2 GiB) holds 150,000 pods, but each pod is written twice (create,
status) and the history stays until the next compaction (the testbed compacts every
minute, and compaction frees pages without shrinking the file): 8 GiB, etcd's suggested
maximum, rules out a run that fails with "mvcc: database space exceeded"."""
READY_TIMEOUT_S = 600.0
CHANGE_TIMEOUT_S = 30.0
LONE_CHANGES = 100
LONE_RATE = 4.0
"""Changes a second in the second series: 250 ms apart, five publish intervals."""
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp")
"""Metadata the API server sets itself; a create must not carry it."""


# --- requests to kube-apiserver ---------------------------------------------------------


class ApiError(Exception):
    pass


class ApiPool:
    """One keep-alive HTTPS connection per thread to kube-apiserver, as the admin."""

    RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        url = urlsplit(server)
        self.host, self.port = url.hostname or HOST, url.port or 443
        self.context = context
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                               timeout=60)
            self.local.conn = conn
        return conn

    def call(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json", ok: Iterable[int] = (), *,
             accept: str = "application/json") -> bytes:
        """The reply's body of a 2xx (or an ``ok``) status; retries what a busy server
        or a dropped connection fails."""
        headers = {"Content-Type": content_type, "Accept": accept}
        for attempt in range(8):
            conn = self._connection()
            try:
                conn.request(method, path, body, headers)
                reply = conn.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self.local.conn = None
                if attempt == 7:
                    raise ApiError(f"{method} {path}: {exc}") from None
                time.sleep(0.1 * 2 ** attempt)
                continue
            if 200 <= reply.status < 300 or reply.status in ok:
                return data
            if reply.status in self.RETRY_STATUSES and attempt < 7:
                time.sleep(0.1 * 2 ** attempt)
                continue
            raise ApiError(f"{method} {path}: {reply.status}: {data[:300]!r}")
        raise AssertionError("unreachable")

    def create(self, collection: str, obj: Obj) -> Obj:
        """POST ``obj``; an object that exists already (a retried create) is read back.
        Without field validation (``fieldValidation=Ignore``, not the default Warn, which
        decodes every body a second time, strictly): the bodies are known good."""
        data = self.call("POST", f"{collection}?fieldValidation=Ignore",
                         msgspec.json.encode(obj), ok=(409,))
        created: Obj = msgspec.json.decode(data)
        if created.get("kind") == "Status":
            created = msgspec.json.decode(self.call(
                "GET", f"{collection}/{obj['metadata']['name']}"))
        return created

    def put_status(self, path: str, obj: Obj, status: Obj) -> None:
        """Write ``status`` into ``obj`` as the API server returned it (a PUT of the status
        subresource: cheaper for the server than a patch, which it applies to the stored
        object's JSON)."""
        body = msgspec.json.encode({**obj, "status": status})
        self.call("PUT", f"{path}/status?fieldValidation=Ignore", body)


def concurrently(items: Iterable[T], work: Callable[[T], None], workers: int,
                 what: str) -> tuple[int, float]:
    """``work(item)`` for every item on ``workers`` threads; (items, seconds). The first
    failure cancels what has not started and is raised."""
    started = last_report = time.perf_counter()
    done = 0
    with ThreadPoolExecutor(workers, thread_name_prefix="load") as pool:
        try:
            for _ in pool.map(work, items):
                done += 1
                now = time.perf_counter()
                if now - last_report >= 15:
                    last_report = now
                    print(f"  {what}: {done:,} in {now - started:.0f}s "
                          f"({done / (now - started):,.0f}/s)", flush=True)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return done, time.perf_counter() - started


# --- the cluster, through the API -------------------------------------------------------


def _creatable(body: bytes) -> Obj:
    obj: Obj = msgspec.json.decode(body.replace(b'"__RV__"', b'"0"'))
    for key in SERVER_SET:
        obj["metadata"].pop(key, None)
    return obj


def podgroup(cluster: str, owner_uid: str) -> Obj:
    """The PodGroup KubeRay's Volcano integration creates for a RayCluster: the head and
    the four ``baseline`` workers (its floor) as the gang."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": f"ray-{cluster}-pg", "namespace": "ray",
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                          "name": cluster, "uid": owner_uid,
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"minMember": 5, "queue": "default",
                 "minResources": {"cpu": "36", "memory": "144Gi"}},
    }


@dataclass
class Loaded:
    nodes: int = 0
    pods: int = 0
    rayclusters: int = 0
    podgroups: int = 0
    pod_json_bytes: int = 0
    seconds: float = 0.0
    requests: int = 0


def load(api: ApiPool, cluster: Cluster, workers: int) -> Loaded:
    loaded = Loaded()
    started = time.perf_counter()
    namespaces = sorted({p.namespace for p in cluster.pods} | {"ray"})
    for ns in namespaces:
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": ns}})
    # Admission requires a pod's ServiceAccount: one pod of each template, namespace and
    # RayCluster names them all.
    samples = {(p.template, p.namespace, p.cluster): p for p in cluster.pods}.values()
    accounts = {(p.namespace, _creatable(cluster.render(p))["spec"]["serviceAccountName"])
                for p in samples}
    for ns, account in sorted(accounts):
        api.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                   {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": ns}})
    requests = len(namespaces) + len(accounts)

    owners: dict[str, str] = {}

    def add_raycluster(item: tuple[str, bytes]) -> None:
        name, body = item
        obj = _creatable(body)
        obj.pop("status", None)
        created = api.create("/apis/ray.io/v1/namespaces/ray/rayclusters", obj)
        owners[name] = created["metadata"]["uid"]
        api.create("/apis/scheduling.volcano.sh/v1beta1/namespaces/ray/podgroups",
                   podgroup(name, owners[name]))

    loaded.rayclusters, _ = concurrently(cluster.rayclusters, add_raycluster, workers,
                                         "RayClusters")
    loaded.podgroups = loaded.rayclusters
    requests += 2 * loaded.rayclusters

    def add_node(item: tuple[str, bytes]) -> None:
        name, body = item
        obj = _creatable(body)
        status = obj.pop("status")
        api.put_status(f"/api/v1/nodes/{name}", api.create("/api/v1/nodes", obj), status)

    loaded.nodes, seconds = concurrently(cluster.nodes, add_node, workers, "nodes")
    print(f"load: {loaded.nodes:,} nodes in {seconds:.1f}s "
          f"({2 * loaded.nodes / seconds:,.0f} requests/s)", flush=True)
    requests += 2 * loaded.nodes
    sizes: list[int] = []

    def add_pod(spec: PodSpec) -> None:
        body = cluster.render(spec)
        sizes.append(len(body))
        obj = _creatable(body)
        status = obj.pop("status")
        meta = obj["metadata"]
        if spec.cluster:
            meta["ownerReferences"][0]["uid"] = owners[spec.cluster]
        collection = f"/api/v1/namespaces/{spec.namespace}/pods"
        api.put_status(f"{collection}/{spec.name}", api.create(collection, obj), status)

    loaded.pods, seconds = concurrently(cluster.pods, add_pod, workers, "pods")
    loaded.pod_json_bytes = sum(sizes)
    requests += 2 * loaded.pods
    print(f"load: {loaded.pods:,} pods in {seconds:.1f}s ({2 * loaded.pods / seconds:,.0f} "
          f"requests/s: a create and a status write each)", flush=True)
    loaded.seconds = time.perf_counter() - started
    loaded.requests = requests
    return loaded


# --- raygate, in a process of its own ---------------------------------------------------


def _vm_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


class Raygate:
    """``raygate serve`` following the testbed, its output read line by line."""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        configmap = yaml.safe_load((DEPLOY / "base" / "configmap.yaml").read_text())
        config = workdir / "raygate.yaml"
        config.write_text(configmap["data"]["raygate.yaml"])
        self.http_port = free_port()
        self.argv = [
            sys.executable, "-m", "raygate", "serve", f"--kubeconfig={kubeconfig}",
            f"--config={config}", f"--http-addr={HOST}:{self.http_port}",
            f"--grpc-addr={HOST}:{free_port()}", "--authz=off", "--log-format=text",
            "--shutdown-delay-seconds=0",
        ]
        self.log = workdir / "raygate.log"
        self.lines: list[tuple[float, str]] = []
        self.started = 0.0
        self.synced_at: float | None = None
        self.peak_sampled_kib = 0
        self._stop = threading.Event()
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
        threading.Thread(target=self._read, name="raygate-log", daemon=True).start()
        threading.Thread(target=self._sample, name="raygate-rss", daemon=True).start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with self.log.open("w") as out:
            for line in self.process.stdout:
                now = time.monotonic()
                self.lines.append((now, line))
                out.write(line)
                if self.synced_at is None and "cache synced" in line:
                    self.synced_at = now

    def _sample(self) -> None:
        assert self.process is not None
        process = psutil.Process(self.process.pid)
        while not self._stop.wait(0.05):
            try:
                rss = process.memory_info().rss // 1024
            except psutil.Error:
                return
            self.peak_sampled_kib = max(self.peak_sampled_kib, rss)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def memory_kib(self) -> tuple[int, int]:
        assert self.process is not None
        return _vm_kib(self.process.pid)

    def get(self, path: str, conn: http.client.HTTPConnection | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        own = conn is None
        conn = conn or http.client.HTTPConnection(HOST, self.http_port, timeout=60)
        try:
            conn.request("GET", path, headers=headers or {})
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        finally:
            if own:
                conn.close()

    def wait_ready(self, timeout: float) -> float:
        """Seconds from the process's start to ``/readyz`` 200."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"raygate exited with {self.process and self.process.poll()}"
                                   f":\n{self.tail()}")
            try:
                status, _, _ = self.get("/readyz")
            except OSError:
                status = 0
            if status == 200:
                return time.monotonic() - self.started
            time.sleep(0.02)
        raise RuntimeError(f"raygate not ready after {timeout:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "".join(line for _, line in self.lines[-lines:])

    def problems(self) -> list[str]:
        return [line.rstrip() for _, line in self.lines
                if re.search(r"\b(ERROR|CRITICAL|Traceback)\b", line)]

    def stop(self) -> int | None:
        self._stop.set()
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


# --- the changes ------------------------------------------------------------------------


def changed_pods(cluster: Cluster, count: int) -> list[PodSpec]:
    """``count`` distinct running ``overflow`` workers, consecutive ones in other
    RayClusters (round robin over the clusters)."""
    clusters = len(cluster.rayclusters)
    overflow_slots = PODS_PER_RAYCLUSTER - 5
    if count > clusters * overflow_slots:
        raise ValueError(f"{count} changes: only {clusters * overflow_slots} overflow workers")
    return [cluster.pods[(k % clusters) * PODS_PER_RAYCLUSTER + 5 + k // clusters]
            for k in range(count)]


def not_ready(now: str) -> Obj:
    conditions = [{"type": kind, "status": "False", "lastTransitionTime": now,
                   "reason": "ContainersNotReady",
                   "message": "containers with unready status: [ray-worker]"}
                  for kind in ("Ready", "ContainersReady")]
    return {"status": {"conditions": conditions}}


@dataclass
class Changes:
    seconds_to_admission: list[float] = field(default_factory=list)
    patch_round_trip: list[float] = field(default_factory=list)
    woken_by_other: int = 0
    """Long-polls that answered with a status lacking the change (time alone changed the
    status) and were asked again."""


def apply_changes(api: ApiPool, raygate: Raygate, pods: list[PodSpec], rate: float) -> Changes:
    result = Changes()
    conn = http.client.HTTPConnection(HOST, raygate.http_port, timeout=60)
    patch_path = "/api/v1/namespaces/ray/pods/{}/status"
    started = time.perf_counter()
    for k, pod in enumerate(pods):
        status_path = f"/v1/namespaces/ray/rayclusters/{pod.cluster}/admission"
        code, headers, body = raygate.get(status_path, conn)
        if code != 200:
            raise RuntimeError(f"GET {status_path}: {code}: {body[:200]!r}")
        version = headers["etag"].strip('"')
        ahead = started + k / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        t0 = time.perf_counter()
        api.call("PATCH", patch_path.format(pod.name), msgspec.json.encode(not_ready(stamp)),
                 "application/strategic-merge-patch+json")
        result.patch_round_trip.append(time.perf_counter() - t0)
        while True:
            code, headers, body = raygate.get(
                f"{status_path}?waitForChange={version}&timeoutSeconds={CHANGE_TIMEOUT_S:g}",
                conn)
            if code != 200:
                raise RuntimeError(f"long-poll {status_path}: {code}: {body[:200]!r}")
            if any(p["name"] == pod.name for p in msgspec.json.decode(body)["pods"]):
                result.seconds_to_admission.append(time.perf_counter() - t0)
                break
            if headers["etag"].strip('"') == version:
                raise RuntimeError(f"{pod.name}: not in raygate's admission status of "
                                   f"{pod.cluster} {CHANGE_TIMEOUT_S:g}s after the patch")
            result.woken_by_other += 1
            version = headers["etag"].strip('"')
    conn.close()
    return result


# --- the initial LIST, taken apart ------------------------------------------------------


PROTOBUF = "application/vnd.kubernetes.protobuf"
"""What client-go's own components (kube-scheduler, the controllers) ask nodes and pods in."""


@dataclass
class ListAlone:
    """raygate's first LIST of nodes and pods, done again with raygate stopped, one page
    after the other: the time spent waiting for kube-apiserver's pages, and the time
    raygate's own code (``raygate.server.kube.decode`` and the views of
    ``raygate.server.kube.resources``) takes to decode and convert them, one thread.
    Each page is also asked for as protobuf (read, not decoded: raygate has no decoders
    of Kubernetes' protobuf types) to show what the API server's side costs in it."""

    pages: int = 0
    mib: float = 0.0
    server_s: float = 0.0
    decode_convert_s: float = 0.0
    protobuf_mib: float = 0.0
    protobuf_server_s: float = 0.0


def list_alone(api: ApiPool, page_size: int) -> ListAlone:
    """Apart, the two shares of raygate's time to ready that overlap in raygate (it
    fetches the next page while it converts one): which side of the connection it is."""
    result = ListAlone()
    for resource in RESOURCES[:2]:  # nodes and pods: all but 600 of the objects
        served = resource.served(resource.versions[0])
        decoders, view = Decoders(resource.wire), resource.view
        token = ""
        while True:
            query = f"?limit={page_size}" + (f"&continue={token}" if token else "")
            started = time.perf_counter()
            data = api.call("GET", served.path + query)
            fetched = time.perf_counter()
            page = decode_page(data, decoders)
            for item in page.items:
                view(item)
            result.decode_convert_s += time.perf_counter() - fetched
            result.server_s += fetched - started
            started = time.perf_counter()  # the same page, as protobuf
            result.protobuf_mib += len(api.call("GET", served.path + query,
                                                accept=PROTOBUF)) / 2**20
            result.protobuf_server_s += time.perf_counter() - started
            result.pages += 1
            result.mib += len(data) / 2**20
            token = next_continue(data)
            if not token:
                break
    return result


# --- the run ----------------------------------------------------------------------------


def served_pod_kib(api: ApiPool, cluster: Cluster) -> float:
    """KiB of JSON per pod in kube-apiserver's LIST pages (``managedFields`` and all, which
    ``kubectl get -o json`` hides and the double's pods lack), from a page of Ray pods and
    one of web pods weighted by their numbers."""
    ray = sum(1 for p in cluster.pods if p.cluster)
    web_namespace = next((p.namespace for p in cluster.pods if not p.cluster), "")
    total = 0.0
    for namespace, count in (("ray", ray), (web_namespace, len(cluster.pods) - ray)):
        if count:
            page = api.call("GET", f"/api/v1/namespaces/{namespace}/pods?limit=200")
            total += len(page) / len(msgspec.json.decode(page)["items"]) * count
    return total / len(cluster.pods) / 1024


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


@dataclass
class Result:
    date: str
    nodes: int
    pods: int
    rayclusters: int
    podgroups: int
    pod_json_mib: float
    load_seconds: float
    load_requests_per_s: float
    ready_s: float
    synced_log_s: float
    rss_ready_mib: float
    peak_rss_ready_mib: float
    rss_end_mib: float
    peak_rss_end_mib: float
    changes: int
    rate_per_s: float
    change_p50_ms: float
    change_p99_ms: float
    change_max_ms: float
    patch_p50_ms: float
    patch_p99_ms: float
    lone_changes: int
    lone_rate_per_s: float
    lone_p50_ms: float
    lone_p99_ms: float
    lone_patch_p50_ms: float
    alone: ListAlone
    pod_json_kib_served: float
    woken_by_other: int
    etcd_db_mib: float
    kinds: dict[str, Any]
    versions: dict[str, str]
    command: str


def _etcd_db_mib(workdir: Path) -> float:
    db = workdir / "etcd" / "member" / "snap" / "db"
    return db.stat().st_size / 2**20 if db.exists() else 0.0


def versions() -> dict[str, str]:
    from importlib import metadata

    def module(name: str) -> str:
        text = (REPO / "testbed" / "modules" / name / "go.mod").read_text()
        found = re.search(r"^require\s+\S+\s+(v\S+)", text, re.M)
        return found.group(1) if found else "?"

    return {"python": platform.python_version(), "raygate": metadata.version("raygate"),
            "etcd": module("etcd"), "kubernetes": module("kubernetes"),
            "machine": f"{os.cpu_count()} CPUs, {platform.release()}"}


def run(n_nodes: int, n_pods: int, n_changes: int, rate: float, *, command: str,
        keep: bool = False) -> Result:
    cluster = build_cluster(n_nodes, n_pods)
    workdir = Path(tempfile.mkdtemp(prefix="raygate-cache-scale-"))
    testbed = Testbed(workdir, control_plane_only=True, etcd_quota_bytes=ETCD_QUOTA_BYTES)
    raygate: Raygate | None = None
    try:
        try:
            testbed.start()
        except StartError as exc:
            raise TestbedError(str(exc)) from None
        print(f"testbed: etcd and kube-apiserver up in {workdir}", flush=True)
        api = ApiPool(testbed.server, testbed.admin_ssl_context())
        loaded = load(api, cluster, LOAD_WORKERS)
        print(f"load: {loaded.requests:,} requests in {loaded.seconds:.0f}s "
              f"({loaded.requests / loaded.seconds:,.0f}/s); etcd db "
              f"{_etcd_db_mib(workdir):,.0f} MiB", flush=True)
        raygate = Raygate(testbed.admin_kubeconfig, workdir)
        raygate.start()
        ready_s = raygate.wait_ready(READY_TIMEOUT_S)
        rss_ready, hwm_ready = raygate.memory_kib()
        for _ in range(100):  # the log line trails the publish by a few lines of Python
            if raygate.synced_at is not None:
                break
            time.sleep(0.01)
        synced_s = (raygate.synced_at - raygate.started) if raygate.synced_at else -1.0
        print(f"raygate: ready in {ready_s:.2f}s ('cache synced' logged at {synced_s:.2f}s), "
              f"RSS {rss_ready / 1024:.0f} MiB (peak {hwm_ready / 1024:.0f})", flush=True)
        _, _, body = raygate.get("/readyz")
        health = json.loads(body)
        want = {"nodes": loaded.nodes, "pods": loaded.pods, "rayclusters": loaded.rayclusters,
                "podgroups": loaded.podgroups}
        got = {k: health["objects"].get(k) for k in want}
        if got != want:
            raise RuntimeError(f"raygate's cache holds {health['objects']}, loaded {want}")
        targets = changed_pods(cluster, n_changes + LONE_CHANGES)
        changes = apply_changes(api, raygate, targets[:n_changes], rate)
        lat = changes.seconds_to_admission
        print(f"changes: {len(lat)} at {rate:g}/s: p50 {pct(lat, 0.5) * 1e3:.1f} ms, p99 "
              f"{pct(lat, 0.99) * 1e3:.1f} ms (PATCH alone p50 "
              f"{pct(changes.patch_round_trip, 0.5) * 1e3:.1f} ms)", flush=True)
        # Then changes far enough apart that each is published alone, not in the next
        # publish slot (WatchSettings.publish_interval) after the one before.
        lone = apply_changes(api, raygate, targets[n_changes:], LONE_RATE)
        print(f"lone changes: {LONE_CHANGES} at {LONE_RATE:g}/s: p50 "
              f"{pct(lone.seconds_to_admission, 0.5) * 1e3:.1f} ms, p99 "
              f"{pct(lone.seconds_to_admission, 0.99) * 1e3:.1f} ms", flush=True)
        rss_end, hwm_end = raygate.memory_kib()
        served_kib = served_pod_kib(api, cluster)
        _, _, body = raygate.get("/readyz")
        kinds = json.loads(body).get("kinds", {})
        if not raygate.alive:
            raise RuntimeError(f"raygate exited:\n{raygate.tail()}")
        dead = [name for name, p in testbed.processes.items() if not p.alive]
        if dead or testbed.restarts:
            raise RuntimeError(f"testbed components exited: {dead or testbed.restarts}")
        code = raygate.stop()
        if code != 0:
            raise RuntimeError(f"raygate exited with {code}:\n{raygate.tail()}")
        if problems := raygate.problems():
            raise RuntimeError("raygate logged errors:\n  " + "\n  ".join(problems[:10]))
        alone = list_alone(api, WatchSettings().page_size)
        print(f"the LIST alone: {alone.pages} pages, {alone.mib:,.0f} MiB; waiting for "
              f"kube-apiserver {alone.server_s:.1f}s, raygate's decode and convert "
              f"{alone.decode_convert_s:.1f}s; as protobuf {alone.protobuf_mib:,.0f} MiB in "
              f"{alone.protobuf_server_s:.1f}s", flush=True)
        return Result(
            date=datetime.now(UTC).isoformat(timespec="seconds"), nodes=loaded.nodes,
            pods=loaded.pods, rayclusters=loaded.rayclusters, podgroups=loaded.podgroups,
            pod_json_mib=loaded.pod_json_bytes / 2**20, load_seconds=loaded.seconds,
            load_requests_per_s=loaded.requests / loaded.seconds, ready_s=ready_s,
            synced_log_s=synced_s, rss_ready_mib=rss_ready / 1024,
            peak_rss_ready_mib=hwm_ready / 1024, rss_end_mib=rss_end / 1024,
            peak_rss_end_mib=max(hwm_end, raygate.peak_sampled_kib) / 1024,
            changes=len(lat), rate_per_s=rate, change_p50_ms=pct(lat, 0.5) * 1e3,
            change_p99_ms=pct(lat, 0.99) * 1e3, change_max_ms=max(lat) * 1e3,
            patch_p50_ms=pct(changes.patch_round_trip, 0.5) * 1e3,
            patch_p99_ms=pct(changes.patch_round_trip, 0.99) * 1e3,
            lone_changes=len(lone.seconds_to_admission), lone_rate_per_s=LONE_RATE,
            lone_p50_ms=pct(lone.seconds_to_admission, 0.5) * 1e3,
            lone_p99_ms=pct(lone.seconds_to_admission, 0.99) * 1e3,
            lone_patch_p50_ms=pct(lone.patch_round_trip, 0.5) * 1e3, alone=alone,
            pod_json_kib_served=served_kib,
            woken_by_other=changes.woken_by_other + lone.woken_by_other,
            etcd_db_mib=_etcd_db_mib(workdir),
            kinds={k: {f: v.get(f) for f in ("objects", "events", "relists", "errors")}
                   for k, v in kinds.items()},
            versions=versions(), command=command)
    finally:
        if raygate is not None:
            raygate.stop()
        testbed.stop()
        if keep:
            print(f"kept {workdir}")
        else:
            subprocess.run(["rm", "-rf", str(workdir)], check=False)


GOALS = {"ready": 15.0, "rss": 1024.0, "change_p99": 100.0}


def markdown(r: Result) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    peak = max(r.peak_rss_ready_mib, r.peak_rss_end_mib)
    rows = [
        ("cluster", f"{r.nodes:,} nodes (15 % GPU), {r.pods:,} pods "
                    f"({r.pod_json_mib * 1024 / r.pods:.1f} KiB of JSON each as created; "
                    f"{r.pod_json_kib_served:.1f} KiB as LIST serves them, managed fields "
                    f"and all: {r.pod_json_kib_served * r.pods / 1024:,.0f} MiB), "
                    f"{r.rayclusters} RayClusters, {r.podgroups} PodGroups", ""),
        ("process start → `/readyz` 200 (every kind listed, cache published)",
         f"{r.ready_s:.1f} s (`cache synced` logged at {r.synced_log_s:.1f} s)",
         f"< {GOALS['ready']:g} s: {verdict(r.ready_s < GOALS['ready'])}"),
        ("resident memory when ready", f"{r.rss_ready_mib:,.0f} MiB (peak {peak:,.0f} MiB; "
                                       f"{r.rss_end_mib:,.0f} MiB after the changes)",
         f"< 1 GiB: {verdict(peak < GOALS['rss'])}"),
        (f"pod change in the API → raygate's snapshot, {r.changes:,} changes at "
         f"{r.rate_per_s:g}/s", f"p50 {r.change_p50_ms:.1f} ms, p99 {r.change_p99_ms:.1f} ms "
                                f"(max {r.change_max_ms:.1f})",
         f"p99 < {GOALS['change_p99']:g} ms: {verdict(r.change_p99_ms < GOALS['change_p99'])}"),
        ("of which the PATCH's own round trip", f"p50 {r.patch_p50_ms:.1f} ms, p99 "
                                                f"{r.patch_p99_ms:.1f} ms", ""),
        (f"the same, {r.lone_changes} lone changes ({r.lone_rate_per_s:g}/s)",
         f"p50 {r.lone_p50_ms:.1f} ms, p99 {r.lone_p99_ms:.1f} ms (PATCH alone p50 "
         f"{r.lone_patch_p50_ms:.1f} ms)", ""),
        ("the same LIST of nodes and pods again, raygate stopped, one page after the other",
         f"{r.alone.server_s:.1f} s waiting for kube-apiserver's {r.alone.pages:,} pages "
         f"({r.alone.mib:,.0f} MiB); {r.alone.decode_convert_s:.1f} s in raygate's decode "
         f"and convert of them", ""),
        ("the same pages as protobuf (read, not decoded)",
         f"{r.alone.protobuf_server_s:.1f} s waiting for kube-apiserver "
         f"({r.alone.protobuf_mib:,.0f} MiB)", ""),
    ]
    out = ["| | measured | goal |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    v = r.versions
    out.append("")
    pods = r.kinds.get("Pod", {})
    out.append(f"Pod watch after the changes: {pods.get('events')} events, "
               f"{pods.get('relists')} re-lists, {pods.get('errors')} errors; "
               f"{r.woken_by_other} long-polls woken by another change.")
    out.append("")
    out.append(f"{r.date}; kube-apiserver {v['kubernetes']}, etcd {v['etcd']}, raygate "
               f"{v['raygate']}, Python {v['python']}; {v['machine']}; loaded at "
               f"{r.load_requests_per_s:,.0f} requests/s (etcd db {r.etcd_db_mib:,.0f} MiB "
               f"after); `{r.command}`")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0, help="pod changes per second")
    parser.add_argument("--fast", action="store_true",
                        help="CI size: 500 nodes, 5,000 pods, 200 changes")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    parser.add_argument("--keep", action="store_true",
                        help="keep the testbed's directory (logs, etcd data)")
    args = parser.parse_args(argv)
    if args.fast:
        args.nodes, args.pods, args.changes = 500, 5000, min(args.changes, 200)
    command = "python -m bench.cache_scale " + " ".join(
        sys.argv[1:] if argv is None else argv)
    try:
        result = run(args.nodes, args.pods, args.changes, args.rate, command=command.strip(),
                     keep=args.keep)
    except (TestbedError, RuntimeError, ApiError, ValueError) as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    print()
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
