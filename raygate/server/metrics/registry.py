"""Prometheus metrics, served on ``GET /metrics``: raygate's own, every name prefixed
``raygate_``, beside prometheus-client's standard ``process_*`` and ``python_*``.

Each ``Metrics`` owns its own ``CollectorRegistry`` (never the process-global one), so
several servers in one process — the tests start many — count apart. The hot path pays
for label look-ups once: routes and verbs bind their series at startup, a request makes
one ``perf_counter`` pair and a handful of ``inc``/``observe`` calls on pre-bound series,
and no metric call is made per node.

The request-path children are plain cells (``metrics.cells``), not ``prometheus_client``
metric objects: those take a lock and validate on every call, about 1.3 µs each, which
made ~4 µs of a ~130 µs filter; a cell costs ~0.1 µs. They need no lock because one thread
writes each series: every HTTP and gRPC handler runs on the server's event loop, the
admission webhook's on a loop of its own (its series are its own); scrapes only read.
What is a count of the world rather than of requests (objects in the cache, list/watch
state, admission states) is computed by collectors when Prometheus scrapes, never on the
request path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from raygate.policy.placement import Decision, Rule
from raygate.process.version import build_labels
from raygate.server.http.routes import Gate, Route
from raygate.server.metrics.cells import LATENCY_BUCKETS, Counter, F, Families, Histogram
from raygate.server.metrics.collectors import (
    AdmissionCollector,
    AuthzCollector,
    AuthzCounts,
    CacheCollector,
    LeaderCollector,
    LimitCollector,
    PodStates,
    ScaleGateCollector,
    ScaleUpCollector,
)

if TYPE_CHECKING:
    from raygate.server.cache.cluster import ClusterCache
    from raygate.server.kube.leader import Leadership
    from raygate.server.tls import CertReloader

__all__ = [
    "CONTENT_TYPE",
    "LATENCY_BUCKETS",
    "Metrics",
    "RouteMetrics",
    "VerbMetrics",
    "metrics_routes",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST.encode()


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
                 "unknown_rayclusters", "unknown_victims", "verb", "victims_removed",
                 "victims_substituted")

    def __init__(self, metrics: Metrics, verb: str) -> None:
        self.verb = verb
        """``scheduler/filter``, ``volcano/predicate``, ...: the label, and the log field."""
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
        self._families: list[Counter | Histogram] = []
        self._requests()
        self._decisions()
        self._writes()
        self._placement()
        r.register(Families(self._families))
        # The standard process_* and python_* families, under the names every dashboard
        # and alert for a Python service already uses; on this registry, as the default
        # one is never served.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        Info("raygate_build", "raygate's version and the Python running it; always 1.",
             registry=r).info(build_labels())
        self._limits = LimitCollector()
        r.register(self._limits)

    def _add(self, family: F) -> F:
        self._families.append(family)
        return family

    def _requests(self) -> None:
        """What the HTTP layer counts: every route's latency, status codes and errors."""
        self.request_seconds = self._add(Histogram(
            "raygate_request_duration_seconds",
            "Time from a request's arrival to its reply being handed to the server, by route.",
            ["route"]))
        self.requests = self._add(Counter(
            "raygate_requests", "HTTP requests answered, by route and status code.",
            ["route", "code"]))
        self.request_errors = self._add(Counter(
            "raygate_request_errors",
            "Requests answered with an error, by route and reason (BadRequest, "
            "PayloadTooLarge, NotFound, MethodNotAllowed, InternalError, ...). On the "
            "scheduler routes every one is a fail-open: the scheduler goes on without raygate.",
            ["route", "reason"]))
        self.requests_timed_out = self._add(Counter(
            "raygate_requests_timed_out",
            "Connections closed because a request's head and body did not arrive within "
            "the header timeout (a stalled or very slow client), by listener.",
            ["listener"]))

    def _decisions(self) -> None:
        """What the scheduler verbs decided, and where they failed open."""
        self.decisions = self._add(Counter(
            "raygate_decisions", "Placement decisions (one per pod per request), by verb and "
            "rule; rule=\"thrash-guard\" counts thrash-guard hits.",
            ["verb", "rule"]))
        self.gpu_nodes_refused = self._add(Counter(
            "raygate_gpu_nodes_refused",
            "GPU nodes refused to CPU-only Ray pods, by verb and rule.",
            ["verb", "rule"]))
        self.victims = self._add(Counter(
            "raygate_preempt_victims", "Preemption victims raygate changed, by verb and outcome: "
            "removed (protected: floor, head, preemptable=false) or substituted (a surplus pod "
            "in a protected pod's place).",
            ["verb", "outcome"]))
        self.preempt_nodes_dropped = self._add(Counter(
            "raygate_preempt_nodes_dropped",
            "Candidate nodes raygate removed from a preemption (the floor could not be kept).",
            ["verb"]))
        self.fail_open = self._add(Counter(
            "raygate_fail_open", "Inputs raygate did not know and let through, by verb and "
            "cause: unknown-node, unknown-raycluster (treated as floor), unknown-victim.",
            ["verb", "cause"]))
        self.decision_reuse = self._add(Counter(
            "raygate_decision_reuse",
            "Decision look-ups of kube-scheduler's verbs, by verb and result: hit (the same "
            "pod was decided on the same snapshot, e.g. by filter before prioritize, and that "
            "decision was reused) or miss (decided anew).",
            ["verb", "result"]))

    def _writes(self) -> None:
        """The writes raygate makes to the API server."""
        self.requeue_nudges = self._add(Counter(
            "raygate_requeue_nudges",
            "Pending pods raygate annotated so that kube-scheduler tries them again: filter "
            "refused them GPU nodes on a decision a later snapshot reverses (their group's "
            "floor filled, the thrash guard ended, the RayCluster appeared), by the rule "
            "that refused and result: patched, or failed (logged; the pod waits for the next "
            "cluster event or kube-scheduler's periodic flush).",
            ["rule", "result"]))
        self.disruption_budget_writes = self._add(Counter(
            "raygate_disruption_budget_writes",
            "Writes of the PodDisruptionBudgets that keep each RayCluster's floor, by "
            "result: applied (server-side apply of a budget that changed), deleted (a "
            "budget no floor needs any more), failed (logged; that RayCluster is tried "
            "again with a backoff).",
            ["result"]))
        self.scale_gate_writes = self._add(Counter(
            "raygate_scale_gate_writes",
            "JSON Patches of raygate's scale gates into RayClusters' worker groups "
            "(docs/scale-gates.md), by outcome: written (gates added or removed), conflict "
            "(the RayCluster changed meanwhile: read again and tried again), failed (logged; "
            "tried again with a backoff), gone (the RayCluster was deleted: forgotten).",
            ["outcome"]))
        self.events = self._add(Counter(
            "raygate_events",
            "Events (events.k8s.io/v1) raygate said on pods and RayClusters, by reason and "
            "outcome: created; series (a patch of a repeated Event's count); folded (a "
            "repeat counted in memory, written with its series' next count); limited (over "
            "an object's rate limit, dropped); dropped (the queue was full; reason empty); "
            "failed (the API server refused or was not reached; logged, not tried again).",
            ["reason", "outcome"]))

    def _placement(self) -> None:
        """What the native placement writes: pods decided at admission, gated, released."""
        self.placement_gates = self._add(Counter(
            "raygate_placement_gates",
            "Ray pods the webhook held with the scheduling gate raygate.io/placement (only "
            "where the decision must wait: its RayCluster not in raygate's cache yet, a "
            "held all-or-nothing scale-up, a cache not yet loaded), by result: gated, or "
            "failed_open (the pod could not be read; created unchanged and logged).",
            ["result"]))
        self.placement_admissions = self._add(Counter(
            "raygate_placement_admissions",
            "Ray pods the webhook decided in their create's admission, created with "
            "raygate's placement (no gate, no second write), by rule and the native rule "
            "written (required-not-gpu, preferred-not-gpu, none).",
            ["rule", "native"]))
        self.webhook_seconds = self._add(Histogram(
            "raygate_webhook_duration_seconds",
            "raygate's own handling of an AdmissionReview on /mutate/ray-pods: from its "
            "bytes read to the reply's bytes made (kube-apiserver's "
            "apiserver_admission_webhook_admission_duration_seconds adds the round trip).",
            []))
        self.placement_releases = self._add(Counter(
            "raygate_placement_releases",
            "Gated Ray pods raygate released with its placement in native form, by rule, "
            "the native rule written (required-not-gpu, preferred-not-gpu, none) and result: "
            "released, conflict (another writer released it first: nothing written), gone "
            "(the pod was deleted), failed (logged; tried again after a backoff).",
            ["rule", "native", "result"]))
        self.placement_gate_seconds = self._add(Histogram(
            "raygate_placement_gate_seconds",
            "How long a released Ray pod was held by raygate's gate: from raygate first "
            "seeing it gated to the release patch answered.",
            []))
        self.scale_up_releases = self._add(Counter(
            "raygate_scale_up_releases",
            "All-or-nothing scale-ups (RayClusters annotated raygate.io/scale-up: "
            "all-or-nothing) released from raygate's gate in one pass, by trigger: fits (all "
            "of it fits the cluster as it is) or node-autoscaler (released at once, so the "
            "node autoscaler sees it in one provisioning batch).",
            ["trigger"]))

    def route(self, path: str) -> RouteMetrics:
        return RouteMetrics(self, path)

    def verb(self, name: str) -> VerbMetrics:
        return VerbMetrics(self, name)

    def watch_cache(self, cache: ClusterCache) -> None:
        """Objects per kind and list/watch state of ``cache``, read at scrape time."""
        self.registry.register(CacheCollector(cache))

    def watch_admission(self, pod_states: Callable[[], PodStates]) -> None:
        """Pods per admission state and RayCluster, read at scrape time from
        ``pod_states`` (the admission service's)."""
        self.registry.register(AdmissionCollector(pod_states))

    def watch_gate(self, route: str, gate: Gate) -> None:
        """A route's concurrency bound: requests refused and in flight, read at scrape
        time (the request path only counts in the gate itself)."""
        self._limits.gates.append((route, gate))

    def watch_scale_ups(self, held: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        """The pods each RayCluster's all-or-nothing scale-up holds now, read at scrape
        time from ``held`` (the placement controller's)."""
        self.registry.register(ScaleUpCollector(held))

    def watch_scale_gates(self, written: Callable[[], Mapping[str, int]]) -> None:
        """raygate's scale gates on the RayClusters now, by reason, read at scrape time
        from ``written`` (the writer's)."""
        self.registry.register(ScaleGateCollector(written))

    def watch_tls(self, listener: str, reloader: CertReloader) -> None:
        """Certificate reloads of a listener, read at scrape time."""
        self._limits.certificates.append((listener, reloader))

    def watch_authz(self, counts: AuthzCounts) -> None:
        """What the status APIs' authorizer decided and asked, read at scrape time."""
        self.registry.register(AuthzCollector(counts))

    def watch_config(self, counts: Mapping[str, int]) -> None:
        """Config file reloads by result (``ok``, ``failed``), read at scrape time."""
        self._limits.config_reloads = counts

    def watch_leadership(self, leadership: Leadership) -> None:
        """Whether this replica leads, and its changes of leadership, read at scrape time."""
        self.registry.register(LeaderCollector(leadership))

    def exposition(self, _: bytes = b"") -> bytes:
        """The text exposition (the ``/metrics`` route's handler)."""
        return generate_latest(self.registry)


def metrics_routes(metrics: Metrics) -> dict[str, Route]:
    """``/metrics``: Prometheus' text exposition of ``metrics``' registry."""
    return {"/metrics": Route(b"GET", metrics.exposition, content_type=CONTENT_TYPE)}
