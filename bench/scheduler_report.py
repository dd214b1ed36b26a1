"""What ``bench.scheduler_throughput`` measured: one ``Run`` per contender and run, the
quantiles read from kube-scheduler's histograms, and the summary table and plot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["CONTENDERS", "Run", "histograms", "markdown", "plot", "quantile", "summarise"]

CONTENDERS = ("none", "empty", "go-peer", "raygate")


@dataclass
class Run:
    nodes: int
    contender: str
    run: int
    pods: int
    seconds: float
    pods_per_second: float
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



def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus' ``histogram_quantile`` over cumulative (upper bound, count) buckets."""
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0.0
    if total == 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = upper, count
    return lower


def histograms(text: str, name: str, **match: str) -> dict[str, list[tuple[float, float]]]:
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



def summarise(runs: list[Run]) -> list[dict[str, Any]]:
    """Per node count and contender: median over runs, and the cost against ``none``."""
    rows = []
    for count in sorted({r.nodes for r in runs}):
        of = {c: [r for r in runs if r.nodes == count and r.contender == c] for c in CONTENDERS}
        base = _median([r.pods_per_second for r in of["none"]])
        for contender, mine in of.items():
            if not mine:
                continue
            rate = _median([r.pods_per_second for r in mine])
            rows.append({
                "nodes": count, "contender": contender, "runs": len(mine),
                "pods_per_second": rate,
                "runs_pods_per_second": [round(r.pods_per_second, 1) for r in mine],
                "cost": 1 - rate / base if base else math.nan,
                "attempt_p50_ms": _median([r.attempt_p50_ms for r in mine]),
                "attempt_p99_ms": _median([r.attempt_p99_ms for r in mine]),
                "algorithm_p50_ms": _median([r.algorithm_p50_ms for r in mine]),
                "algorithm_p99_ms": _median([r.algorithm_p99_ms for r in mine]),
                "filter_p99_ms": _median([r.extension_points.get("Filter", (math.nan,) * 2)[1]
                                          for r in mine]),
                "score_p99_ms": _median([r.extension_points.get("Score", (math.nan,) * 2)[1]
                                         for r in mine]),
                "floor_on_gpu": max(r.floor_on_gpu for r in mine),
                "overflow_on_gpu": _median([float(r.overflow_on_gpu) for r in mine]),
                "prioritize_reuse": _median([r.prioritize_reuse for r in mine]),
            })
    return rows


def _median(values: list[float]) -> float:
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return math.nan
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def markdown(rows: list[dict[str, Any]], pods: int) -> str:
    lines = [f"| nodes | contender | pods/s (median; runs) | cost | attempt p50 / p99 (ms) "
             f"| algorithm p50 / p99 (ms) | Filter / Score plugins p99 (ms) "
             f"| floor / overflow on GPU (of {pods}) | prioritize reusing filter's decision |",
             "|---:|---|---|---:|---|---|---|---|---:|"]
    for r in rows:
        cost = "—" if r["contender"] == "none" else f"{100 * r['cost']:.1f} %"
        reuse = "" if math.isnan(r["prioritize_reuse"]) else f"{100 * r['prioritize_reuse']:.0f} %"
        lines.append(
            f"| {r['nodes']:,} | {r['contender']} | {r['pods_per_second']:.1f} "
            f"({', '.join(map(str, r['runs_pods_per_second']))}) | {cost} "
            f"| {r['attempt_p50_ms']:.1f} / {r['attempt_p99_ms']:.1f} "
            f"| {r['algorithm_p50_ms']:.1f} / {r['algorithm_p99_ms']:.1f} "
            f"| {r['filter_p99_ms']:.2f} / {r['score_p99_ms']:.2f} "
            f"| {r['floor_on_gpu']} / {r['overflow_on_gpu']:.0f} "
            f"| {reuse} |")
    return "\n".join(lines) + "\n"


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
    ax.set_ylabel("pods bound per second (kube-scheduler)")
    ax.set_title("kube-scheduler throughput with an extender in its cycle")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
