"""Do many admission-status watchers slow the scheduler's filter/prioritize down? And how
soon after the cache applies a change does a Watch stream deliver it?

Each scenario runs three processes on loopback:

* a **server**: raygate's server (``build_server``) over the ``bench.payloads`` cluster (``--nodes``
  nodes, RayCluster ``ray/bench``) plus ``max(--watchers)`` small RayClusters
  ``ray/rc-<i>`` (a head each), and a publisher thread that makes the cache apply a
  change ``--rate`` times a second (one pending ``ray/bench`` worker's PodScheduled
  message changes, so that cluster's admission status and version change each time);
  pinned to CPU 0;
* **watchers**: gRPC ``Watch`` streams and HTTP long-polls, recording when each change
  arrives (raw bytes, unparsed, to take little CPU); pinned to CPU 1;
* **load**: this process, sending kube-scheduler's cycle (filter a floor worker over every
  node name, then prioritize the names that passed) back to back on one keep-alive
  connection for ``--duration`` seconds; pinned to CPU 1.

Scenarios, for each N of ``--watchers``:

* ``idle``: no changes, no watchers; ``changes``: changes, no watchers (the baselines);
* ``spread``: N gRPC watchers, each on its own RayCluster (``rc-<i>``, which do not
  change: one Ray autoscaler per cluster), plus 10 gRPC and 1 HTTP watcher on
  ``ray/bench``, whose delay is measured. The realistic case;
* ``same``: N gRPC watchers and N/10 HTTP long-polls all on ``ray/bench``, every one woken
  by every change. The worst case: the fan-out cost itself.

Reported: filter and prioritize latency, cycles per second, the server's CPU time per
cycle, and the delay from ``cache.publish`` to each watcher's receipt (CLOCK_MONOTONIC
is shared by processes). On a shared machine, run with ``--repeat 3``.

Run::

    .venv/bin/python -m bench.admission_watchers [--nodes 500] [--watchers 100,1000]
        [--rate 5] [--duration 8] [--json OUT]

Exits non-zero when a reply is wrong or a watcher misses changes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.admission_peers import pin, serve, watch
from bench.contenders import free_port
from bench.payloads import (
    FLOOR_GROUP,
    NAMESPACE,
    cluster_snapshot,
    extender_args,
    ray_worker_pod,
    request_node_names,
    snapshot_gpu_node_names,
    snapshot_node_names,
)
from bench.reporter import markdown_table, write_json
from bench.stats import summarize

__all__ = ["main"]

HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0


def _small_clusters(count: int, node_names: Sequence[str]) -> list[dict[str, Any]]:
    """RayClusters ray/rc-<i>, one worker group of one replica, the head running."""
    from testkit.builders import make_pod, make_raycluster

    items: list[dict[str, Any]] = []
    for i in range(count):
        items.append(make_raycluster(f"rc-{i}", NAMESPACE).group("w", replicas=1).obj())
        items.append(make_pod(f"rc-{i}-head", NAMESPACE).head(f"rc-{i}")
                     .on(node_names[i % len(node_names)]).obj())
    return items


# --- the load (this process) ----------------------------------------------------------------


@dataclass
class Latency:
    requests: int
    per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float


def _summary(samples_ns: list[int], seconds: float) -> Latency:
    ms = summarize(samples_ns, 1e-6)
    return Latency(ms.count, ms.count / seconds if seconds else 0.0, ms.p50, ms.p99, ms.max)


def _load(port: int, filter_body: bytes, prioritize_body: bytes, duration: float,
          ) -> tuple[Latency, Latency]:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    headers = {"Content-Type": "application/json"}
    samples: dict[str, list[int]] = {"filter": [], "prioritize": []}

    def one(path: str, body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter_ns()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        samples[path.rsplit("/", 1)[1]].append(time.perf_counter_ns() - started)
        return response.status, data

    for _ in range(100):  # warm-up, not recorded
        one("/scheduler/filter", filter_body)
        one("/scheduler/prioritize", prioritize_body)
    samples = {"filter": [], "prioritize": []}
    started = time.monotonic()
    while time.monotonic() - started < duration:
        status, data = one("/scheduler/filter", filter_body)
        if status != 200 or b'"Error":""' not in data:
            raise SystemExit(f"filter failed: {status} {data[:200]!r}")
        one("/scheduler/prioritize", prioritize_body)
    elapsed = time.monotonic() - started
    conn.close()
    return _summary(samples["filter"], elapsed), _summary(samples["prioritize"], elapsed)


@dataclass
class Outcome:
    scenario: str
    watchers_grpc: int
    watchers_http: int
    publishes: int
    filter: Latency
    prioritize: Latency
    server_cpu_percent: float = 0.0
    server_cpu_ms_per_cycle: float = 0.0
    """The server's CPU time over the load window, per filter+prioritize cycle served: the
    watchers' cost shows up here even when the machine's other processes add noise to
    the latencies."""
    watch_delivered: int = 0
    watch_expected: int = 0
    watch_p50_ms: float = 0.0
    watch_p99_ms: float = 0.0
    watch_max_ms: float = 0.0
    notes: list[str] = field(default_factory=list)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection(HOST, port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        time.sleep(0.05)
    raise SystemExit("server not ready")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _delays(publish_log: Path, received: list[tuple[int, float]]) -> list[float]:
    """Each receipt's delay from the last publish of its variant before it."""
    publishes: list[tuple[float, int]] = []
    for line in publish_log.read_text().splitlines():
        index, when = line.split()
        publishes.append((float(when), int(index)))
    delays = []
    for variant, at in received:
        before = [t for t, v in publishes if v == variant and t <= at]
        if before:
            delays.append(at - max(before))
    return delays


def run_scenario(name: str, snapshot_file: Path, work: Path, *, n_watchers: int, rate: float,
                 duration: float, filter_body: bytes, prioritize_body: bytes) -> Outcome:
    """``name`` is idle, changes, spread or same (see the module's docstring)."""
    http_port, grpc_port = free_port(), free_port()
    publish_log = work / f"{name}-{n_watchers}.publishes"
    received_file = work / f"{name}-{n_watchers}.received.json"
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.admission_watchers", "_serve", str(snapshot_file),
         str(http_port), str(grpc_port), str(rate), str(publish_log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=(work / f"{name}-{n_watchers}.server.log").open("wb"))
    watchers: subprocess.Popen[bytes] | None = None
    # (gRPC on ray/bench, HTTP on ray/bench, gRPC each on its own idle cluster)
    n_grpc, n_http, n_spread = {"spread": (10, 1, n_watchers),
                                "same": (n_watchers, n_watchers // 10, 0)}.get(name, (0, 0, 0))
    try:
        _wait_ready(http_port, server)
        if n_grpc:
            watchers = subprocess.Popen(
                [sys.executable, "-m", "bench.admission_watchers", "_watch", str(grpc_port),
                 str(http_port), str(n_grpc), str(n_http), str(n_spread), str(received_file)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
            assert watchers.stdout is not None
            if watchers.stdout.readline().strip() != b"ready":
                raise SystemExit("watchers did not start (see above)")
        lines_before = len(publish_log.read_text().splitlines()) if publish_log.exists() else 0
        cpu_before, wall_before = _cpu_seconds(server.pid), time.monotonic()
        filter_latency, prioritize_latency = _load(http_port, filter_body, prioritize_body,
                                                   duration)
        cpu = _cpu_seconds(server.pid) - cpu_before
        wall = time.monotonic() - wall_before
        lines_after = len(publish_log.read_text().splitlines()) if publish_log.exists() else 0
        outcome = Outcome(name, n_grpc + n_spread, n_http, lines_after - lines_before,
                          filter_latency, prioritize_latency,
                          server_cpu_percent=100 * cpu / wall,
                          server_cpu_ms_per_cycle=1e3 * cpu / max(filter_latency.requests, 1))
        if watchers is not None:
            _stop(watchers)
            got = json.loads(received_file.read_text())
            delays = sorted(_delays(publish_log, got["grpc"] + got["http"]))
            outcome.watch_delivered = len(delays)
            outcome.watch_expected = outcome.publishes * (n_grpc + n_http)
            ms = summarize(delays, 1e3)
            outcome.watch_p50_ms, outcome.watch_p99_ms = ms.p50, ms.p99
            outcome.watch_max_ms = ms.max
        return outcome
    finally:
        if watchers is not None:
            _stop(watchers)
        _stop(server)


TABLE = ("scenario", "watchers (gRPC + HTTP)", "changes", "filter p50 / p99 ms",
         "prioritize p50 / p99 ms", "cycles/s", "server CPU ms/cycle",
         "Watch delay p50 / p99 / max ms")


def _table(outcomes: Sequence[Outcome]) -> str:
    rows = []
    for o in outcomes:
        watch = (f"{o.watch_p50_ms:.1f} / {o.watch_p99_ms:.1f} / {o.watch_max_ms:.1f} "
                 f"({o.watch_delivered} of {o.watch_expected})" if o.watchers_grpc else "-")
        rows.append((o.scenario, f"{o.watchers_grpc} + {o.watchers_http}", str(o.publishes),
                     f"{o.filter.p50_ms:.2f} / {o.filter.p99_ms:.2f}",
                     f"{o.prioritize.p50_ms:.2f} / {o.prioritize.p99_ms:.2f}",
                     f"{o.filter.per_s:.0f}", f"{o.server_cpu_ms_per_cycle:.2f}", watch))
    return markdown_table(TABLE, rows)


def _options(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--watchers", default="1000",
                        help="comma-separated numbers of watchers (see the scenarios)")
    parser.add_argument("--rate", type=float, default=5.0, help="changes per second")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per scenario")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the scenarios this many times, interleaved; the table "
                             "shows each scenario's median run (by filter p99)")
    parser.add_argument("--json", type=Path, help="write the results here")
    return parser.parse_args(args)


def _run_all(options: argparse.Namespace) -> list[Outcome]:
    """Every scenario, ``--repeat`` times, interleaved."""
    counts = [int(n) for n in options.watchers.split(",") if n]
    snapshot = cluster_snapshot(options.nodes)
    names = request_node_names(snapshot)
    snapshot["items"] += _small_clusters(max(counts, default=0), snapshot_node_names(snapshot))
    gpu = snapshot_gpu_node_names(snapshot)
    floor_pod = ray_worker_pod(FLOOR_GROUP)
    bodies = {"filter_body": extender_args(floor_pod, names),
              "prioritize_body": extender_args(floor_pod, [n for n in names if n not in gpu])}
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="raygate-bench-") as tmp:
        work = Path(tmp)
        snapshot_file = work / "cluster.json"
        snapshot_file.write_text(json.dumps(snapshot))
        plan = [("idle", 0, 0.0), ("changes", 0, options.rate)]
        plan += [(kind, n, options.rate) for n in counts for kind in ("spread", "same")]
        for name, n_watchers, rate in plan * options.repeat:
            print(f"{name}: {n_watchers} watchers, {rate:g} changes/s, {options.nodes} nodes, "
                  f"{options.duration:g} s ...", file=sys.stderr, flush=True)
            outcome = run_scenario(name, snapshot_file, work, n_watchers=n_watchers, rate=rate,
                                   duration=options.duration, **bodies)
            outcomes.append(outcome)
            if outcome.watch_expected and (
                    outcome.watch_delivered < 0.9 * outcome.watch_expected):
                print(f"  watchers got {outcome.watch_delivered} of ~"
                      f"{outcome.watch_expected} changes", file=sys.stderr)
    return outcomes


def _medians(outcomes: list[Outcome]) -> list[Outcome]:
    """Each scenario's median run, by filter p99."""
    runs: dict[tuple[str, int], list[Outcome]] = {}
    for outcome in outcomes:
        runs.setdefault((outcome.scenario, outcome.watchers_grpc), []).append(outcome)
    return [sorted(group, key=lambda o: o.filter.p99_ms)[len(group) // 2]
            for group in runs.values()]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["_serve"]:
        serve(Path(args[1]), int(args[2]), int(args[3]), float(args[4]), Path(args[5]))
        return 0
    if args[:1] == ["_watch"]:
        pin(1)
        asyncio.run(watch((int(args[1]), int(args[2])),
                          (int(args[3]), int(args[4]), int(args[5])), Path(args[6])))
        return 0
    options = _options(args)
    pin(1)
    outcomes = _run_all(options)
    print(_table(_medians(outcomes)))
    if options.json:
        write_json(options.json, {
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                        "platform": platform.platform()},
            "options": {k: (str(v) if isinstance(v, Path) else v)
                        for k, v in vars(options).items()},
            "outcomes": [asdict(o) for o in outcomes]}, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
