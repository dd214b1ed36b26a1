"""What the benchmark suite measures, as data: one row per measurement.

Nothing here runs anything. ``bench.runner`` reads these tables; a scenario is selected
for a run when it carries the run's label:

* ``fast`` — what CI runs (``make bench-ci``): a few seconds per measurement, the whole
  suite in well under 3 minutes;
* ``full`` — the release run whose table goes in the README (``make bench``).

Every HTTP scenario is measured against each contender in ``CONTENDERS`` in turn, on
the same payload bytes, after a check that both give the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "CLUSTER_NODES",
    "CONTENDERS",
    "FAST",
    "FULL",
    "HTTP_SCENARIOS",
    "MICRO",
    "PLANS",
    "ROTATED_PODS",
    "TARGETS",
    "HttpScenario",
    "MicroPlan",
    "Plan",
    "Shape",
    "Target",
    "Verb",
]

FAST = "fast"
FULL = "full"
BOTH = frozenset({FAST, FULL})
FULL_ONLY = frozenset({FULL})

CONTENDERS = ("raygate", "go")
"""``raygate serve`` and the standard-library Go peer (bench/peers/go-extender)."""

CLUSTER_NODES = 5000
"""Nodes in the cluster both servers load (15% GPU); requests name a prefix of them plus
~1% names neither server knows."""

ROTATED_PODS = 300
"""Distinct pending pods a rotating scenario sends in turn. kube-scheduler sends each pod
to filter once (then to prioritize, and again only on a retry), so filter meets a pod it has
not seen; raygate keeps the views of the last 256 request pods
(``raygate.server.fronts.scheduler.RequestPods``), and 300 pods in turn are never found there."""


@dataclass(frozen=True)
class Plan:
    """How long and how often each measurement runs under a label."""

    duration_s: float
    warmup_s: float
    passes: int
    """Passes over all scenarios; each pass alternates the contenders' order (A B, then
    B A), so a drift of the machine falls on both."""
    micro_max_time_s: float
    """pytest-benchmark's ``--benchmark-max-time`` per micro-benchmark."""


PLANS: dict[str, Plan] = {
    FAST: Plan(duration_s=1.0, warmup_s=0.2, passes=1, micro_max_time_s=0.1),
    FULL: Plan(duration_s=5.0, warmup_s=1.0, passes=2, micro_max_time_s=1.0),
}


class Verb(Enum):
    HEALTHZ = "healthz"  # GET /healthz: the empty round trip
    FILTER = "filter"  # POST /scheduler/filter, a pending floor worker: GPU nodes refused
    PRIORITIZE = "prioritize"  # POST /scheduler/prioritize, a pending overflow worker
    CYCLE = "cycle"  # filter (floor pod) then prioritize over the names that passed
    EMPTY_CYCLE = "2x healthz"  # two empty round trips back to back: the cycle's floor
    VOLCANO_PREDICATE = "volcano predicate"  # one (task, node): CPU node, then GPU node
    VOLCANO_PRIORITIZE = "volcano prioritize"  # one task, all candidate NodeInfos


class Shape(Enum):
    EMPTY = "empty"
    NAMES = "names"  # nodeCacheCapable: true, NodeNames
    NODELIST = "nodelist"  # nodeCacheCapable: false, a v1.NodeList of ~7 KB nodes
    NODEINFO = "nodeinfo"  # Volcano NodeInfo objects, each with its tasks' full Pods


@dataclass(frozen=True)
class HttpScenario:
    verb: Verb
    shape: Shape = Shape.EMPTY
    size: int = 0
    """Node names, Node objects or NodeInfos in one request."""
    pods_per_node: int = 0
    """Tasks in each Volcano NodeInfo."""
    connections: int = 1
    """Keep-alive connections of the load generator (closed loop)."""
    labels: frozenset[str] = FULL_ONLY

    @property
    def payload(self) -> str:
        """The request shape, without the concurrency: scenarios that share it share
        request bodies and answer checks."""
        if self.shape is Shape.EMPTY:
            return "-"
        if self.shape is Shape.NODEINFO:
            return f"{self.size} node x {self.pods_per_node} pods"
        return f"{self.shape.value} {self.size}"

    @property
    def paired(self) -> bool:
        """Two requests per unit, timed as one (per scheduled pod)."""
        return self.verb in (Verb.CYCLE, Verb.EMPTY_CYCLE)

    @property
    def rotates_pods(self) -> bool:
        """Each unit carries the next of ``ROTATED_PODS`` pods: filter and the scheduling
        cycle over node names, where a cluster sends a new pod. Prioritize alone repeats one
        pod (in a cluster it follows filter for the same pod); NodeList bodies too (3.6 MB
        each, 300 of them would be 1 GB; the pod is under 1 % of their work)."""
        return self.shape is Shape.NAMES and self.verb in (Verb.FILTER, Verb.CYCLE)

    @property
    def key(self) -> str:
        return f"{self.verb.value} | {self.payload} | c={self.connections}"


def _rows(verb: Verb, shape: Shape, sizes: tuple[int, ...], connections: tuple[int, ...], *,
          fast: frozenset[tuple[int, int]] = frozenset(),
          pods_per_node: int = 0) -> list[HttpScenario]:
    """One row per (size, connections); ``fast`` lists the pairs CI runs too."""
    return [HttpScenario(verb, shape, size, pods_per_node, c,
                         BOTH if (size, c) in fast else FULL_ONLY)
            for size in sizes for c in connections]


NAME_COUNTS = (100, 500, 1000, 5000)

HTTP_SCENARIOS: tuple[HttpScenario, ...] = (
    HttpScenario(Verb.HEALTHZ, connections=1, labels=BOTH),
    HttpScenario(Verb.HEALTHZ, connections=8),
    *_rows(Verb.FILTER, Shape.NAMES, NAME_COUNTS, (1, 8),
           fast=frozenset({(500, 1), (500, 8), (5000, 1), (5000, 8)})),
    *_rows(Verb.PRIORITIZE, Shape.NAMES, NAME_COUNTS, (1, 8),
           fast=frozenset({(500, 1), (500, 8), (5000, 1), (5000, 8)})),
    *_rows(Verb.FILTER, Shape.NODELIST, (500,), (1, 8), fast=frozenset({(500, 1)})),
    *_rows(Verb.PRIORITIZE, Shape.NODELIST, (500,), (1, 8)),
    *_rows(Verb.CYCLE, Shape.NAMES, NAME_COUNTS, (1,), fast=frozenset({(500, 1)})),
    HttpScenario(Verb.EMPTY_CYCLE, connections=1, labels=BOTH),
    # Volcano calls predicate once per (task, node) from 16 workers, 1 s timeout.
    *_rows(Verb.VOLCANO_PREDICATE, Shape.NODEINFO, (1,), (1, 16), pods_per_node=10,
           fast=frozenset({(1, 1), (1, 16)})),
    *_rows(Verb.VOLCANO_PREDICATE, Shape.NODEINFO, (1,), (1, 16), pods_per_node=100),
    *_rows(Verb.VOLCANO_PRIORITIZE, Shape.NODEINFO, (100,), (1,), pods_per_node=10,
           fast=frozenset({(100, 1)})),
    *_rows(Verb.VOLCANO_PRIORITIZE, Shape.NODEINFO, (100,), (1,), pods_per_node=100),
    *_rows(Verb.VOLCANO_PRIORITIZE, Shape.NODEINFO, (1000,), (1,), pods_per_node=10),
    # 1,000 nodes x 100 pods is a ~365 MB body: over raygate's 64 MiB request limit
    # (extender.http.DEFAULT_MAX_BODY); not measured.
)


@dataclass(frozen=True)
class MicroPlan:
    """Inputs of the in-process micro-benchmarks (bench/micro, pytest-benchmark)."""

    names: tuple[int, ...] = (100, 500, 5000)
    """kube-scheduler filter/prioritize requests with this many node names."""
    nodelist: tuple[int, ...] = (500,)
    """... and with a NodeList of this many nodes."""
    predicate_pods: tuple[int, ...] = (10, 100)
    """Volcano predicate: tasks on the node."""
    prioritize_nodeinfos: tuple[tuple[int, int], ...] = ((100, 10),)
    """Volcano prioritize: (nodes, tasks per node)."""
    preempt_node_pods: int = 100
    """preempt with substitution: pods on the candidate node."""
    admission_pods: int = 1000
    """admission-status derivation: pods of one RayCluster."""


MICRO = MicroPlan()


@dataclass(frozen=True)
class Target:
    """A goal of issue #6, checked and reported, never enforced: a slow machine must not
    fail CI."""

    text: str
    scenario: str
    """``HttpScenario.key`` of the measurement."""
    metric: str
    """``p50_ratio``, ``p99_ratio``, ``rps_ratio`` (raygate / Go), ``p50_us`` (raygate),
    or ``p50_vs_healthz`` (raygate's p50 over its own empty round trip)."""
    bound: float
    at_least: bool
    """True: the value must be >= bound; False: <= (or < for absolute latencies)."""


def _ratio_targets(verb: Verb, size: int) -> list[Target]:
    c8 = f"{verb.value} | names {size} | c=8"
    c1 = f"{verb.value} | names {size} | c=1"
    return [
        Target(f"{verb.value} {size} names: req/s >= 2x Go (c=8)", c8, "rps_ratio", 2.0, True),
        Target(f"{verb.value} {size} names: p99 <= 0.5x Go (c=1)", c1, "p99_ratio", 0.5, False),
    ]


TARGETS: tuple[Target, ...] = (
    *_ratio_targets(Verb.FILTER, 500),
    *_ratio_targets(Verb.FILTER, 5000),
    *_ratio_targets(Verb.PRIORITIZE, 500),
    *_ratio_targets(Verb.PRIORITIZE, 5000),
    Target("NodeList 500 filter: req/s >= 3x Go (c=8)", "filter | nodelist 500 | c=8",
           "rps_ratio", 3.0, True),
    Target("NodeList 500 filter: req/s >= 3x Go (c=1; fast runs only measure c=1)",
           "filter | nodelist 500 | c=1", "rps_ratio", 3.0, True),
    Target("filter 500 names: p50 <= 1.5x raygate's own GET /healthz (c=1)",
           "filter | names 500 | c=1", "p50_vs_healthz", 1.5, False),
    Target("scheduling cycle 500 names: p50 < 1 ms per pod", "cycle | names 500 | c=1",
           "p50_us", 1000.0, False),
)
