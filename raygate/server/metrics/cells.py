"""The request path's metric cells: plain counters and histograms that a Prometheus
collector reads at scrape time (why not ``prometheus_client``'s own: ``registry.py``).

A series is written by one thread: every HTTP and gRPC handler runs on the server's event
loop, the admission webhook's on its own (``raygate.server.server``); a scrape only reads.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["LATENCY_BUCKETS", "Cell", "Counter", "F", "Families", "Histogram", "Timing"]

# A filter over a few hundred names answers in tens to a hundred-odd microseconds: the
# buckets start at 50 µs so that its p99 is visible at all, and pass the httpTimeout the
# deploy/ setups give the schedulers (1 s kube-scheduler, 500 ms Volcano): a request in
# the top buckets is one the scheduler has likely given up on.
LATENCY_BUCKETS = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
                   100e-3, 250e-3, 1.0, 2.5)


class Cell:
    """One counter series: a float only the event loop's thread adds to."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class Timing:
    """One histogram series: a count per bucket (the last is +Inf) and the sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        # Prometheus buckets are `le`: the first bound >= the value.
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds


class Counter:
    """A counter family: its series by label values, created on first ``labels``."""

    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.series: dict[tuple[str, ...], Cell] = {}

    def labels(self, *values: str) -> Cell:
        cell = self.series.get(values)
        if cell is None:
            cell = self.series[values] = Cell()
        return cell

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, cell in list(self.series.items()):
            family.add_metric(list(values), cell.value)
        return family


class Histogram:
    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.series: dict[tuple[str, ...], Timing] = {}

    def labels(self, *values: str) -> Timing:
        timing = self.series.get(values)
        if timing is None:
            timing = self.series[values] = Timing()
        return timing

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        bounds = [*map(floatToGoString, LATENCY_BUCKETS), "+Inf"]
        for values, timing in list(self.series.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, list(timing.counts), strict=True):
                cumulative += count
                buckets.append((bound, float(cumulative)))
            family.add_metric(list(values), buckets, timing.sum)
        return family


F = TypeVar("F", "Counter", "Histogram")


class Families(Collector):
    def __init__(self, families: list[Counter | Histogram]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return [family.collect() for family in self.families]
