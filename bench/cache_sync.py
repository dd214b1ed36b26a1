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
import http.client
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.cache_sync_raygate import raygate_main
from bench.cluster_json import TOKEN, Cluster, ClusterDouble, build_cluster, raycluster_name
from bench.payloads import FLOOR_GROUP, ray_worker_pod
from bench.reporter import write_json
from bench.stats import percentile, summarize

__all__ = ["Result", "main", "request_body", "run"]

HOST = "127.0.0.1"
READY_TIMEOUT_S = 600.0
LONE_EVENTS = 30
"""Pod updates sent 100 ms apart before the stream: the cost of an event applied alone."""

Obj = dict[str, Any]


# --- process 1: the API-server double ---------------------------------------------------


def _double_main(conn: Connection, n_nodes: int, n_pods: int) -> None:
    started = time.perf_counter()
    served = ClusterDouble(build_cluster(n_nodes, n_pods))
    conn.send({"port": served.port, "generate_s": time.perf_counter() - started,
               "pod_json_bytes": served.pod_json_bytes, "pods": len(served.cluster.pods)})
    while True:
        command = conn.recv()
        if command[0] == "stream":
            _, count, rate = command
            t0 = time.perf_counter()
            for k in range(count):
                served.flip()
                ahead = t0 + (k + 1) / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            conn.send({"events": count, "seconds": time.perf_counter() - t0,
                       "resource_version": str(served.double.resource_version)})
        elif command[0] == "stop":
            served.double.stop()
            conn.send("stopped")
            return


# --- process 3: the driver --------------------------------------------------------------


@dataclass
class Latency:
    requests: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    mean_ms: float = 0.0

    @classmethod
    def of(cls, samples: list[float]) -> Latency:
        ms = summarize(samples, 1e3)
        return cls(ms.count, ms.p50, ms.p99, ms.mean)


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


def request_body(cluster_nodes: list[str]) -> bytes:
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
    from raygate.policy.quantity import parse_milli
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


@dataclass
class _Procs:
    """The double's and raygate's processes, and the pipes to them."""

    double: Any
    double_conn: Connection
    raygate: Any
    raygate_conn: Connection

    def stop(self) -> None:
        for conn, process in ((self.raygate_conn, self.raygate),
                              (self.double_conn, self.double)):
            if process.is_alive():
                conn.send(("stop",))
                if conn.poll(30):
                    conn.recv()
            process.join(10)
            if process.is_alive():
                process.kill()


def _start(n_nodes: int, n_pods: int, admission: bool,
           publish_interval: float | None) -> tuple[_Procs, dict[str, Any]]:
    """The double, then raygate following it; what the double said of its pods."""
    ctx = multiprocessing.get_context("spawn")
    double_conn, double_end = ctx.Pipe()
    double = ctx.Process(target=_double_main, args=(double_end, n_nodes, n_pods),
                         name="apiserver-double", daemon=True)
    double.start()
    info: dict[str, Any] = double_conn.recv()
    print(f"double: {info['pods']} pods, {info['pod_json_bytes'] / 2**20:.0f} MiB of pod JSON "
          f"(avg {info['pod_json_bytes'] / info['pods'] / 1024:.1f} KiB), built in "
          f"{info['generate_s']:.1f}s", flush=True)
    from testkit.apiserver import kubeconfig_text

    workdir = Path(tempfile.mkdtemp(prefix="raygate-cache-bench-"))
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(f"http://{HOST}:{info['port']}", TOKEN))
    raygate_conn, raygate_end = ctx.Pipe()
    raygate = ctx.Process(target=raygate_main,
                          args=(raygate_end, str(kubeconfig), admission, publish_interval),
                          name="raygate", daemon=True)
    raygate.start()
    return _Procs(double, double_conn, raygate, raygate_conn), info


def _ready(procs: _Procs, n_nodes: int, n_pods: int) -> dict[str, Any]:
    if not procs.raygate_conn.poll(READY_TIMEOUT_S):
        raise RuntimeError("raygate did not become ready")
    ready: dict[str, Any] = procs.raygate_conn.recv()
    print(f"raygate: ready in {ready['ready_s']:.2f}s, {ready['counts']}, "
          f"RSS {ready['rss_kib'] / 1024:.0f} MiB (peak {ready['hwm_kib'] / 1024:.0f})",
          flush=True)
    if ready["counts"]["pods"] != n_pods or ready["counts"]["nodes"] != n_nodes:
        raise RuntimeError(f"cache holds {ready['counts']}, not the cluster")
    return ready


def _caught_up(procs: _Procs, streamed: dict[str, Any]) -> dict[str, Any]:
    """raygate's state once its cache holds the double's last version."""
    deadline = time.monotonic() + 60
    while True:
        procs.raygate_conn.send(("version",))
        version: dict[str, Any] = procs.raygate_conn.recv()
        if (version["pods"] == streamed["resource_version"]
                and version["applied"] >= streamed["events"] + LONE_EVENTS):
            return version
        if time.monotonic() > deadline:
            raise RuntimeError(f"cache at {version['pods']}, API server at "
                               f"{streamed['resource_version']}")
        time.sleep(0.05)


@dataclass
class _Measured:
    quiet: tuple[list[float], list[float]]
    streaming: tuple[list[float], list[float]]
    batches: list[tuple[int, float]]
    rss_after_kib: int
    decode_us: float


def _drive(procs: _Procs, cluster: Cluster, port: int, *, events: int, rate: int,
           quiet_requests: int, pace: float) -> _Measured:
    """Filter and prioritize quiet, then while the double streams pod updates."""
    body = request_body(cluster.node_names)
    _measure(port, body, lambda: True, at_least=50, at_most=50, pace=0)  # warm up
    quiet = _measure(port, body, lambda: True, at_least=quiet_requests,
                     at_most=quiet_requests, pace=pace)
    procs.raygate_conn.send(("reset",))
    procs.raygate_conn.recv()
    # A trickle first: events far enough apart that each is published alone.
    procs.double_conn.send(("stream", LONE_EVENTS, 10))
    procs.double_conn.recv()
    procs.double_conn.send(("stream", events, rate))
    streaming = _measure(port, body, procs.double_conn.poll, at_least=10, at_most=10**7,
                         pace=pace)
    version = _caught_up(procs, procs.double_conn.recv())
    procs.raygate_conn.send(("batches",))
    batches: list[tuple[int, float]] = procs.raygate_conn.recv()
    return _Measured(quiet, streaming, batches, version["rss_kib"],
                     _decode_convert_cost(cluster))


def run(n_nodes: int, n_pods: int, events: int, rate: int, quiet_requests: int, *,
        pace: float = 100.0, admission: bool = True,
        publish_interval: float | None = None) -> Result:
    procs, info = _start(n_nodes, n_pods, admission, publish_interval)
    try:
        ready = _ready(procs, n_nodes, n_pods)
        measured = _drive(procs, build_cluster(n_nodes, n_pods), ready["http_port"],
                          events=events, rate=rate, quiet_requests=quiet_requests, pace=pace)
    finally:
        procs.stop()
    batches = measured.batches
    per_event = [s / n * 1e6 for n, s in batches if n]
    applied = sum(n for n, _ in batches)
    return Result(
        nodes=n_nodes, pods=n_pods, pod_json_bytes=info["pod_json_bytes"],
        ready_s=ready["ready_s"], rss_mib=ready["rss_kib"] / 1024,
        peak_rss_mib=ready["hwm_kib"] / 1024, events=applied, rate_per_s=rate,
        batches=len(batches), apply_us_per_event_p50=percentile(per_event, 0.5, empty=0.0),
        apply_us_per_event_p99=percentile(per_event, 0.99, empty=0.0),
        apply_us_per_event_mean=(sum(s for _, s in batches) / applied * 1e6) if applied else 0,
        single_event_batches_us_p50=percentile([s * 1e6 for n, s in batches if n == 1], 0.5,
                                               empty=0.0),
        decode_convert_us_per_event=measured.decode_us,
        filter_quiet=Latency.of(measured.quiet[0]),
        filter_streaming=Latency.of(measured.streaming[0]),
        prioritize_quiet=Latency.of(measured.quiet[1]),
        prioritize_streaming=Latency.of(measured.streaming[1]),
        rss_after_stream_mib=measured.rss_after_kib / 1024, admission_service=admission,
        pace_per_s=pace, machine=f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
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
        write_json(args.json, asdict(result), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
