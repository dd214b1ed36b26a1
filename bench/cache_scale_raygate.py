"""``bench.cache_scale``'s raygate, a process of its own (``raygate serve`` following the
testbed, its output read line by line, its memory sampled), the pod changes timed from
the API to raygate's admission status."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import yaml

from bench.cache_scale_load import Loaded
from bench.cluster_json import PODS_PER_RAYCLUSTER, Cluster, PodSpec
from bench.memory import read_memory
from testbed.api import KubeApi
from testbed.cluster import DEPLOY, REPO
from testbed.processes import free_port

__all__ = ["Changes", "Raygate", "Started", "apply_changes", "changed_pods", "not_ready",
           "start_raygate"]

Obj = dict[str, Any]
HOST = "127.0.0.1"
CHANGE_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 600.0


class Raygate:
    """``raygate serve`` following the testbed, its output read line by line."""

    def __init__(self, kubeconfig: Path, workdir: Path, source: Path = REPO,
                 name: str = "raygate") -> None:
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
        self.source = source
        """The checkout whose raygate runs (another commit's, for a before/after)."""
        self.log = workdir / f"{name}.log"
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
            env={**os.environ, "PYTHONPATH": str(self.source)}, cwd=self.source)
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
        pid = self.process.pid
        while not self._stop.wait(0.05):
            try:
                rss = read_memory(pid).rss_kib
            except OSError:
                return
            self.peak_sampled_kib = max(self.peak_sampled_kib, rss)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def memory_kib(self) -> tuple[int, int]:
        assert self.process is not None
        memory = read_memory(self.process.pid)
        return memory.rss_kib, memory.hwm_kib

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


@dataclass
class Started:
    """raygate once ready: seconds to ``/readyz`` 200 and to its ``cache synced`` line,
    its memory then (KiB)."""

    ready_s: float
    synced_s: float
    rss_kib: int
    hwm_kib: int


def start_raygate(raygate: Raygate, loaded: Loaded) -> Started:
    """Start raygate, wait until it is ready, and check that it holds what was loaded."""
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
    return Started(ready_s, synced_s, rss_ready, hwm_ready)


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


def apply_changes(api: KubeApi, raygate: Raygate, pods: list[PodSpec], rate: float) -> Changes:
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
