"""What ``bench.scheduler_throughput`` measured: one ``Run`` per contender and run, the
quantiles read from kube-scheduler's histograms and from the bench's own pod clock
(``bench.scheduler_clock``), and the summary tables, the goal of issue #26 and the plot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.measure import reuse_counts
from bench.reporter import markdown_table
from bench.stats import histogram_quantile, median

__all__ = ["CONTENDERS", "GATE_SECONDS", "NATIVE", "WEBHOOK_NAME", "WEBHOOK_SECONDS", "Run",
           "delta_mean", "delta_quantiles", "goal", "histograms", "markdown", "plot", "reuse_share",
           "summarise"]

CONTENDERS = ("none", "empty", "go-peer", "raygate", "raygate-native")
NATIVE = "raygate-native"
GOAL_KEPT = 0.95
"""Issue #26: raygate's native rules keep this share of the no-extender pods/s..."""
GOAL_P99_MS = 50.0
"""...and add at most this to the creation→bind p99 (5,000 nodes, a 1,000-pod burst)."""
NAN2 = (math.nan, math.nan)
GATE_SECONDS = "raygate_placement_gate_seconds"
WEBHOOK_SECONDS = "apiserver_admission_webhook_admission_duration_seconds"
WEBHOOK_NAME = "ray-pods.raygate.io"
"""raygate's webhook, as deploy/native-placement names it."""


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
    webhook_ms: tuple[float, float] = NAN2
    """kube-apiserver's ``apiserver_admission_webhook_admission_duration_seconds`` for
    raygate's webhook during the run, (p50, p99) from its buckets."""
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



def histograms(text: str, name: str, /, **match: str) -> dict[str, list[tuple[float, float]]]:
    """Buckets of histogram ``name`` whose labels include ``match``, summed over the other
    labels and keyed by ``extension_point`` (or "" for the others)."""
    out: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            if any(sample.labels.get(k) != v for k, v in match.items()):
                continue
            key = sample.labels.get("extension_point", "")
            le = float(sample.labels["le"])
            out.setdefault(key, {})[le] = out.get(key, {}).get(le, 0.0) + sample.value
    return {k: sorted(v.items()) for k, v in out.items()}



def delta_quantiles(before: dict[str, str], after: dict[str, str], source: str,
                    metric: str, /, **match: str) -> tuple[float, float]:
    """(p50, p99) in ms of what histogram ``metric`` observed between two scrapes of
    ``source`` (a key of both, a /metrics text); NaN when it was not scraped."""
    if source not in before or source not in after:
        return NAN2
    was = dict(histograms(before[source], metric, **match).get("", []))
    now = histograms(after[source], metric, **match).get("", [])
    delta = [(le, count - was.get(le, 0.0)) for le, count in now]
    return 1e3 * histogram_quantile(delta, 0.5), 1e3 * histogram_quantile(delta, 0.99)


def delta_mean(before: dict[str, str], after: dict[str, str], source: str,
               metric: str) -> float:
    """The mean in ms of what histogram ``metric`` observed between two scrapes."""
    if source not in before or source not in after:
        return math.nan
    was, now = _sum_count(before[source], metric), _sum_count(after[source], metric)
    count = now[1] - was[1]
    return 1e3 * (now[0] - was[0]) / count if count else math.nan


def _sum_count(text: str, metric: str) -> tuple[float, float]:
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples if family.name == metric else ():
            if sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_count"):
                count += sample.value
    return total, count


def reuse_share(before: str, after: str) -> float:
    """raygate's prioritize requests answered with filter's decision between two scrapes
    of its /metrics (``raygate_decision_reuse_total``); NaN with none asked."""
    if not before or not after:
        return math.nan
    hits0, misses0 = reuse_counts(before).get("scheduler/prioritize", (0.0, 0.0))
    hits1, misses1 = reuse_counts(after).get("scheduler/prioritize", (0.0, 0.0))
    asked = (hits1 - hits0) + (misses1 - misses0)
    return (hits1 - hits0) / asked if asked else math.nan


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
            })
    return rows


PAIRS = ("create_ms", "bind_ms", "release_ms", "webhook_ms", "gate_ms")


def _medians(mine: list[Run]) -> dict[str, Any]:
    out: dict[str, Any] = {key: median([getattr(r, key) for r in mine]) for key in (
        "attempt_p50_ms", "attempt_p99_ms", "algorithm_p50_ms", "algorithm_p99_ms",
        "prioritize_reuse", "created_per_second", "bind_span_per_second", "gate_mean_ms")}
    for point, key in (("Filter", "filter_p99_ms"), ("Score", "score_p99_ms")):
        out[key] = median([r.extension_points.get(point, NAN2)[1] for r in mine])
    for key in PAIRS:
        out[key] = tuple(median([getattr(r, key)[i] for r in mine]) for i in (0, 1))
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
           "ADDED → bound p50 / p99 (ms)", "p99 − none's (ms)", "webhook p50 / p99 (ms)",
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
            + "\n".join(goal(rows)) + "\n")


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
            _pair(r["bind_ms"], 0), grow, _pair(r["webhook_ms"]),
            _pair((*r["gate_ms"], r["gate_mean_ms"]), 0)))
    return markdown_table(LATENCY, cells, "rlrrlllrll") + "\n"


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
