"""The benchmarks' one definition of a percentile, and the summaries built on it.

Every sample percentile in ``bench/`` is the **nearest rank**: the ``q`` quantile of ``n``
samples is the ``ceil(q * n)``-th smallest (the smallest sample with at least a share
``q`` of the samples at or below it) — an observed value, never one interpolated between
two, as wrk's (HdrHistogram's) percentiles are, so that a table mixing wrk's numbers and
``bench.pyclient``'s compares like with like.

``histogram_quantile`` is another operation, not another definition: the quantile of
samples known only as cumulative histogram buckets (kube-scheduler's, raygate's,
kube-apiserver's ``/metrics``), interpolated inside a bucket as Prometheus'
``histogram_quantile`` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Summary", "histogram_quantile", "median", "p50_p99", "percentile", "summarize"]


def percentile(values: Iterable[float], q: float, *, empty: float = math.nan) -> float:
    """The nearest-rank ``q`` quantile (``q`` from 0 to 1) of ``values``; ``empty`` for
    none."""
    ordered = sorted(values)
    if not ordered:
        return empty
    rank = math.ceil(q * len(ordered) - 1e-9)  # 0.99 * 100 is 99, not 99.00000000000001
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def p50_p99(values: Iterable[float], scale: float = 1.0, *,
            empty: float = math.nan) -> tuple[float, float]:
    """(p50, p99) of ``values``, each times ``scale`` (1e3: seconds to milliseconds)."""
    ordered = sorted(values)
    return (scale * percentile(ordered, 0.5, empty=empty),
            scale * percentile(ordered, 0.99, empty=empty))


@dataclass(frozen=True)
class Summary:
    """Samples in a few numbers, each in the unit the samples were scaled to."""

    count: int
    p50: float
    p99: float
    p999: float
    mean: float
    max: float


def summarize(values: Iterable[float], scale: float = 1.0, *, empty: float = 0.0) -> Summary:
    """Count, p50, p99, p99.9, mean and max of ``values`` times ``scale``; ``empty`` for
    each statistic of no samples."""
    ordered = sorted(values)
    if not ordered:
        return Summary(0, empty, empty, empty, empty, empty)
    return Summary(len(ordered), scale * percentile(ordered, 0.5),
                   scale * percentile(ordered, 0.99), scale * percentile(ordered, 0.999),
                   scale * math.fsum(ordered) / len(ordered), scale * ordered[-1])


def median(values: Iterable[float]) -> float:
    """The median of the values that are not NaN (the mean of the two middle ones for an
    even count); NaN for none. For the median over runs or passes, not over samples."""
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return math.nan
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
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
