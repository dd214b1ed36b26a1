"""What is a count of the world rather than of requests — objects in the cache, list/watch
state, admission states, limits, authz decisions — computed when Prometheus scrapes, never
on the request path."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from raygate.server.http.routes import Gate

if TYPE_CHECKING:
    from raygate.server.cache.cluster import ClusterCache
    from raygate.server.cache.sync import KindReport
    from raygate.server.kube.leader import Leadership
    from raygate.server.tls import CertReloader



PodStates = Iterable[tuple[tuple[str, str], Mapping[str, int]]]
"""((namespace, RayCluster), {admission state: pods}) for every RayCluster."""


class CacheCollector(Collector):
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
        yield from sync_families(sync.report().items())


def sync_families(reports: Iterable[tuple[str, KindReport]]) -> Iterator[Metric]:
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


class AdmissionCollector(Collector):
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


class ScaleUpCollector(Collector):
    def __init__(self, held: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        self.held = held

    def collect(self) -> Iterable[Metric]:
        pods = GaugeMetricFamily(
            "raygate_scale_up_held_pods",
            "Surplus workers raygate's gate holds together in an all-or-nothing scale-up, "
            "by RayCluster: waiting for the scale-up to be complete, or for all of it to "
            "fit (the admission API says which, and since when).",
            labels=["namespace", "raycluster"])
        for (namespace, name), count in sorted(self.held().items()):
            pods.add_metric([namespace, name], count)
        yield pods


class ScaleGateCollector(Collector):
    def __init__(self, written: Callable[[], Mapping[str, int]]) -> None:
        self.written = written

    def collect(self) -> Iterable[Metric]:
        gates = GaugeMetricFamily(
            "raygate_scale_gates",
            "raygate's scale gates on RayClusters' worker groups now (as last written or "
            "read by this replica while it leads), by reason: the gate's name after "
            "raygate.io/ (docs/scale-gates.md).",
            labels=["reason"])
        for reason, count in sorted(self.written().items()):
            gates.add_metric([reason], count)
        yield gates


class LimitCollector(Collector):
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
    """What the authorizer of the status APIs did (``raygate.server.authz`` counts here;
    read at scrape time, on the loop)."""

    decisions: Tally[str] = field(default_factory=Tally)
    """By outcome: allowed, unauthenticated, forbidden, unavailable."""
    reviews: Tally[tuple[str, str]] = field(default_factory=Tally)
    """API calls by (kind: tokenreview | subjectaccessreview, result: ok | error)."""
    cache_hits: Tally[str] = field(default_factory=Tally)
    """Answers from the cache, by kind."""


class AuthzCollector(Collector):
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


class LeaderCollector(Collector):
    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def collect(self) -> Iterable[Metric]:
        leader = GaugeMetricFamily(
            "raygate_leader",
            "1 while this replica holds the leader election's Lease and may act (always 1 "
            "without a cluster or with leader election off).")
        leader.add_metric([], 1.0 if self.leadership.leading() else 0.0)
        transitions = CounterMetricFamily(
            "raygate_leader_transitions",
            "Changes of this replica's leadership, by change: gained or lost.",
            labels=["change"])
        for change in ("gained", "lost"):
            transitions.add_metric([change], self.leadership.transitions[change])
        return [leader, transitions]
