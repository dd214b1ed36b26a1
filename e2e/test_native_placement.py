"""Native placement under faults, for real: raygate's gate (``raygate.io/placement``) and
its release when the leading replica is killed mid-burst, when kube-apiserver restarts
mid-burst, and when raygate is down as pods are created or while they are gated (issue
#26, "Done means: Faults", and item 4's "raygate down").

Two replicas: the testbed's raygate and a second ``raygate serve`` with the same
ServiceAccount, settings and webhook certificate, its own ports, ``POD_NAME`` of its own
and ``POD_NAMESPACE=raygate-system``: both contend for the Lease ``raygate-system/raygate``.
Both serve the webhook: deploy/native-placement's configuration names the testbed's
replica (as the testbed installs it), a second one, for the scenario's namespace alone,
the second replica. A pod is gated while either is up (the one called second finds the
gate there), as behind deploy/'s Service over both replicas, less the calls a Service
sends to a dead endpoint before it is taken out (``failurePolicy: Ignore``: ungated).

Release times come from the scenario's pod watch: a pod's ADDED event (gated) to its first
event without the gate (creationTimestamp has 1 s granularity). Bounds on the last release:
after a leader's SIGKILL, a lease and a retry (the survivor's takeover) plus the release of
what waits; after a restart of the only replica, a lease and a retry from its readiness too
(its new identity waits out its predecessor's Lease); after kube-apiserver's restart, the
watches' relist backoff (30 s at most) plus the release of what waits.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e import report
from e2e.objects import Group, node, raycluster
from e2e.replicas import SECOND, Replicas, leads
from e2e.scenario import Scenario, wait_until
from raygate.client import connect
from raygate.plugin.budgets import budget_name
from raygate.plugin.native import GATE, LABEL_ROLE, LABEL_RULE
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

BURST, FLOOR, GROUP = 200, 50, "burst"
"""The burst: a worker group of BURST replicas, minReplicas FLOOR, in-tree autoscaling."""
FAULT_AFTER = 50
"""Released pods (of BURST + 1) when the fault comes: mid-burst, mid-releases."""
RELEASES_PER_SECOND = 5.0
"""Releases (patches answered) a raygate makes at the least on CI's 2 cores; 9 to 10 a
second measured here, where the same process answers the webhook and the extender and
follows the burst's watch events."""
NOT_GPU = [{"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]
"""deploy/'s ``gpuNodeLabels`` as the native rule writes it."""
CONSISTENT = {"head": ("head", "head-avoids-gpu", "required"),
              "floor": ("floor", "floor-avoids-gpu", "required"),
              "surplus": ("surplus", "surplus-prefers-cpu", "preferred")}
"""A released pod's role label, rule label and native rule, as they go together."""


def is_gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates") or [])


class Gates:
    """Fed by the scenario's pod watch: when each pod was first seen, whether it carried
    raygate's gate then, and when it was first seen without it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.added: dict[str, float] = {}
        self.gated: set[str] = set()
        self.released: dict[str, float] = {}

    def __call__(self, kind: str, pod: dict[str, Any]) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        held = is_gated(pod)
        with self._lock:
            if name not in self.added:
                self.added[name] = now
                if held:
                    self.gated.add(name)
            if not held and name in self.gated:
                self.released.setdefault(name, now)

    def counts(self) -> tuple[int, int, int]:  # seen, gated when first seen, released
        with self._lock:
            return len(self.added), len(self.gated), len(self.released)

    def held(self) -> set[str]:
        with self._lock:
            return self.gated - set(self.released)

    def waits(self, before: float = math.inf) -> list[float]:
        """Seconds from ADDED to released, of the pods released before ``before``."""
        with self._lock:
            return sorted(t - self.added[n] for n, t in self.released.items() if t < before)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


@pytest.fixture(scope="module", autouse=True)
def leader_after(testbed: Testbed) -> Iterator[None]:
    """Leave the testbed's raygate leading for the scenarios after these: one restarted
    after a SIGKILL waits out its predecessor's lease."""
    yield
    wait_until("the testbed's raygate leading", lambda: leads(testbed.raygate_url),
               timeout=30)


@pytest.fixture
def gates(scenario: Scenario) -> Gates:
    scenario.observers.append(made := Gates())
    return made


@pytest.fixture
def replicas(testbed: Testbed, scenario: Scenario) -> Iterator[Replicas]:
    made = Replicas(testbed, scenario.namespace)
    yield made
    made.close()
    testbed.kubectl("delete", "namespace", scenario.namespace, "--wait=false",
                    "--ignore-not-found")


def placement(pod: dict[str, Any]) -> tuple[str, str, str]:
    """The pod's role and rule labels, and the native rule its affinity holds
    (``required``, ``preferred``, ``none``, else the affinity itself)."""
    labels = pod["metadata"].get("labels") or {}
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms")
    preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    native = ("none" if not affinity
              else "required" if required == [{"matchExpressions": NOT_GPU}] and not preferred
              else "preferred" if not required and preferred == [
                  {"weight": 100, "preference": {"matchExpressions": NOT_GPU}}]
              else json.dumps(affinity, sort_keys=True))
    return labels.get(LABEL_ROLE, ""), labels.get(LABEL_RULE, ""), native


def placements(scenario: Scenario, cluster: str) -> Counter[tuple[str, str, str]]:
    """Of the cluster's pods, none gated (asserted): how many of each placement."""
    pods = scenario.live_pods(f"ray.io/cluster={cluster}")
    assert not [p["metadata"]["name"] for p in pods if is_gated(p)]
    return Counter(placement(p) for p in pods)


def expected(floor: int, surplus: int) -> Counter[tuple[str, str, str]]:
    return Counter(dict(zip(CONSISTENT.values(), (1, floor, surplus), strict=True)))


def budgets_converge(scenario: Scenario, cluster: str, group: str, floor: int) -> float:
    """Seconds until raygate's budgets hold the floor: the head's 1, the group's."""
    path = f"/apis/policy/v1/namespaces/{scenario.namespace}/poddisruptionbudgets"
    want = {budget_name(cluster, "headgroup"): 1, budget_name(cluster, group): floor}
    began = time.monotonic()
    wait_until(f"budgets {want}", lambda: {
        b["metadata"]["name"]: b["spec"]["minAvailable"]
        for b in scenario.api.items(path)} == want, timeout=60)
    return time.monotonic() - began


def burst(scenario: Scenario, gates: Gates, fault: Callable[[], str],
          bound: Callable[[int], float]) -> tuple[dict[str, str], int]:
    """Four CPU nodes, a RayCluster of a head and BURST workers; ``fault()`` once
    FAULT_AFTER pods are released; every pod released within ``bound(waiting)`` seconds
    of the fault (read after it; ``waiting``: the pods not released at the fault),
    with consistent labels, the budgets converged, every pod bound. Returns the numbers
    and how many pods were released with no rule where their labels name one."""
    name = scenario.name
    scenario.setup([node(f"{name}-cpu-{i}", name, cpu=16) for i in range(4)])
    scenario.create(raycluster("burst", scenario.namespace, name,
                               [Group(GROUP, BURST, "100m", min=FLOOR, max=BURST)]))
    wait_until(f"{FAULT_AFTER} pods released", lambda: gates.counts()[2] >= FAULT_AFTER,
               timeout=90, every=0.02)
    seen, _, released = gates.counts()
    faulted = time.monotonic()
    scenario.step(f"{fault()}, at {seen} pods created and {released} released")
    within = bound(BURST + 1 - released)
    wait_until("every pod created and released", lambda: gates.counts()[0] == BURST + 1
               and not gates.held(), timeout=within + 30)
    last = max(gates.released.values()) - faulted
    scenario.step(f"every pod released, the last {last:.1f} s after the fault")
    assert last <= within, f"the last release came {last:.1f} s after the fault: > {within:.0f}"
    found = placements(scenario, "burst")
    labelled = Counter({(role, rule): 0 for role, rule, _ in CONSISTENT.values()})
    for (role, rule, _), count in found.items():
        labelled[role, rule] += count
    assert labelled == Counter({k[:2]: v for k, v in expected(FLOOR, BURST - FLOOR).items()})
    bare = {k: v for k, v in found.items() if k not in CONSISTENT.values()}
    assert all(native == "none" for _, _, native in bare), found
    converged = budgets_converge(scenario, "burst", GROUP, FLOOR)
    wait_until("every pod bound", lambda: sum(h.bound is not None for h in scenario.history())
               == BURST + 1, timeout=90)
    scenario.step("every pod bound by kube-scheduler")
    before, waits = gates.waits(faulted), gates.waits()
    return {
        "pods gated at creation": f"{len(gates.gated)} of {BURST + 1}",
        "released with no rule (labels name one)": f"{sum(bare.values())}",
        "at the fault: created, released": f"{seen}, {released}",
        "last release after the fault (s)": f"{last:.1f} (bound {within:.0f})",
        "labelled head / floor / surplus": f"1 / {FLOOR} / {BURST - FLOOR} (exact)",
        "budgets (head 1, group FLOOR) after all released (s)": f"{converged:.1f}",
        "creation to release before the fault, p50 / p99 (s)":
            f"{percentile(before, .5):.2f} / {percentile(before, .99):.2f} ({len(before)})",
        "creation to release, whole burst, p50 / p99 (s)":
            f"{percentile(waits, .5):.2f} / {percentile(waits, .99):.2f} ({len(waits)})",
    }, sum(bare.values())


def section(scenario: Scenario, title: str, numbers: dict[str, str], *,
            pods: bool = False) -> str:
    """The scenario's steps (and its pods' timeline when ``pods``), then ``numbers``."""
    text = scenario.timeline(title)
    if not pods:
        text = text.split("\n\n| pod |")[0] + "\n"
    rows = "\n".join(f"| {what} | {value} |" for what, value in numbers.items())
    print(f"\n{title}\n{rows}", file=sys.stderr)
    return f"{text}\n| measured | |\n|---|---:|\n{rows}\n"


def test_two_replicas_the_leader_killed_mid_burst(scenario: Scenario,
                                                  replicas: Replicas, gates: Gates) -> None:
    replicas.start_second()
    scenario.step(f"{SECOND} started; it serves the webhook too")
    leader = replicas.leader()
    (survivor,) = set(replicas.urls) - {leader}
    took: list[float] = []

    def kill_leader() -> str:
        replicas.kill(leader)
        killed = time.monotonic()
        wait_until(f"{survivor} leading", lambda: leads(replicas.urls[survivor]),
                   timeout=replicas.lease + replicas.retry + 5, every=0.1)
        took[:] = [time.monotonic() - killed, time.monotonic()]
        return f"SIGKILL to the leader, {leader}"

    started = time.monotonic()
    # The survivor takes the Lease once it has seen it unchanged for a lease (then at its
    # next retry), and releases what waits.
    numbers, bare = burst(scenario, gates, kill_leader, lambda waiting: replicas.lease
                          + replicas.retry + 2 + waiting / RELEASES_PER_SECOND)
    after = sorted(t for t in gates.released.values() if t > took[1])
    numbers = {f"{survivor} leading after the kill (s)": f"{took[0]:.1f}",
               f"{survivor}'s releases after it leads": f"{len(after)} in "
               f"{after[-1] - took[1]:.1f} s", **numbers}
    numbers["scenario (s)"] = f"{time.monotonic() - started:.0f}"
    report.add("native-placement-1-failover", section(scenario, (
        f"Native placement: two replicas, the leader SIGKILLed mid-burst ({BURST} workers, "
        f"floor {FLOOR})"), numbers))
    assert bare == 0


def test_apiserver_restarted_mid_burst(scenario: Scenario, testbed: Testbed,
                                       replicas: Replicas, gates: Gates) -> None:
    replicas.leader()
    restart: list[float] = []

    def restart_apiserver() -> str:
        began = time.monotonic()
        testbed.restart_apiserver()
        restart.append(time.monotonic() - began)
        return f"kube-apiserver restarted ({restart[0]:.1f} s until ready)"

    started = time.monotonic()
    # Raygate's watches relist after backoffs that grew while the server was away (at
    # most 30 s, resilience-2); a refused release is tried again after 1, 2, 4 s.
    numbers, bare = burst(scenario, gates, restart_apiserver,
                          lambda waiting: restart[0] + 30 + waiting / RELEASES_PER_SECOND)
    # The pods first seen on the watch's relist count from then: no creation time.
    del numbers["creation to release, whole burst, p50 / p99 (s)"]
    numbers["scenario (s)"] = f"{time.monotonic() - started:.0f}"
    report.add("native-placement-2-apiserver", section(scenario, (
        f"Native placement: kube-apiserver restarted mid-burst ({BURST} workers, "
        f"floor {FLOOR})"), numbers))
    # A restarting API server (503, refused connections, 403 while its authorizer warms
    # up) is waited for: no pod loses its rule to it.
    assert bare == 0


def small_cluster(scenario: Scenario, cluster: str) -> None:
    """A head and 3 workers of 1 CPU, minReplicas 2 (floor 2, surplus 1)."""
    scenario.create(raycluster(cluster, scenario.namespace, scenario.name,
                               [Group("work", 3, "1", min=2, max=4)]))


def admission(testbed: Testbed, token: str, namespace: str, name: str) -> dict[str, Any]:
    with connect(testbed.raygate_url, token=lambda: token) as client:
        status = client.get(namespace, name)
    return {"admitted": status.gang.admitted, "pods": [p.name for p in status.pods],
            "groups": {g.name: (g.floor, g.desired, g.scheduled, g.running, g.pending)
                       for g in status.groups}}


def test_raygate_down_pods_created_ungated_then_it_catches_up(
        scenario: Scenario, testbed: Testbed, replicas: Replicas, gates: Gates,
        reader_token: str) -> None:
    started = time.monotonic()
    scenario.setup([node(f"{scenario.name}-cpu", scenario.name, cpu=16)])
    replicas.kill("raygate")
    scenario.step("raygate killed (SIGKILL): nothing serves the webhook")
    small_cluster(scenario, "bare")
    wait_until("the head and 3 workers running", lambda: len(scenario.running("headgroup"))
               == 1 and len(scenario.running("work")) == 3, timeout=90)
    # failurePolicy Ignore: created as they were; the extender (ignorable) was not asked.
    assert not gates.gated and gates.counts()[0] == 4
    assert placements(scenario, "bare") == Counter({("", "", "none"): 4})
    scenario.step("4 pods created ungated and bound by kube-scheduler without raygate")

    back = time.monotonic()
    testbed.start_raygate()
    up = time.monotonic() - back
    scenario.step(f"raygate started again ({up:.1f} s until ready)")
    converged = budgets_converge(scenario, "bare", "work", 2)
    status = wait_until("raygate's admission status", lambda: (
        s := admission(testbed, reader_token, scenario.namespace, "bare"))["groups"].get(
            "work", (0,) * 5)[3] == 3 and s, timeout=30)
    assert status == {"admitted": True, "pods": [], "groups": {
        "headgroup": (1, 1, 1, 1, 0), "work": (2, 3, 3, 3, 0)}}, status
    time.sleep(replicas.retry)  # a wrongful release would come now: there is no gate
    assert placements(scenario, "bare") == Counter({("", "", "none"): 4})
    scenario.step("budgets written (head 1, work 2); status: admitted, 3 of 3 running")
    report.add("native-placement-3-down-at-creation", section(scenario, (
        "Native placement: raygate down while a RayCluster's pods are created"), {
        "pods gated": "0 of 4", "raygate ready after start (s)": f"{up:.1f}",
        "budgets after ready (s)": f"{converged:.1f}",
        "scenario (s)": f"{time.monotonic() - started:.0f}"}, pods=True))


def test_gated_pods_wait_while_no_replica_is_up(scenario: Scenario, testbed: Testbed,
                                               replicas: Replicas, gates: Gates) -> None:
    started = time.monotonic()
    scenario.setup([node(f"{scenario.name}-cpu", scenario.name, cpu=16)])
    replicas.start_second()
    scenario.step(f"{SECOND} started; it serves the webhook too")
    first = replicas.leader()
    (other,) = set(replicas.urls) - {first}
    replicas.kill(first)
    killed = time.monotonic()
    scenario.step(f"SIGKILL to the leader, {first}: {other} gates, its lease not run out")
    small_cluster(scenario, "held")
    wait_until("4 pods gated", lambda: gates.counts()[1] == 4, timeout=30, every=0.05)
    assert not leads(replicas.urls[other])
    replicas.kill(other)
    # The follower takes the Lease only once it has seen it unchanged for a lease.
    assert time.monotonic() - killed < replicas.lease - replicas.retry
    scenario.step(f"SIGKILL to {other} too, {time.monotonic() - killed:.1f} s after")
    time.sleep(3)
    assert gates.held() == gates.gated and len(gates.gated) == 4, "no replica: still gated"
    scenario.step("3 s with no replica: the 4 pods still gated")

    back = time.monotonic()
    testbed.start_raygate()
    ready = time.monotonic()
    scenario.step(f"raygate started again ({ready - back:.1f} s until ready)")
    # A restarted replica has a new identity: it takes the Lease its predecessor held
    # only once it has seen it unchanged for a lease (then at its next retry).
    within = replicas.lease + replicas.retry + 5
    wait_until("the 4 pods released", lambda: not gates.held(), timeout=within + 30)
    last = max(gates.released.values()) - ready
    scenario.step(f"the 4 pods released, the last {last:.1f} s after raygate was ready")
    assert last <= within, f"released {last:.1f} s after raygate was ready: > {within:.0f}"
    assert placements(scenario, "held") == expected(2, 1)
    converged = budgets_converge(scenario, "held", "work", 2)
    report.add("native-placement-4-down-while-gated", section(scenario, (
        "Native placement: pods gated, then no replica up; raygate started again"), {
        "raygate ready after start (s)": f"{ready - back:.1f}",
        "last release after raygate was ready (s)": f"{last:.1f} (bound {within:.0f})",
        "released as head / floor / surplus": "1 / 2 / 1",
        "budgets after the releases (s)": f"{converged:.1f}",
        "scenario (s)": f"{time.monotonic() - started:.0f}"}, pods=True))
