"""End-to-end latency of raygate's kube-scheduler extender over HTTP.

For each node count this writes a snapshot (``bench.payloads``), starts ``raygate serve``
on free loopback ports, checks that filter and prioritize answer correctly, then measures

* ``healthz``    ``GET /healthz``: the empty round trip (server + client floor);
* ``filter``     ``POST /scheduler/filter`` for a pending *floor* worker (group
  ``baseline``): every GPU node refused, CPU and unknown nodes pass;
* ``prioritize`` ``POST /scheduler/prioritize`` for a pending *overflow* worker: CPU
  nodes 10, GPU nodes 0, unknown nodes left out;
* ``cycle``      what kube-scheduler does for one pod: filter the floor pod over all the
  names, then prioritize it over the names that passed, back to back on one connection.

Requests carry every node name of the snapshot plus ~1% names raygate does not know.
Measurements use ``wrk`` when it is on PATH (one thread, ``--connections`` keep-alive
connections, a generated Lua script; percentiles from its ``done()`` hook), else a
sequential Python keep-alive client (one connection), and the table says which. wrk
times requests, not pairs, so with wrk the cycle is measured twice: by wrk for the
throughput (``ms/pod`` = the mean time of a filter plus a prioritize on one connection)
and by the Python client for the per-pod percentiles.

Run::

    .venv/bin/python -m bench.http_extender [--nodes 500,5000] [--duration 5]
        [--connections 1] [--json OUT] [--no-wrk] [--install-wrk]

Exits non-zero, with the reason, when the server answers wrongly, fails a request or
logs an error. Everything listens and connects on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.payloads import (
    FLOOR_GROUP,
    OVERFLOW_GROUP,
    cluster_snapshot,
    extender_args,
    gpu_node_count,
    ray_worker_pod,
    request_node_names,
    snapshot_gpu_node_names,
)

__all__ = ["BenchError", "Result", "main"]

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 180.0
"""Loading a 5,000-node snapshot takes seconds; give slow machines room."""
STOP_GRACE_S = 10.0
WARMUP_REQUESTS = 20
MAX_SAMPLES = 5_000_000
"""Bound on the Python client's loop, whatever the duration."""
JSON_HEADERS = {"Content-Type": "application/json"}


class BenchError(RuntimeError):
    """The server misbehaved or the benchmark could not run; the message says how."""


# --- one server process -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """``raygate serve --snapshot FILE`` as a child process on loopback ports."""

    def __init__(self, snapshot: Path, log: Path) -> None:
        self.snapshot = snapshot
        self.log_path = log
        self.port = free_port()
        self.grpc_port = free_port()
        while self.grpc_port == self.port:
            self.grpc_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.ready_after_s = 0.0
        self.exit_code: int | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "extender", "serve", "--snapshot", str(self.snapshot),
               "--http-addr", f"{HOST}:{self.port}", "--grpc-addr", f"{HOST}:{self.grpc_port}",
               "--log-level", "info"]
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        deadline = started + READY_TIMEOUT_S
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"raygate exited with {self.proc.returncode} before it was "
                                 f"ready:\n{self.log_tail()}")
            try:
                status, _ = request(self.port, "GET", "/readyz", None, timeout=2.0)
            except OSError:
                status = 0
            if status == 200:
                self.ready_after_s = time.perf_counter() - started
                return
            time.sleep(0.05)
        raise BenchError(f"raygate not ready after {READY_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_GRACE_S``."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            print(f"  raygate (pid {proc.pid}) ignored SIGTERM for {STOP_GRACE_S:.0f}s; killing",
                  file=sys.stderr)
            proc.kill()
            self.exit_code = proc.wait(timeout=STOP_GRACE_S)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_problems(self) -> list[str]:
        """Log lines at WARNING or above, and tracebacks."""
        return [line for line in self.log_text().splitlines()
                if " WARNING " in line or " ERROR " in line or " CRITICAL " in line
                or line.startswith("Traceback")]


def request(
    port: int, method: str, path: str, body: bytes | None, timeout: float = 30.0
) -> tuple[int, bytes]:
    """One request on a fresh connection (for checks, not for timing)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=JSON_HEADERS if body is not None else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# --- workload ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    method: str
    path: str
    body: bytes | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: tuple[Step, ...]
    """Requests of one unit (one pod for ``cycle``), sent in order."""


@dataclass(frozen=True)
class Workload:
    nodes: int
    names: list[str]
    gpu: frozenset[str]
    floor_body: bytes
    overflow_body: bytes
    passed_body: bytes
    """The floor pod with the names that pass filter: what kube-scheduler prioritizes."""

    def scenarios(self) -> list[Scenario]:
        return [
            Scenario("healthz", (Step("GET", "/healthz"),)),
            Scenario("filter", (Step("POST", "/scheduler/filter", self.floor_body),)),
            Scenario("prioritize", (Step("POST", "/scheduler/prioritize", self.overflow_body),)),
            Scenario("cycle", (Step("POST", "/scheduler/filter", self.floor_body),
                               Step("POST", "/scheduler/prioritize", self.passed_body))),
        ]


def build_workload(n_nodes: int) -> tuple[dict[str, Any], Workload]:
    snapshot = cluster_snapshot(n_nodes)
    names = request_node_names(snapshot)
    gpu = snapshot_gpu_node_names(snapshot)
    if len(gpu) != gpu_node_count(n_nodes):
        raise BenchError(f"payload bug: {len(gpu)} GPU nodes, expected "
                         f"{gpu_node_count(n_nodes)}")
    floor_pod = ray_worker_pod(FLOOR_GROUP)
    workload = Workload(
        nodes=n_nodes,
        names=names,
        gpu=gpu,
        floor_body=extender_args(floor_pod, names),
        overflow_body=extender_args(ray_worker_pod(OVERFLOW_GROUP), names),
        passed_body=extender_args(floor_pod, [n for n in names if n not in gpu]),
    )
    return snapshot, workload


# --- correctness ------------------------------------------------------------------------


def _decode(body: bytes, what: str) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise BenchError(f"{what}: reply is not JSON ({exc}): {body[:200]!r}") from None


def _first_diff(got: Sequence[Any], want: Sequence[Any]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"first difference at [{i}]: got {g!r}, want {w!r}"
    return f"lengths differ: got {len(got)}, want {len(want)}"


def verify(port: int, w: Workload, known: set[str]) -> list[str]:
    """Check every reply the benchmark relies on; raise ``BenchError`` on a wrong answer.
    Returns notes on harmless deviations."""
    notes: list[str] = []
    status, body = request(port, "GET", "/healthz", None)
    if status != 200 or _decode(body, "healthz") != {"status": "ok"}:
        raise BenchError(f"GET /healthz: {status} {body[:200]!r}")

    # Filter, floor pod: GPU nodes refused (unresolvable), the rest pass in input order.
    status, body = request(port, "POST", "/scheduler/filter", w.floor_body)
    what = f"filter (floor pod, {len(w.names)} names)"
    if status != 200:
        raise BenchError(f"{what}: HTTP {status}: {body[:300]!r}")
    reply = _decode(body, what)
    if reply.get("Error"):
        raise BenchError(f"{what}: Error {reply['Error']!r}")
    want_passed = [n for n in w.names if n not in w.gpu]
    if reply.get("NodeNames") != want_passed:
        raise BenchError(f"{what}: NodeNames wrong; "
                         + _first_diff(reply.get("NodeNames") or [], want_passed))
    refused = reply.get("FailedAndUnresolvableNodes") or {}
    want_refused = {n for n in w.names if n in w.gpu}
    if set(refused) != want_refused:
        missing, extra = want_refused - set(refused), set(refused) - want_refused
        raise BenchError(f"{what}: FailedAndUnresolvableNodes wrong: {len(missing)} GPU nodes "
                         f"missing (e.g. {sorted(missing)[:3]}), {len(extra)} extra "
                         f"(e.g. {sorted(extra)[:3]})")
    bad = [n for n, m in refused.items() if not str(m).startswith("raygate:")]
    if bad:
        raise BenchError(f"{what}: refusal messages without the raygate prefix, e.g. "
                         f"{refused[bad[0]]!r}")
    if reply.get("FailedNodes"):
        raise BenchError(f"{what}: FailedNodes should be empty, got "
                         f"{len(reply['FailedNodes'])} entries")
    if reply.get("Nodes") is not None:
        raise BenchError(f"{what}: Nodes should be null for a NodeNames request")

    # Filter, overflow pod: surplus prefers CPU but may use GPU nodes: everything passes.
    status, body = request(port, "POST", "/scheduler/filter", w.overflow_body)
    what = "filter (overflow pod)"
    reply = _decode(body, what)
    if status != 200 or reply.get("Error") or reply.get("NodeNames") != w.names:
        raise BenchError(f"{what}: every name should pass; got HTTP {status}, "
                         f"Error {reply.get('Error')!r}, "
                         f"{len(reply.get('NodeNames') or [])} of {len(w.names)} names")
    if reply.get("FailedAndUnresolvableNodes") or reply.get("FailedNodes"):
        raise BenchError(f"{what}: nothing should fail")

    # Prioritize: CPU 10, GPU 0, unknown names absent.
    for label, body_in, names in (("overflow pod", w.overflow_body, w.names),
                                  ("floor pod, names passed by filter", w.passed_body,
                                   want_passed)):
        what = f"prioritize ({label})"
        status, body = request(port, "POST", "/scheduler/prioritize", body_in)
        if status != 200:
            raise BenchError(f"{what}: HTTP {status}: {body[:300]!r}")
        got = _decode(body, what)
        if not isinstance(got, list):
            raise BenchError(f"{what}: expected a JSON array, got {type(got).__name__}")
        want = [{"Host": n, "Score": 0 if n in w.gpu else 10} for n in names if n in known]
        if got != want:
            got_map = {e.get("Host"): e.get("Score") for e in got if isinstance(e, dict)}
            want_map = {e["Host"]: e["Score"] for e in want}
            if got_map == want_map and len(got) == len(want):
                notes.append(f"{what}: right scores, not in input order")
            else:
                raise BenchError(f"{what}: wrong scores; " + _first_diff(got, want))
    return notes


# --- measuring: wrk ---------------------------------------------------------------------

_LUA = """-- generated by bench/http_extender.py: {scenario}
local steps = {{
{steps}
}}
local reqs = {{}}
local n = 0

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  return data
end

function init(args)
  for i, s in ipairs(steps) do
    local headers = {{ ["Host"] = wrk.headers["Host"] }}
    local body = nil
    if s.file then
      body = slurp(s.file)
      headers["Content-Type"] = "application/json"
    end
    reqs[i] = wrk.format(s.method, s.path, headers, body)
  end
end

function request()
  n = n + 1
  return reqs[((n - 1) % #reqs) + 1]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RAYGATE_BENCH {{\\"requests\\":%.0f,\\"duration_us\\":%.0f,\\"bytes\\":%.0f," ..
    "\\"connect\\":%.0f,\\"read\\":%.0f,\\"write\\":%.0f,\\"status\\":%.0f,\\"timeout\\":%.0f," ..
    "\\"p50\\":%.0f,\\"p90\\":%.0f,\\"p99\\":%.0f,\\"p999\\":%.0f,\\"mean\\":%.3f," ..
    "\\"min\\":%.0f,\\"max\\":%.0f}}\\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.min, latency.max))
end
"""


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wrk_script(scenario: Scenario, workdir: Path) -> Path:
    lines = []
    for i, step in enumerate(scenario.steps):
        file = "nil"
        if step.body is not None:
            path = workdir / f"{scenario.name}-{i}.json"
            path.write_bytes(step.body)
            file = _lua_string(str(path))
        lines.append(f"  {{ method = {_lua_string(step.method)}, "
                     f"path = {_lua_string(step.path)}, file = {file} }},")
    script = workdir / f"{scenario.name}.lua"
    script.write_text(_LUA.format(scenario=scenario.name, steps="\n".join(lines)),
                      encoding="utf-8")
    return script


def wrk_version(wrk: str) -> str:
    out = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10, check=False)
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0].split(" Copyright")[0] if first else "wrk (unknown version)"


@dataclass
class Result:
    scenario: str
    nodes: int
    names: int
    tool: str
    connections: int
    requests: int
    duration_s: float
    req_s: float
    p50_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None
    mean_us: float | None = None
    max_us: float | None = None
    ms_per_pod: float | None = None
    """Mean wall time of one unit on one connection (filter + prioritize for ``cycle``)."""
    body_bytes: list[int] = field(default_factory=list)
    other_cpu_pct: float | None = None
    """CPU used by processes other than raygate and the client while measuring, in % of
    all CPUs (Linux only): above a few % the numbers are noisy."""
    note: str = ""


# --- noise: CPU used by everything else -------------------------------------------------

NOISY_PCT = 10.0


def _system_busy_ticks() -> int | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return user + nice + system + irq + softirq + steal


def _process_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            after_name = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(after_name[11]) + int(after_name[12])  # utime, stime


class CpuMeter:
    """Busy CPU of the whole machine minus that of raygate, this process and its reaped
    children (wrk), over one measurement."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._start = self._sample()

    def _sample(self) -> tuple[int, int, float, float] | None:
        busy, server = _system_busy_ticks(), _process_ticks(self.server_pid)
        if busy is None or server is None:
            return None
        t = os.times()
        own = (t.user + t.system + t.children_user + t.children_system) * self.hz
        return busy, server, own, time.monotonic()

    def other_pct(self) -> float | None:
        end = self._sample()
        if self._start is None or end is None:
            return None
        busy, server, own = (end[i] - self._start[i] for i in range(3))
        seconds = end[3] - self._start[3]
        if seconds <= 0:
            return None
        other = max(0.0, busy - server - own)
        return round(100.0 * other / (seconds * self.hz * (os.cpu_count() or 1)), 1)


def run_wrk(wrk: str, port: int, scenario: Scenario, workload: Workload, *, duration: int,
            connections: int, workdir: Path) -> Result:
    script = wrk_script(scenario, workdir)
    cmd = [wrk, "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "--timeout", "10s",
           "-s", str(script), f"http://{HOST}:{port}{scenario.steps[0].path}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60,
                         check=False)
    if out.returncode != 0:
        raise BenchError(f"wrk failed ({out.returncode}): {out.stderr.strip() or out.stdout}")
    stats: dict[str, float] | None = None
    for line in out.stdout.splitlines():
        if line.startswith("RAYGATE_BENCH "):
            stats = json.loads(line.removeprefix("RAYGATE_BENCH "))
    if stats is None:
        raise BenchError(f"wrk printed no RAYGATE_BENCH line:\n{out.stdout}\n{out.stderr}")
    errors = {k: int(stats[k]) for k in ("connect", "read", "write", "status", "timeout")
              if stats[k]}
    if errors:
        raise BenchError(f"wrk {scenario.name}: errors {errors} (status = non-2xx replies)\n"
                         f"{out.stdout}")
    requests = int(stats["requests"])
    if requests == 0:
        raise BenchError(f"wrk {scenario.name}: no request completed\n{out.stdout}")
    seconds = stats["duration_us"] / 1e6
    req_s = requests / seconds
    per_unit = len(scenario.steps)
    result = Result(
        scenario=scenario.name, nodes=workload.nodes, names=len(workload.names), tool="wrk",
        connections=connections, requests=requests, duration_s=round(seconds, 3),
        req_s=req_s, ms_per_pod=connections * per_unit * 1000.0 / req_s,
        body_bytes=[len(s.body or b"") for s in scenario.steps],
    )
    if per_unit == 1:
        result.p50_us, result.p99_us = stats["p50"], stats["p99"]
        result.p999_us, result.mean_us, result.max_us = stats["p999"], stats["mean"], stats["max"]
        result.ms_per_pod = None
    else:
        result.note = "wrk alternates the requests; ms/pod = mean pair time per connection"
    return result


# --- measuring: the Python client -------------------------------------------------------


def percentile(sorted_ns: Sequence[int], q: float) -> float:
    """Nearest-rank percentile of sorted samples, in µs."""
    rank = max(1, min(len(sorted_ns), -(-int(q * len(sorted_ns)) // 100)))
    return sorted_ns[rank - 1] / 1000.0


def run_python(port: int, scenario: Scenario, workload: Workload, duration: float) -> Result:
    """One keep-alive connection, requests back to back, each unit timed with
    ``perf_counter_ns`` from sending the first request to reading the last reply."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    steps = [(s.method, s.path, s.body, JSON_HEADERS if s.body is not None else {})
             for s in scenario.steps]
    clock = time.perf_counter_ns
    samples: list[int] = []
    try:
        deadline = clock() + int(duration * 1e9)
        started = clock()
        while len(samples) < MAX_SAMPLES:
            t0 = clock()
            for method, path, body, headers in steps:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise BenchError(f"{scenario.name}: {method} {path}: HTTP {response.status}")
            t1 = clock()
            samples.append(t1 - t0)
            if t1 >= deadline:
                break
        elapsed = (clock() - started) / 1e9
    finally:
        conn.close()
    samples.sort()
    units = len(samples)
    result = Result(
        scenario=scenario.name, nodes=workload.nodes, names=len(workload.names),
        tool="python", connections=1, requests=units * len(steps),
        duration_s=round(elapsed, 3), req_s=units * len(steps) / elapsed,
        p50_us=percentile(samples, 50), p99_us=percentile(samples, 99),
        p999_us=percentile(samples, 99.9), mean_us=sum(samples) / units / 1000.0,
        max_us=samples[-1] / 1000.0,
        body_bytes=[len(s.body or b"") for s in scenario.steps],
    )
    if len(steps) > 1:
        result.ms_per_pod = result.mean_us / 1000.0 if result.mean_us else None
        result.note = "percentiles per pod (filter + prioritize)"
    return result


def warm_up(port: int, scenario: Scenario) -> None:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        for _ in range(WARMUP_REQUESTS):
            for step in scenario.steps:
                conn.request(step.method, step.path, body=step.body,
                             headers=JSON_HEADERS if step.body is not None else {})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise BenchError(f"warm-up {step.method} {step.path}: HTTP "
                                     f"{response.status}")
    finally:
        conn.close()


# --- driver -----------------------------------------------------------------------------


def find_wrk(no_wrk: bool, install: bool) -> tuple[str | None, str]:
    """The wrk binary, or None with the reason the fallback is used."""
    if no_wrk:
        return None, "--no-wrk given"
    wrk = shutil.which("wrk")
    if wrk:
        return wrk, ""
    if not install:
        return None, "wrk is not on PATH (apt-get install wrk, or pass --install-wrk as root)"
    if os.geteuid() != 0:
        return None, "wrk is not on PATH and --install-wrk needs root"
    print("installing wrk: apt-get install -y wrk", flush=True)
    cmd = ["apt-get", "install", "-y", "-q", "wrk"]
    if subprocess.run(cmd, check=False, timeout=600).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], check=False, timeout=600)
        subprocess.run(cmd, check=False, timeout=600)
    wrk = shutil.which("wrk")
    return (wrk, "") if wrk else (None, "apt-get install wrk failed")


def bench_nodes(n_nodes: int, args: argparse.Namespace, wrk: str | None,
                workdir: Path) -> tuple[list[Result], dict[str, Any]]:
    snapshot, workload = build_workload(n_nodes)
    path = workdir / f"snapshot-{n_nodes}.json"
    path.write_text(json.dumps(snapshot, separators=(",", ":")), encoding="utf-8")
    known = {o["metadata"]["name"] for o in snapshot["items"] if o["kind"] == "Node"}
    info: dict[str, Any] = {
        "nodes": n_nodes, "gpu_nodes": len(workload.gpu), "names": len(workload.names),
        "unknown_names": len(workload.names) - n_nodes, "snapshot_bytes": path.stat().st_size,
        "filter_body_bytes": len(workload.floor_body),
        "prioritize_body_bytes": len(workload.overflow_body),
    }
    print(f"\n{n_nodes} nodes ({len(workload.gpu)} GPU), {len(workload.names)} names in each "
          f"request ({info['unknown_names']} unknown); snapshot {info['snapshot_bytes']:,} B, "
          f"filter body {len(workload.floor_body):,} B", flush=True)
    server = Server(path, workdir / f"raygate-{n_nodes}.log")
    results: list[Result] = []
    try:
        server.start()
        info["ready_after_s"] = round(server.ready_after_s, 2)
        print(f"  raygate ready after {server.ready_after_s:.1f}s "
              f"(http {HOST}:{server.port}, pid {server.pid})",
              flush=True)
        notes = verify(server.port, workload, known)
        for note in notes:
            print(f"  note: {note}")
        print("  replies verified: filter refuses exactly the GPU nodes, prioritize scores "
              "CPU 10 / GPU 0 / unknown absent", flush=True)
        for scenario in workload.scenarios():
            warm_up(server.port, scenario)
            runs: list[Result] = []
            if wrk is not None:
                meter = CpuMeter(server.pid)
                runs.append(run_wrk(wrk, server.port, scenario, workload,
                                    duration=args.duration, connections=args.connections,
                                    workdir=workdir))
                runs[-1].other_cpu_pct = meter.other_pct()
            if wrk is None or len(scenario.steps) > 1:
                meter = CpuMeter(server.pid)
                runs.append(run_python(server.port, scenario, workload, args.duration))
                runs[-1].other_cpu_pct = meter.other_pct()
            for result in runs:
                print("  " + format_row(result), flush=True)
            results.extend(runs)
        # The same answers after the load as before it.
        verify(server.port, workload, known)
    finally:
        server.stop()
        info["exit_code"] = server.exit_code
        problems = server.log_problems()
        info["log_problems"] = problems
    if problems:
        raise BenchError(f"raygate logged {len(problems)} warning(s)/error(s) at {n_nodes} "
                         "nodes:\n  " + "\n  ".join(problems[:10]))
    # uvicorn re-raises the SIGTERM it handled once it has shut down: -15 is a clean stop.
    if server.exit_code not in (0, -signal.SIGTERM):
        raise BenchError(f"raygate exited with {server.exit_code} on SIGTERM:\n"
                         f"{server.log_tail()}")
    return results, info


COLUMNS = ("scenario", "nodes", "names", "p50 µs", "p99 µs", "p99.9 µs", "req/s", "ms/pod",
           "other%", "tool")
WIDTHS = (10, 6, 6, 9, 9, 9, 9, 7, 6, 6)
LEFT = (0, 9)


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_row(r: Result) -> str:
    cells = (r.scenario, str(r.nodes), str(r.names), _num(r.p50_us), _num(r.p99_us),
             _num(r.p999_us), _num(r.req_s), _num(r.ms_per_pod, 3), _num(r.other_cpu_pct, 1),
             r.tool)
    return "  ".join(c.ljust(w) if i in LEFT else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, WIDTHS, strict=True)))


def format_table(results: Sequence[Result]) -> str:
    header = "  ".join(c.ljust(w) if i in LEFT else c.rjust(w)
                       for i, (c, w) in enumerate(zip(COLUMNS, WIDTHS, strict=True)))
    lines = [header, "-" * len(header)]
    lines.extend(format_row(r) for r in results)
    return "\n".join(lines)


def _node_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None
    if not counts or any(c < 1 for c in counts):
        raise argparse.ArgumentTypeError(f"node counts must be >= 1, got {text!r}")
    return counts


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.http_extender",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=_node_counts, default=[500, 5000],
                        help="comma-separated node counts (default 500,5000)")
    parser.add_argument("--duration", type=_positive, default=5,
                        help="seconds per scenario (default 5)")
    parser.add_argument("--connections", type=_positive, default=1,
                        help="wrk keep-alive connections (default 1; the Python client uses 1)")
    parser.add_argument("--json", metavar="OUT", type=Path, help="also write the results here")
    parser.add_argument("--no-wrk", action="store_true",
                        help="use the Python client even when wrk is installed")
    parser.add_argument("--install-wrk", action="store_true",
                        help="apt-get install wrk if it is missing (root only)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wrk, why = find_wrk(args.no_wrk, args.install_wrk)
    tool = wrk_version(wrk) if wrk else f"Python http.client fallback ({why})"
    print(f"raygate HTTP extender benchmark: {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, {args.duration}s per scenario")
    print(f"client: {tool}")
    if wrk is None:
        print("NOTE: the Python fallback client is used: latencies include ~0.1-0.3 ms of "
              "client overhead per request; one connection, sequential.")
        if args.connections != 1:
            print(f"NOTE: --connections {args.connections} ignored by the Python client")
    results: list[Result] = []
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="raygate-bench-") as tmp:
            for n_nodes in args.nodes:
                found, info = bench_nodes(n_nodes, args, wrk, Path(tmp))
                results.extend(found)
                runs.append(info)
    except BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    print(f"\n{format_table(results)}")
    print(f"\ntool: {tool}; connections: {args.connections if wrk else 1}; "
          f"total {time.perf_counter() - started:.0f}s")
    print("other% = CPU used by other processes while measuring, in % of all CPUs")
    noisy = [r for r in results if (r.other_cpu_pct or 0.0) > NOISY_PCT]
    if noisy:
        print(f"WARNING: other processes used more than {NOISY_PCT:.0f}% of the CPUs during "
              f"{len(noisy)} of {len(results)} measurements: those numbers are noisy; rerun on "
              "an idle machine.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "client": tool,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "duration_s": args.duration,
            "connections": args.connections if wrk else 1,
            "runs": runs,
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
