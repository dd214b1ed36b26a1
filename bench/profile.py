"""Where raygate's time goes in-process: cProfile over filter and prioritize.

Runs each verb many times on the benchmark payloads (the same bytes as the HTTP
benchmarks) and prints, per verb and size, the functions with the most own time in µs
per request; cProfile's overhead inflates small functions, so read shares, not totals
(the totals without the profiler are the ``test_verb_*`` micro-benchmarks).

    python -m bench.profile [--names 500,5000] [--nodelist 500] [--seconds 2] [--top 12]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from collections.abc import Callable, Sequence

from bench.payloads import (
    FLOOR_GROUP,
    OVERFLOW_GROUP,
    cluster_snapshot,
    extender_args,
    node_list_args,
    node_with_status,
    ray_worker_pod,
    request_node_names,
)
from bench.scenarios import CLUSTER_NODES
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot_files import load_text
from raygate.server.fronts.scheduler import SchedulerExtender

__all__ = ["main", "profile_calls"]


def profile_calls(fn: Callable[[bytes], bytes], body: bytes, seconds: float,
                  top: int) -> tuple[float, int, list[tuple[str, float, float]]]:
    """(µs per call without the profiler, calls profiled, [(function, own µs per call,
    cumulative µs per call)] by own time)."""
    fn(body)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds / 2 or calls < 5:
        fn(body)
        calls += 1
    plain_us = (time.perf_counter() - t0) * 1e6 / calls
    profiler = cProfile.Profile()
    profiled, t0 = 0, time.perf_counter()
    profiler.enable()
    while time.perf_counter() - t0 < seconds / 2 or profiled < 5:
        fn(body)
        profiled += 1
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]] = (
        stats.stats)  # type: ignore[attr-defined]
    for (file, line, name), (_cc, _nc, tottime, cumtime, _callers) in raw.items():
        where = f"{file.rsplit('/site-packages/', 1)[-1].rsplit('/main/', 1)[-1]}:{line}"
        label = f"{name} ({where})" if file != "~" else name
        rows.append((label, tottime * 1e6 / profiled, cumtime * 1e6 / profiled))
    rows.sort(key=lambda r: r[1], reverse=True)
    return plain_us, profiled, rows[:top]


def _counts(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--names", type=_counts, default=[500, 5000])
    parser.add_argument("--nodelist", type=_counts, default=[500])
    parser.add_argument("--seconds", type=float, default=2.0, help="per verb and size")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    objects = cluster_snapshot(CLUSTER_NODES)
    snapshot = build_snapshot(load_text(json.dumps(objects), "bench"), PolicyConfig())
    cache = ClusterCache(snapshot.config, "bench")
    cache.publish(snapshot)
    scheduler = SchedulerExtender(cache)
    names = request_node_names(objects)
    nodes = [node_with_status(o) for o in objects["items"] if o["kind"] == "Node"]
    floor, overflow = ray_worker_pod(FLOOR_GROUP), ray_worker_pod(OVERFLOW_GROUP)
    cases: list[tuple[str, Callable[[bytes], bytes], bytes]] = []
    for n in args.names:
        cases.append((f"filter, {n} names (floor pod)", scheduler.filter,
                      extender_args(floor, names[:n])))
        cases.append((f"prioritize, {n} names (overflow pod)", scheduler.prioritize,
                      extender_args(overflow, names[:n])))
    for n in args.nodelist:
        cases.append((f"filter, NodeList of {n} (floor pod)", scheduler.filter,
                      node_list_args(floor, nodes[:n])))
        cases.append((f"prioritize, NodeList of {n} (overflow pod)", scheduler.prioritize,
                      node_list_args(overflow, nodes[:n])))
    for title, fn, body in cases:
        plain, calls, rows = profile_calls(fn, body, args.seconds, args.top)
        print(f"\n{title}: {plain:,.0f} µs per call without the profiler "
              f"({len(body):,} B body; {calls} calls profiled)")
        width = max(len(r[0]) for r in rows)
        print(f"  {'function':<{width}}  {'own µs':>8}  {'cum µs':>8}")
        for label, own, cum in rows:
            print(f"  {label:<{width}}  {own:>8,.1f}  {cum:>8,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
