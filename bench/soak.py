"""Soak: N minutes of mixed traffic against a real ``raygate serve --kubeconfig`` that
follows the API-server double while the double streams pod updates and drops watches.

Processes, on loopback only:

* the API-server double (``testkit/apiserver.py``) with ``bench.cache_sync``'s cluster
  (500 nodes, 5,000 pods, 10 RayClusters of 100 pods by default), writing pod updates at
  ``--events-per-second`` (readiness flips, as probes do) and cutting every open watch
  every ``--drop-every`` seconds, as a network failure would;
* raygate, as operators run it: ``python -m raygate serve --kubeconfig ...``;
* ``--clients`` client processes, each on its own keep-alive connection, sending
  kube-scheduler filter / prioritize / preempt and admission-status gets at
  ``--rate`` requests a second; one more process holds admission long-polls.

Reported each minute: requests and errors, p50/p99 per route, raygate's resident memory.
At the end: p99 drift per route (last minute against the first), memory growth (the last
minute's end against the first's, the first minute being the warm-up), and PASS when there
were no errors and memory grew less than 10%.

Run (not part of CI)::

    .venv/bin/python -m bench.soak                 # 5 minutes
    .venv/bin/python -m bench.soak --minutes 3 --json soak.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.cache_sync import request_body
from bench.cluster_json import TOKEN, Cluster, ClusterDouble, build_cluster
from bench.contenders import free_port
from bench.memory import read_memory
from bench.reporter import write_json
from bench.stats import percentile

__all__ = ["main"]

HOST = "127.0.0.1"
RSS_GROWTH_LIMIT = 0.10

Bucket = dict[str, Any]
"""One client's minute: {"latencies": {route: [seconds]}, "errors": int, "examples": [..]}."""


# --- the API-server double ------------------------------------------------------------------


def _double_main(conn: Connection, n_nodes: int, n_pods: int, rate: float,
                 drop_every: float) -> None:
    served = ClusterDouble(build_cluster(n_nodes, n_pods))
    conn.send({"port": served.port})
    conn.recv()  # "go": raygate is ready
    events = drops = 0
    started = time.perf_counter()
    next_drop = started + drop_every
    while not conn.poll(0):
        served.flip()
        events += 1
        now = time.perf_counter()
        if now >= next_drop:
            drops += served.double.drop_watches()
            next_drop += drop_every
        ahead = started + events / rate - now
        if ahead > 0:
            time.sleep(ahead)
    conn.recv()
    served.double.stop()
    conn.send({"events": events, "watches_dropped": drops,
               "watch_requests": sum(served.double.watch_requests(c)
                                     for c in (served.nodes, served.pods, served.rayclusters))})


# --- clients --------------------------------------------------------------------------------


def _preempt_body(cluster: Cluster) -> bytes:
    """kube-scheduler's preempt for the pending floor worker: three CPU nodes, each with
    the Ray pods the cache has there as proposed victims (UIDs, nodeCacheCapable)."""
    filter_args = json.loads(request_body([]))
    by_node: dict[str, list[str]] = defaultdict(list)
    for pod in cluster.pods:
        if pod.cluster:
            by_node[pod.node].append(pod.uid)
    chosen = sorted(by_node)[:3]
    return json.dumps({
        "Pod": filter_args["Pod"], "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {n: {"Pods": [{"UID": u} for u in by_node[n][:4]],
                                      "NumPDBViolations": 0} for n in chosen},
    }).encode()


class _Client:
    """One keep-alive connection, reopened after any failure."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(HOST, self.port, timeout=60)
        try:
            self.conn.request(method, path, body,
                              {"Content-Type": "application/json"} if body else {})
            reply = self.conn.getresponse()
            return reply.status, reply.read()
        except Exception:
            self.conn.close()
            self.conn = None
            raise


def _new_bucket() -> Bucket:
    return {"latencies": defaultdict(list), "errors": 0, "examples": []}


@dataclass(frozen=True)
class _Plan:
    """What one client process does (picklable: clients are spawned)."""

    port: int
    start: float
    """time.time() of the first request; minute k is [start + k*period, start + (k+1)*period)."""
    minutes: int
    period: float
    rate: float
    seed: int
    nodes: int
    pods: int
    long_poll: bool


def _problem(route: str, status: int, data: bytes, versions: dict[str, str],
             name: str) -> str:
    """What is wrong with a reply ("" when nothing); an admission reply's version kept."""
    if status != 200:
        return f"{route}: HTTP {status}: {data[:200]!r}"
    if route == "filter" and json.loads(data)["Error"]:
        return f"filter: Error {json.loads(data)['Error'][:200]}"
    if route.startswith("admission"):
        versions[name] = json.loads(data)["metadata"]["version"]
    return ""


def _client_main(out: Any, plan: _Plan) -> None:
    cluster = build_cluster(plan.nodes, plan.pods)
    clusters = sorted({p.cluster for p in cluster.pods if p.cluster})
    filter_body = request_body(cluster.node_names)
    preempt_body = _preempt_body(cluster)
    rng = random.Random(plan.seed)
    client = _Client(plan.port)
    end = plan.start + plan.minutes * plan.period
    buckets: dict[int, Bucket] = defaultdict(_new_bucket)
    sent = 0
    versions: dict[str, str] = {}
    while (now := time.time()) < end:
        if not plan.long_poll:
            time.sleep(max(0.0, plan.start + sent / plan.rate - now))
        sent += 1
        name = rng.choice(clusters)
        admission = f"/v1/namespaces/ray/rayclusters/{name}/admission"
        if plan.long_poll:
            # The version it holds: answered when the status changes, or after 5 s (one
            # it never saw, none: answered at once).
            route, method, path, body = ("admission long-poll", "GET",
                                         f"{admission}?waitForChange="
                                         f"{versions.get(name, '0' * 16)}"
                                         "&timeoutSeconds=5", None)
        else:
            route, method, path, body = rng.choices([
                ("filter", "POST", "/scheduler/filter", filter_body),
                ("prioritize", "POST", "/scheduler/prioritize", filter_body),
                ("preempt", "POST", "/scheduler/preempt", preempt_body),
                ("admission", "GET", admission, None),
            ], weights=[4, 4, 1, 2])[0]
        t0 = time.perf_counter()
        try:
            problem = _problem(route, *client.request(method, path, body), versions, name)
        except Exception as exc:
            problem = f"{route}: {type(exc).__name__}: {exc}"
        bucket = buckets[int((time.time() - plan.start) // plan.period)]
        bucket["latencies"][route].append(time.perf_counter() - t0)
        if problem:
            bucket["errors"] += 1
            if len(bucket["examples"]) < 3:
                bucket["examples"].append(problem)
    out.put({minute: {"latencies": dict(b["latencies"]), "errors": b["errors"],
                      "examples": b["examples"]} for minute, b in buckets.items()
             if minute < plan.minutes})


# --- raygate --------------------------------------------------------------------------------


def _rss_mib(pid: int) -> float:
    return read_memory(pid).rss_mib


def _wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"raygate exited with {process.returncode}")
        try:
            status, _ = _Client(port).request("GET", "/readyz")
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("raygate did not become ready")


# --- the run --------------------------------------------------------------------------------


def _start_raygate(api_port: int, workdir: Path) -> tuple[int, subprocess.Popen[bytes], Any]:
    """``raygate serve`` following the double at ``api_port``: its port, process, log."""
    from testkit.apiserver import kubeconfig_text

    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(f"http://{HOST}:{api_port}", TOKEN))
    port = free_port()
    log = (workdir / "raygate.log").open("wb")
    raygate = subprocess.Popen(
        [sys.executable, "-m", "raygate", "serve", "--kubeconfig", str(kubeconfig),
         "--http-addr", f"{HOST}:{port}", "--grpc-addr", f"{HOST}:0",
         "--log-level", "warning", "--log-format", "text"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return port, raygate, log


def _start_clients(ctx: Any, args: argparse.Namespace, port: int, out: Any,
                   clients: list[Any]) -> float:
    """``--clients`` clients and the long-poller, into ``clients``; when they start."""
    start = time.time() + 1.0
    for i in range(args.clients + 1):
        plan = _Plan(port, start, args.minutes, args.minute_seconds, args.rate, i, args.nodes,
                     args.pods, long_poll=i == args.clients)
        process = ctx.Process(target=_client_main, daemon=True, args=(out, plan))
        process.start()
        clients.append(process)
    return start


def _merged(out: Any, clients: int) -> dict[int, Bucket]:
    """Every client's minutes, merged."""
    merged: dict[int, Bucket] = defaultdict(_new_bucket)
    for _ in range(clients):
        for minute, bucket in out.get(timeout=120).items():
            into = merged[minute]
            for route, values in bucket["latencies"].items():
                into["latencies"][route].extend(values)
            into["errors"] += bucket["errors"]
            into["examples"] += bucket["examples"]
    return merged


def run(args: argparse.Namespace) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    double_conn, double_end = ctx.Pipe()
    double = ctx.Process(target=_double_main, name="apiserver-double", daemon=True,
                         args=(double_end, args.nodes, args.pods, args.events_per_second,
                               args.drop_every))
    double.start()
    workdir = Path(tempfile.mkdtemp(prefix="raygate-soak-"))
    port, raygate, log = _start_raygate(double_conn.recv()["port"], workdir)
    clients: list[Any] = []
    try:
        _wait_ready(port, raygate, 300)
        print(f"raygate ready (pid {raygate.pid}, RSS {_rss_mib(raygate.pid):.0f} MiB); "
              f"{args.minutes} min of traffic from {args.clients} clients at {args.rate:g} "
              f"req/s each + 1 long-poller; {args.events_per_second:g} pod events/s, "
              f"watches dropped every {args.drop_every:g} s; log: {workdir / 'raygate.log'}",
              flush=True)
        double_conn.send("go")
        out = ctx.Queue()
        start = _start_clients(ctx, args, port, out, clients)
        rss: list[float] = []
        for minute in range(args.minutes):
            time.sleep(max(0.0, start + (minute + 1) * args.minute_seconds - time.time()))
            rss.append(_rss_mib(raygate.pid))
            print(f"  minute {minute + 1}: raygate RSS {rss[-1]:.1f} MiB", flush=True)
        merged = _merged(out, len(clients))
        double_conn.send("stop")
        streamed = double_conn.recv()
        if raygate.poll() is not None:
            raise RuntimeError(f"raygate exited with {raygate.returncode} during the run")
    finally:
        for process in clients:
            process.join(10)
        raygate.terminate()
        raygate.wait(30)
        double.join(10)
        if double.is_alive():
            double.kill()
        log.close()
    return _summary(args, merged, rss, streamed)


def _summary(args: argparse.Namespace, merged: dict[int, Bucket], rss: list[float],
             streamed: dict[str, Any]) -> dict[str, Any]:
    minutes = []
    for minute in range(args.minutes):
        bucket = merged[minute]
        routes = {route: {"requests": len(v), "p50_ms": percentile(v, 0.5, empty=0.0) * 1e3,
                          "p99_ms": percentile(v, 0.99, empty=0.0) * 1e3}
                  for route, v in sorted(bucket["latencies"].items())}
        minutes.append({"minute": minute + 1, "rss_mib": rss[minute],
                        "requests": sum(r["requests"] for r in routes.values()),
                        "errors": bucket["errors"], "error_examples": bucket["examples"],
                        "routes": routes})
    first, last = minutes[0], minutes[-1]
    drift = {route: last["routes"][route]["p99_ms"] / first["routes"][route]["p99_ms"]
             # A long-poll's time is its wait: no latency to drift.
             for route in first["routes"] if route in last["routes"] and "poll" not in route
             and first["routes"][route]["p99_ms"] > 0}
    growth = (rss[-1] - rss[0]) / rss[0] if rss and rss[0] else 0.0
    errors = sum(m["errors"] for m in minutes)
    return {"minutes": minutes, "p99_drift": drift, "rss_growth": growth, "errors": errors,
            "streamed": streamed, "settings": vars(args),
            "passed": errors == 0 and growth < RSS_GROWTH_LIMIT}


def report(result: dict[str, Any]) -> str:
    lines = []
    for m in result["minutes"]:
        lines.append(f"minute {m['minute']}: {m['requests']:,} requests, {m['errors']} errors, "
                     f"raygate RSS {m['rss_mib']:.1f} MiB")
        for route, r in m["routes"].items():
            lines.append(f"    {route:<20} {r['requests']:>7,}  p50 {r['p50_ms']:7.2f} ms  "
                         f"p99 {r['p99_ms']:7.2f} ms")
        lines += [f"    error: {e}" for e in m["error_examples"]]
    s = result["streamed"]
    lines.append(f"double: {s['events']:,} pod events, {s['watches_dropped']} watches dropped, "
                 f"{s['watch_requests']} watch requests")
    lines.append("p99 drift (last minute / first): " + ", ".join(
        f"{route} {ratio:.2f}x" for route, ratio in result["p99_drift"].items()))
    lines.append(f"RSS growth (last minute / first, after warm-up): "
                 f"{result['rss_growth'] * 100:+.1f}% (limit {RSS_GROWTH_LIMIT * 100:.0f}%)")
    lines.append(f"errors: {result['errors']}")
    lines.append("PASS" if result["passed"] else "FAIL")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rate", type=float, default=50.0,
                        help="requests a second per client (default %(default)s)")
    parser.add_argument("--events-per-second", type=float, default=50.0)
    parser.add_argument("--drop-every", type=float, default=30.0,
                        help="seconds between watch drops (default %(default)s)")
    parser.add_argument("--minute-seconds", type=float, default=60.0,
                        help="length of a reporting period: shorter to try the harness")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = parser.parse_args(argv)
    if args.minutes < 2:
        parser.error("--minutes: at least 2 (the first is the warm-up)")
    result = run(args)
    print(report(result))
    if args.json:
        write_json(args.json, result, indent=1)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
