"""What ``bench.scheduler_throughput`` measured: one ``Run`` per contender and run, the
quantiles read from kube-scheduler's histograms and from the bench's own pod clock
(``bench.scheduler_clock``), and the summary tables, the goal of issue #26 and the plot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.measure import reuse_counts
from bench.reporter import markdown_table
from bench.scheduler_clock import LABEL_RULE, BurstClock, Sent, latencies
from bench.scheduler_cost import (
    NAN2,
    WEBHOOK_NAME,
    WEBHOOK_SECONDS,
    Cost,
    delta_mean,
    delta_quantiles,
    histograms,
)
from bench.stats import histogram_quantile as quantile
from bench.stats import median, p50_p99

__all__ = ["CONTENDERS", "GATE_SECONDS", "NATIVE", "WEBHOOK_NAME", "WEBHOOK_SECONDS", "Run",
           "cost_table", "delta_mean", "delta_quantiles", "describe", "goal", "histograms",
           "markdown", "marks_wrong", "measured", "plot", "reuse_share", "summarise"]

CONTENDERS = ("none", "empty", "go-peer", "raygate", "raygate-native")
NATIVE = "raygate-native"
GOAL_KEPT = 0.95
"""Issue #26: raygate's native rules keep this share of the no-extender pods/s..."""
GOAL_P99_MS = 50.0
"""...and add at most this to the creation→bind p99 (5,000 nodes, a 1,000-pod burst)."""
GATE_SECONDS = "raygate_placement_gate_seconds"


@dataclass
class Run:
    nodes: int
    contender: str
    run: int
    pods: int
    seconds: float
    """From the first create sent to the last pod bound."""
    pods_per_second: float
    """``pods`` / ``seconds``."""
    attempt_p50_ms: float
    attempt_p99_ms: float
    algorithm_p50_ms: float
    algorithm_p99_ms: float
    extension_points: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Extension point to its (p50, p99) in ms."""
    floor_on_gpu: int = 0
    overflow_on_gpu: int = 0
    prioritize_reuse: float = math.nan
    """raygate's prioritize requests answered with filter's decision (its
    ``raygate_decision_reuse_total``), a share; NaN for the others."""
    created_per_second: float = math.nan
    """``pods`` / (the last pod ADDED - the first create sent): the burst's own rate."""
    bind_span_per_second: float = math.nan
    """(``pods`` - 1) / (the last bind - the first): kube-scheduler's rate once binding."""
    create_ms: tuple[float, float] = NAN2
    """The create calls' (p50, p99), as this driver waited for them (the webhook's
    call included)."""
    bind_ms: tuple[float, float] = NAN2
    """(p50, p99) from a pod ADDED to bound, by the bench's watch."""
    release_ms: tuple[float, float] = NAN2
    """Gated pods: (p50, p99) from ADDED to the gate gone, by the bench's watch."""
    gate_ms: tuple[float, float] = NAN2
    """raygate's ``raygate_placement_gate_seconds`` during the run, (p50, p99); its
    buckets end at 2.5 s (a quantile beyond reads 2,500)."""
    gate_mean_ms: float = math.nan
    """The same histogram's mean (its ``_sum`` / ``_count``), whatever the buckets."""
    started: str = ""
    """The first create's wall-clock time (UTC, ISO 8601): to find the run in the logs."""
    timeline: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Phase (added, released, bound) to its (first, last) pod, seconds after the first
    create sent: where a slow run's time went."""
    gated: int = 0
    """Pods the bench's watch first saw with raygate's gate."""
    rules: dict[str, int] = field(default_factory=dict)
    """Pods by their label ``raygate.io/rule`` after the burst ("" for none)."""
    cost: Cost = field(default_factory=Cost)
    """API writes, CPU and the webhook's time over the burst (``bench.scheduler_cost``)."""



def measured(node_count: int, contender: str, run: int, *, metrics: str,
             sent: dict[str, Sent], clock: BurstClock) -> Run:
    """A run as the bench's clock and kube-scheduler's /metrics (``metrics``) saw it."""
    count = len(sent)
    first = min(s.sent for s in sent.values())
    binds = sorted(clock.bound.values())
    attempts = histograms(metrics, "scheduler_scheduling_attempt_duration_seconds",
                          result="scheduled").get("", [])
    algorithm = histograms(metrics, "scheduler_scheduling_algorithm_duration_seconds"
                           ).get("", [])
    points = histograms(metrics, "scheduler_framework_extension_point_duration_seconds",
                        status="Success")
    return Run(
        node_count, contender, run, count, binds[-1] - first,
        count / (binds[-1] - first),
        1e3 * quantile(attempts, 0.5), 1e3 * quantile(attempts, 0.99),
        1e3 * quantile(algorithm, 0.5), 1e3 * quantile(algorithm, 0.99),
        {p: (1e3 * quantile(b, 0.5), 1e3 * quantile(b, 0.99)) for p, b in points.items()},
        created_per_second=count / (max(clock.added.values()) - first),
        bind_span_per_second=(count - 1) / (binds[-1] - binds[0]),
        create_ms=p50_p99([s.answered - s.sent for s in sent.values()], 1e3),
        bind_ms=p50_p99(latencies(clock.added, clock.bound), 1e3),
        release_ms=p50_p99(latencies(clock.added, clock.released), 1e3),
        timeline={phase: (min(at.values()) - first, max(at.values()) - first)
                  for phase, at in (("added", clock.added), ("released", clock.released),
                                    ("bound", clock.bound)) if at})


def reuse_share(before: str, after: str) -> float:
    """raygate's prioritize requests answered with filter's decision between two scrapes
    of its /metrics (``raygate_decision_reuse_total``); NaN with none asked."""
    if not before or not after:
        return math.nan
    hits0, misses0 = reuse_counts(before).get("scheduler/prioritize", (0.0, 0.0))
    hits1, misses1 = reuse_counts(after).get("scheduler/prioritize", (0.0, 0.0))
    asked = (hits1 - hits0) + (misses1 - misses0)
    return (hits1 - hits0) / asked if asked else math.nan


def marks_wrong(run: Run, released: int) -> str:
    """What is wrong with the marks raygate's webhook left on ``run``'s pods (``run.gated``
    of them gated, ``released`` of those released, ``run.rules`` their label
    ``raygate.io/rule``), or "": with ``raygate-native`` every pod labelled, decided at
    admission or gated and released; with the others none gated, none labelled."""
    unlabelled = run.rules.get("", 0)
    if run.contender == NATIVE and (unlabelled or released != run.gated):
        return (f"{unlabelled} of {run.pods} pods without {LABEL_RULE}; {released} released "
                f"of {run.gated} gated")
    if run.contender != NATIVE and (run.gated or unlabelled != run.pods):
        return (f"{run.gated} pods gated and {run.pods - unlabelled} labelled {LABEL_RULE} of "
                f"{run.pods} (expected none)")
    return ""


def describe(run: Run) -> str:
    """One run in a line, for the log as it goes."""
    spent, reuse = run.cost, run.prioritize_reuse
    cpu = " / ".join(f"{spent.cpu.get(k, math.nan):.2f}" for k in ("raygate", "kube-scheduler",
                                                                   "kube-apiserver"))
    return (f"{run.nodes} nodes, {run.contender}, run {run.run}: "
            f"{run.pods_per_second:.1f} pods/s ({run.seconds:.1f} s; created at "
            f"{run.created_per_second:.0f}/s, create call p50/p99 "
            f"{run.create_ms[0]:.0f}/{run.create_ms[1]:.0f} ms), ADDED→bound p50/p99 "
            f"{run.bind_ms[0]:.0f}/{run.bind_ms[1]:.0f} ms, floor on GPU "
            f"{run.floor_on_gpu}, overflow on GPU {run.overflow_on_gpu}, gated {run.gated}, "
            f"rules {run.rules}"
            + ("" if math.isnan(reuse) else f", prioritize reusing filter's decision "
               f"{100 * reuse:.0f} %")
            + f"; API writes per pod {spent.writers.get('total', math.nan):.2f} "
            f"({', '.join(f'{k} {v:.2f}' for k, v in spent.writes.items())}; kube-scheduler's "
            f"own count {spent.scheduler_writes:.2f}; raygate's Events "
            f"{spent.raygate_events:.3f}); CPU s per 1,000 pods raygate / "
            f"kube-scheduler / kube-apiserver {cpu}; first/last (s): "
            + ", ".join(f"{k} {a:.1f}/{b:.1f}" for k, (a, b) in run.timeline.items()))


def summarise(runs: list[Run]) -> list[dict[str, Any]]:
    """Per node count and contender: median over runs, and the cost against ``none``."""
    rows = []
    for count in sorted({r.nodes for r in runs}):
        of = {c: [r for r in runs if r.nodes == count and r.contender == c] for c in CONTENDERS}
        base = median([r.pods_per_second for r in of["none"]])
        for contender, mine in of.items():
            if not mine:
                continue
            rate = median([r.pods_per_second for r in mine])
            rows.append({
                "nodes": count, "contender": contender, "runs": len(mine),
                "pods_per_second": rate,
                "runs_pods_per_second": [round(r.pods_per_second, 1) for r in mine],
                "cost": 1 - rate / base if base else math.nan,
                **_medians(mine),
                "floor_on_gpu": max(r.floor_on_gpu for r in mine),
                "overflow_on_gpu": median([float(r.overflow_on_gpu) for r in mine]),
                "gated": median([float(r.gated) for r in mine]),
                "spent": _cost_medians([r.cost for r in mine]),
            })
    return rows


PAIRS = ("create_ms", "bind_ms", "release_ms", "gate_ms")


def _medians(mine: list[Run]) -> dict[str, Any]:
    out: dict[str, Any] = {key: median([getattr(r, key) for r in mine]) for key in (
        "attempt_p50_ms", "attempt_p99_ms", "algorithm_p50_ms", "algorithm_p99_ms",
        "prioritize_reuse", "created_per_second", "bind_span_per_second", "gate_mean_ms")}
    for point, key in (("Filter", "filter_p99_ms"), ("Score", "score_p99_ms")):
        out[key] = median([r.extension_points.get(point, NAN2)[1] for r in mine])
    for key in PAIRS:
        out[key] = tuple(median([getattr(r, key)[i] for r in mine]) for i in (0, 1))
    return out


def _by_key(dicts: list[dict[str, float]]) -> dict[str, float]:
    """The median of each key over ``dicts`` (0 where one lacks it)."""
    return {k: median([d.get(k, 0.0) for d in dicts]) for k in sorted({k for d in dicts
                                                                        for k in d})}


def _cost_medians(costs: list[Cost]) -> dict[str, Any]:
    """Each of ``Cost``'s numbers, the median over the runs (per key of its tables)."""
    out: dict[str, Any] = {key: _by_key([getattr(c, key) for c in costs])
                           for key in ("writes", "writers", "cpu")}
    for key in ("seconds", "scheduler_writes", "webhook_mean_ms", "webhook_calls",
                "raygate_webhook_mean_ms", "raygate_events"):
        out[key] = median([getattr(c, key) for c in costs])
    for key in ("webhook_ms", "raygate_webhook_ms"):
        out[key] = tuple(median([getattr(c, key)[i] for c in costs]) for i in (0, 1))
    out["raygate_webhook_source"] = costs[-1].raygate_webhook_source
    return out


def _pair(values: tuple[float, ...], digits: int = 1) -> str:
    if all(math.isnan(v) for v in values):
        return ""
    return " / ".join(f"{v:.{digits}f}" for v in values)


THROUGHPUT = ("nodes", "contender", "pods/s, first created → last bound (median; runs)", "cost",
              "attempt p50 / p99 (ms)", "algorithm p50 / p99 (ms)",
              "Filter / Score plugins p99 (ms)", "floor / overflow on GPU (of {pods})",
              "prioritize reusing filter's decision")
LATENCY = ("nodes", "contender", "created/s", "binds/s after the first",
           "create call p50 / p99 (ms)", "ADDED → released p50 / p99 (ms)",
           "ADDED → bound p50 / p99 (ms)", "p99 − none's (ms)",
           "gate held p50 / p99 / mean (ms)")


def markdown(rows: list[dict[str, Any]], pods: int) -> str:
    """The throughput table, the creation→bind table and the goal."""
    cells = []
    for r in rows:
        cost = "—" if r["contender"] == "none" else f"{100 * r['cost']:.1f} %"
        reuse = "" if math.isnan(r["prioritize_reuse"]) else f"{100 * r['prioritize_reuse']:.0f} %"
        cells.append((
            f"{r['nodes']:,}", r["contender"],
            f"{r['pods_per_second']:.1f} ({', '.join(map(str, r['runs_pods_per_second']))})",
            cost, f"{r['attempt_p50_ms']:.1f} / {r['attempt_p99_ms']:.1f}",
            f"{r['algorithm_p50_ms']:.1f} / {r['algorithm_p99_ms']:.1f}",
            f"{r['filter_p99_ms']:.2f} / {r['score_p99_ms']:.2f}",
            f"{r['floor_on_gpu']} / {r['overflow_on_gpu']:.0f}", reuse))
    header = [h.format(pods=pods) for h in THROUGHPUT]
    return (markdown_table(header, cells, "rllrllllr") + "\n\n" + latency_table(rows) + "\n"
            + cost_table(rows) + "\n" + "\n".join(goal(rows)) + "\n")


def latency_table(rows: list[dict[str, Any]]) -> str:
    none = {r["nodes"]: r for r in rows if r["contender"] == "none"}
    cells = []
    for r in rows:
        base = none.get(r["nodes"])
        grow = ("—" if base is None or r["contender"] == "none"
                else f"{r['bind_ms'][1] - base['bind_ms'][1]:+.0f}")
        cells.append((
            f"{r['nodes']:,}", r["contender"], f"{r['created_per_second']:.0f}",
            f"{r['bind_span_per_second']:.1f}", _pair(r["create_ms"]), _pair(r["release_ms"]),
            _pair(r["bind_ms"], 0), grow,
            _pair((*r["gate_ms"], r["gate_mean_ms"]), 0)))
    return markdown_table(LATENCY, cells, "rlrrlllrl") + "\n"


COST = ("nodes", "contender", "pods/s", "creation→bind p50 / p99 (ms)", "gated pods",
        "API writes per pod: all = creator + kube-scheduler + raygate + other",
        "API writes per pod by resource and verb",
        "CPU s per 1,000 pods: raygate / kube-scheduler / kube-apiserver / etcd / driver "
        "(machine)", "webhook at kube-apiserver p50 / p99 / mean (ms)",
        "webhook in raygate p50 / p99 / mean (ms)")
CPU = ("raygate", "kube-scheduler", "kube-apiserver", "etcd", "driver")


def _number(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:.2f}" if abs(value) >= 0.01 or not value else f"{value:.3f}"


def _writes(spent: dict[str, Any]) -> tuple[str, str]:
    """The writes-per-pod cells: the total and its writers, and each kind of write."""
    writers = spent["writers"]
    if not writers:
        return "", ""
    other = sum(v for k, v in writers.items() if k not in ("total", "creator",
                                                            "kube-scheduler", "raygate"))
    split = " + ".join(_number(writers.get(k, 0.0)) for k in ("creator", "kube-scheduler",
                                                               "raygate"))
    kinds = sorted(spent["writes"].items(), key=lambda kv: (-kv[1], kv[0]))
    return (f"{_number(writers['total'])} = {split} + {_number(other)}",
            ", ".join(f"{k} {_number(v)}" for k, v in kinds))


def _cpu(cpu: dict[str, float]) -> str:
    if not cpu:
        return ""
    cells = " / ".join(_number(cpu.get(k, math.nan)) for k in CPU)
    peer = "" if math.isnan(cpu.get("Go peer", math.nan)) else \
        f"; Go peer {_number(cpu['Go peer'])}"
    return f"{cells} ({_number(cpu.get('machine', math.nan))}{peer})"


def cost_table(rows: list[dict[str, Any]]) -> str:
    """What each contender's burst cost, beside its pods/s and creation→bind."""
    cells = []
    for r in rows:
        spent = r["spent"]
        cells.append((
            f"{r['nodes']:,}", r["contender"], f"{r['pods_per_second']:.1f}",
            _pair(r["bind_ms"], 0), f"{r['gated']:.0f}", *_writes(spent), _cpu(spent["cpu"]),
            _pair((*spent["webhook_ms"], spent["webhook_mean_ms"])),
            _pair((*spent["raygate_webhook_ms"], spent["raygate_webhook_mean_ms"]), 2)))
    return markdown_table(COST, cells, "rlrlrlllll") + "\n"


def goal(rows: list[dict[str, Any]]) -> list[str]:
    """Issue #26's goal, per node count run with both ``none`` and ``raygate-native``."""
    out = []
    for count in sorted({r["nodes"] for r in rows}):
        mine = {r["contender"]: r for r in rows if r["nodes"] == count}
        if "none" not in mine or NATIVE not in mine:
            continue
        base, native = mine["none"], mine[NATIVE]
        kept = native["pods_per_second"] / base["pods_per_second"]
        grew = native["bind_ms"][1] - base["bind_ms"][1]
        met = kept >= GOAL_KEPT and grew <= GOAL_P99_MS
        out.append(f"- {count:,} nodes: {NATIVE} keeps {100 * kept:.1f} % of none's pods/s "
                   f"(goal ≥ {100 * GOAL_KEPT:.0f} %), its creation→bind p99 "
                   f"{grew:+.0f} ms (goal ≤ +{GOAL_P99_MS:.0f} ms): "
                   f"{'met' if met else 'not met'}.")
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for contender in CONTENDERS:
        mine = [r for r in rows if r["contender"] == contender]
        if mine:
            ax.plot([r["nodes"] for r in mine], [r["pods_per_second"] for r in mine],
                    marker="o", label=contender)
    ax.set_xscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("pods bound per second, first created to last bound")
    ax.set_title("kube-scheduler throughput with raygate's rules in force")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
