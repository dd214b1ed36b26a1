"""Prometheus metrics, every name prefixed ``raygate_``, served on ``GET /metrics``.

Each ``Metrics`` owns its own ``CollectorRegistry`` (never the process-global one), so
several servers in one process — the tests start many — count apart. The hot path pays
for label look-ups once: routes and verbs bind their series at startup, a request makes
one ``perf_counter`` pair and a handful of ``inc``/``observe`` calls on pre-bound series,
and no metric call is made per node.

The request-path children are plain cells (``_Cell``, ``_Timing``), not
``prometheus_client`` metric objects: those take a lock and validate on every call, about
1.3 µs each, which made ~4 µs of a ~130 µs filter; a cell costs ~0.1 µs. They need no lock
because one thread writes them: every HTTP and gRPC handler runs on the server's event
loop, and scrapes read them there too. What is a count of the world rather than of
requests (objects in the cache, list/watch state, admission states) is computed by
collectors when Prometheus scrapes, never on the request path.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from raygate.extender.http.routes import Gate, Route
from raygate.plugin.placement import Decision, Rule

if TYPE_CHECKING:
    from raygate.extender.state.cache import ClusterCache
    from raygate.extender.state.sync import KindReport
    from raygate.extender.tls import CertReloader

__all__ = [
    "CONTENT_TYPE",
    "LATENCY_BUCKETS",
    "AuthzCounts",
    "Metrics",
    "RouteMetrics",
    "VerbMetrics",
    "metrics_routes",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST.encode()

PodStates = Iterable[tuple[tuple[str, str], Mapping[str, int]]]
"""((namespace, RayCluster), {admission state: pods}) for every RayCluster."""

# A filter over a few hundred names answers in tens to a hundred-odd microseconds: the
# buckets start at 50 µs so that its p99 is visible at all, and pass the httpTimeout the
# deploy/ setups give the schedulers (1 s kube-scheduler, 500 ms Volcano): a request in
# the top buckets is one the scheduler has likely given up on.
LATENCY_BUCKETS = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
                   100e-3, 250e-3, 1.0, 2.5)

"""The ``route`` label of paths raygate does not serve: one series for every scanner."""


class _Cell:
    """One counter series: a float only the event loop's thread adds to."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class _Timing:
    """One histogram series: a count per bucket (the last is +Inf) and the sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        # Prometheus buckets are `le`: the first bound >= the value.
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds


class _Counter:
    """A counter family: its series by label values, created on first ``labels``."""

    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.series: dict[tuple[str, ...], _Cell] = {}

    def labels(self, *values: str) -> _Cell:
        cell = self.series.get(values)
        if cell is None:
            cell = self.series[values] = _Cell()
        return cell

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, cell in list(self.series.items()):
            family.add_metric(list(values), cell.value)
        return family


class _Histogram:
    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.series: dict[tuple[str, ...], _Timing] = {}

    def labels(self, *values: str) -> _Timing:
        timing = self.series.get(values)
        if timing is None:
            timing = self.series[values] = _Timing()
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


class _Families(Collector):
    def __init__(self, families: list[_Counter | _Histogram]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return [family.collect() for family in self.families]


class RouteMetrics:
    """One route's latency histogram and per-status counters, bound once."""

    __slots__ = ("_codes", "_requests", "errors", "observe", "route")

    def __init__(self, metrics: Metrics, route: str) -> None:
        self.route = route
        self.observe = metrics.request_seconds.labels(route).observe
        self._requests = metrics.requests
        # The usual answer is bound now; any other status on first sight.
        self._codes = {200: metrics.requests.labels(route, "200")}
        self.errors = metrics.request_errors

    def done(self, status: int, seconds: float) -> None:
        self.observe(seconds)
        counter = self._codes.get(status)
        if counter is None:
            counter = self._codes[status] = self._requests.labels(self.route, str(status))
        counter.inc()

    def error(self, reason: str) -> None:
        """A ``RaygateError`` answered (its ``reason``: BadRequest, PayloadTooLarge, ...);
        errors are rare, so the label look-up is paid here."""
        self.errors.labels(self.route, reason).inc()


class VerbMetrics:
    """One scheduler verb's decision and fail-open counters, bound once."""

    __slots__ = ("decisions", "nodes_dropped", "refused", "unknown_nodes",
                 "unknown_rayclusters", "unknown_victims", "victims_removed",
                 "victims_substituted")

    def __init__(self, metrics: Metrics, verb: str) -> None:
        self.decisions = {rule: metrics.decisions.labels(verb, rule.value) for rule in Rule}
        self.refused = {rule: metrics.gpu_nodes_refused.labels(verb, rule.value)
                        for rule in Rule}
        self.unknown_nodes = metrics.fail_open.labels(verb, "unknown-node")
        self.unknown_rayclusters = metrics.fail_open.labels(verb, "unknown-raycluster")
        self.unknown_victims = metrics.fail_open.labels(verb, "unknown-victim")
        self.victims_removed = metrics.victims.labels(verb, "removed")
        self.victims_substituted = metrics.victims.labels(verb, "substituted")
        self.nodes_dropped = metrics.preempt_nodes_dropped.labels(verb)

    def count(self, decision: Decision) -> None:
        """A placement decision: its rule, and a fail-open when the pod's RayCluster was
        unknown (decided as floor, the safe side)."""
        self.decisions[decision.rule].inc()
        if decision.cluster_unknown:
            self.unknown_rayclusters.inc()


class Metrics:
    """raygate's metrics over a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.request_seconds = _Histogram(
            "raygate_request_duration_seconds",
            "Time from a request's arrival to its reply being handed to the server, by route.",
            ["route"])
        self.requests = _Counter(
            "raygate_requests", "HTTP requests answered, by route and status code.",
            ["route", "code"])
        self.request_errors = _Counter(
            "raygate_request_errors",
            "Requests answered with an error, by route and reason (BadRequest, "
            "PayloadTooLarge, NotFound, MethodNotAllowed, InternalError, ...). On the "
            "scheduler routes every one is a fail-open: the scheduler goes on without raygate.",
            ["route", "reason"])
        self.decisions = _Counter(
            "raygate_decisions", "Placement decisions (one per pod per request), by verb and "
            "rule; rule=\"thrash-guard\" counts thrash-guard hits.",
            ["verb", "rule"])
        self.gpu_nodes_refused = _Counter(
            "raygate_gpu_nodes_refused",
            "GPU nodes refused to CPU-only Ray pods, by verb and rule.",
            ["verb", "rule"])
        self.victims = _Counter(
            "raygate_preempt_victims", "Preemption victims raygate changed, by verb and outcome: "
            "removed (protected: floor, head, preemptable=false) or substituted (a surplus pod "
            "in a protected pod's place).",
            ["verb", "outcome"])
        self.preempt_nodes_dropped = _Counter(
            "raygate_preempt_nodes_dropped",
            "Candidate nodes raygate removed from a preemption (the floor could not be kept).",
            ["verb"])
        self.fail_open = _Counter(
            "raygate_fail_open", "Inputs raygate did not know and let through, by verb and "
            "cause: unknown-node, unknown-raycluster (treated as floor), unknown-victim.",
            ["verb", "cause"])
        self.requests_timed_out = _Counter(
            "raygate_requests_timed_out",
            "Connections closed because a request's head and body did not arrive within "
            "the header timeout (a stalled or very slow client), by listener.",
            ["listener"])
        r.register(_Families([
            self.request_seconds, self.requests, self.request_errors, self.decisions,
            self.gpu_nodes_refused, self.victims, self.preempt_nodes_dropped, self.fail_open,
            self.requests_timed_out]))
        ProcessCollector(namespace="raygate", registry=r)
        self._limits = _LimitCollector()
        r.register(self._limits)

    def route(self, path: str) -> RouteMetrics:
        return RouteMetrics(self, path)

    def verb(self, name: str) -> VerbMetrics:
        return VerbMetrics(self, name)

    def watch_cache(self, cache: ClusterCache) -> None:
        """Objects per kind and list/watch state of ``cache``, read at scrape time."""
        self.registry.register(_CacheCollector(cache))

    def watch_admission(self, pod_states: Callable[[], PodStates]) -> None:
        """Pods per admission state and RayCluster, read at scrape time from
        ``pod_states`` (the admission service's)."""
        self.registry.register(_AdmissionCollector(pod_states))

    def watch_gate(self, route: str, gate: Gate) -> None:
        """A route's concurrency bound: requests refused and in flight, read at scrape
        time (the request path only counts in the gate itself)."""
        self._limits.gates.append((route, gate))

    def watch_tls(self, listener: str, reloader: CertReloader) -> None:
        """Certificate reloads of a listener, read at scrape time."""
        self._limits.certificates.append((listener, reloader))

    def watch_authz(self, counts: AuthzCounts) -> None:
        """What the status APIs' authorizer decided and asked, read at scrape time."""
        self.registry.register(_AuthzCollector(counts))

    def watch_config(self, counts: Mapping[str, int]) -> None:
        """Config file reloads by result (``ok``, ``failed``), read at scrape time."""
        self._limits.config_reloads = counts

    def exposition(self, _: bytes = b"") -> bytes:
        """The text exposition (the ``/metrics`` route's handler)."""
        return generate_latest(self.registry)


class _CacheCollector(Collector):
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def collect(self) -> Iterable[Metric]:
        cache = self.cache
        ready = GaugeMetricFamily("raygate_cache_ready",
                                  "1 when the cache has loaded its source (/readyz is 200).")
        ready.add_metric([], 1.0 if cache.ready else 0.0)
        yield ready
        objects = GaugeMetricFamily("raygate_cache_objects",
                                    "Objects in the current snapshot, by kind.", labels=["kind"])
        for kind, count in cache.snapshot.counts().items():
            objects.add_metric([kind], count)
        yield objects
        sync = cache.sync
        if sync is None:  # a file source: no list/watch to report
            return
        yield from _sync_families(sync.report().items())


def _sync_families(reports: Iterable[tuple[str, KindReport]]) -> Iterator[Metric]:
    synced = GaugeMetricFamily("raygate_cache_synced",
                               "1 once a kind's first LIST is in the cache.", labels=["kind"])
    events = CounterMetricFamily("raygate_cache_watch_events",
                                 "Watch events applied, by kind.", labels=["kind"])
    relists = CounterMetricFamily("raygate_cache_relists",
                                  "LISTs after the first (410 Gone, a CRD back), by kind.",
                                  labels=["kind"])
    errors = CounterMetricFamily("raygate_cache_watch_errors",
                                 "Failed list/watch requests, broken streams, unreadable "
                                 "objects, by kind.", labels=["kind"])
    age = GaugeMetricFamily("raygate_cache_last_event_age_seconds",
                            "Seconds since the last event, bookmark or LIST page of a kind.",
                            labels=["kind"])
    for kind, report in reports:
        synced.add_metric([kind], 1.0 if report.synced else 0.0)
        events.add_metric([kind], report.events)
        relists.add_metric([kind], report.relists)
        errors.add_metric([kind], report.errors)
        if report.last_event_age_seconds is not None:
            age.add_metric([kind], report.last_event_age_seconds)
    yield from (synced, events, relists, errors, age)


class _AdmissionCollector(Collector):
    def __init__(self, pod_states: Callable[[], PodStates]) -> None:
        self.pod_states = pod_states

    def collect(self) -> Iterable[Metric]:
        pods = GaugeMetricFamily(
            "raygate_admission_pods",
            "Pods not running, by RayCluster and admission state (counts only).",
            labels=["namespace", "raycluster", "state"])
        for (namespace, name), states in self.pod_states():
            for state, count in sorted(states.items()):
                pods.add_metric([namespace, name, state], count)
        yield pods


class _LimitCollector(Collector):
    def __init__(self) -> None:
        self.gates: list[tuple[str, Gate]] = []
        self.certificates: list[tuple[str, CertReloader]] = []
        self.config_reloads: Mapping[str, int] = {}

    def collect(self) -> Iterable[Metric]:
        shed = CounterMetricFamily(
            "raygate_requests_shed",
            "Requests answered 503 at once because the route's concurrency limit "
            "(--predicate-concurrency for /volcano/predicate) was reached, by route.",
            labels=["route"])
        busy = GaugeMetricFamily("raygate_requests_in_flight",
                                 "Requests holding a slot of the route's concurrency limit.",
                                 labels=["route"])
        for route, gate in self.gates:
            shed.add_metric([route], gate.shed)
            busy.add_metric([route], gate.busy)
        reloads = CounterMetricFamily(
            "raygate_tls_reloads",
            "Certificate files that changed, by listener and result: loaded (new "
            "handshakes use them) or failed (the previous certificate stays in use).",
            labels=["listener", "result"])
        for listener, reloader in self.certificates:
            reloads.add_metric([listener, "loaded"], reloader.reloads)
            reloads.add_metric([listener, "failed"], reloader.failures)
        config = CounterMetricFamily(
            "raygate_config_reloads",
            "Reloads of the config file's policy after it changed, by result: ok (in use) "
            "or failed (the previous policy stays; the log says why).", labels=["result"])
        for result, count in sorted(self.config_reloads.items()):
            config.add_metric([result], count)
        return [shed, busy, reloads, config]


@dataclass
class AuthzCounts:
    """What the authorizer of the status APIs did (``raygate.extender.authz`` counts here;
    read at scrape time, on the loop)."""

    decisions: Tally[str] = field(default_factory=Tally)
    """By outcome: allowed, unauthenticated, forbidden, unavailable."""
    reviews: Tally[tuple[str, str]] = field(default_factory=Tally)
    """API calls by (kind: tokenreview | subjectaccessreview, result: ok | error)."""
    cache_hits: Tally[str] = field(default_factory=Tally)
    """Answers from the cache, by kind."""


class _AuthzCollector(Collector):
    def __init__(self, counts: AuthzCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterable[Metric]:
        decisions = CounterMetricFamily(
            "raygate_authz_decisions",
            "Callers of the status APIs by outcome: allowed, unauthenticated, forbidden, "
            "unavailable (503: the API server could not be asked, or too many reviews "
            "were in flight).",
            labels=["outcome"])
        for outcome, count in sorted(self.counts.decisions.items()):
            decisions.add_metric([outcome], count)
        reviews = CounterMetricFamily(
            "raygate_authz_reviews",
            "TokenReviews and SubjectAccessReviews raygate created, by kind and result.",
            labels=["kind", "result"])
        for (kind, result), count in sorted(self.counts.reviews.items()):
            reviews.add_metric([kind, result], count)
        hits = CounterMetricFamily(
            "raygate_authz_cache_hits",
            "Answers taken from the authorizer's cache instead of a review, by kind.",
            labels=["kind"])
        for kind, count in sorted(self.counts.cache_hits.items()):
            hits.add_metric([kind], count)
        return [decisions, reviews, hits]


def metrics_routes(metrics: Metrics) -> dict[str, Route]:
    """``/metrics``: Prometheus' text exposition of ``metrics``' registry."""
    return {"/metrics": Route(b"GET", metrics.exposition, content_type=CONTENT_TYPE)}
