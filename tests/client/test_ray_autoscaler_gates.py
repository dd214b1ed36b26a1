"""KubeRay's worker-group scale gates (``scaleStrategy.scaleGate``) under the real Ray 2.60.0
autoscaler v2, offline, stock and ``raygate-autoscaler`` side by side
(``tests/ray_autoscaler_harness.py``; raygate is the real server on loopback).

Two worker groups of the same shape: ``large`` (priority 10), preferred, with a pending
worker that waits for a node, and ``small`` (priority 0), whose workers start. Ray 2.60
does not read the gates; ``raygate-autoscaler`` stops counting on the gated group's
pending worker (the pod stays: a gate may rest on it) and lets the demand go to
``small`` at once, honours raygate's own gates only while raygate answers, sends demand
to ``large`` again as soon as the gate lifts, and keeps the gates through a scale-down.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.ray_required import RAY_MISSING

if RAY_MISSING:
    pytest.skip(RAY_MISSING, allow_module_level=True)

from testkit.builders import T0_EPOCH, Obj, iso, make_pod
from tests.conftest import ServerThread
from tests.ray_autoscaler_harness import Bench, Side
from tests.ray_autoscaler_scenes import (
    CLUSTER,
    HOUR,
    closed_port,
    first,
    head,
    loops,
    raycluster,
    side_by_side,
    started,
    unjudged,
    waiting_for_cpu,
)

pytestmark = pytest.mark.ray

KUEUE = "kueue.k8s.io/quota-exceeded"
NO_NODE = "raygate.io/no-node-coming"
PENDING = f"{CLUSTER}-large-a"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, server: ServerThread) -> Iterator[Bench]:
    server.clock.now = T0_EPOCH
    bench = Bench(monkeypatch, server.clock)
    yield bench
    bench.close()


def bound(name: str, group: str, now: float) -> Obj:
    """Bound to a node, its container not started yet: pending to Ray (ALLOCATED)."""
    return (make_pod(name).ray(CLUSTER, group).created(iso(now)).on("cpu-node-3")
            .condition("PodScheduled", "True", at=iso(now)).obj())


def gated(key: str | None, gate: str | None) -> Obj:
    """``large`` (1 replica, priority 10) gated by ``gate`` (an entry keyed ``key``),
    ``small`` (0, priority 0)."""
    cluster = raycluster(("large", 1, 10), ("small", 0, 0))
    if key is not None and gate is not None:
        cluster["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {"scaleGate": [{key: gate}]}
    return cluster


def new_pod(name: str, group: str, now: float) -> Obj:
    """``small`` has room, ``large`` has none."""
    return (started if group == "small" else waiting_for_cpu)(name, group, now)


def strategy(side: Side, group: str) -> Any:
    return side.kube.group(group).get("scaleStrategy")


@dataclass(frozen=True)
class Case:
    key: str | None
    gate: str | None
    answers: bool
    """Whether raygate answers (else nothing listens at RAYGATE_URL)."""
    honoured: bool
    failed_open: int = 0
    """raygate's gates left unhonoured (each once per outage)."""
    pod: Any = waiting_for_cpu


CASES = {
    "ungated": Case(None, None, True, False),
    "foreign-type": Case("type", KUEUE, True, True),
    "foreign-name": Case("name", KUEUE, True, True),
    "raygates-type": Case("type", NO_NODE, True, True),
    "raygates-name": Case("name", NO_NODE, True, True),
    "raygates-unreachable": Case("type", NO_NODE, False, False, failed_open=1),
    "foreign-unreachable": Case("type", KUEUE, False, True),
    "bound-pod": Case("type", KUEUE, True, False, pod=bound),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_gated_group_gives_up_its_pending_worker_and_the_demand_moves(
        bench: Bench, server: ServerThread, case: Case,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="raygate.autoscaler")
    clock = server.clock
    pods = [head(clock.now), case.pod(PENDING, "large", clock.now)]
    stock, raygate = side_by_side(bench, server, gated(case.key, case.gate), pods,
                                  [({"CPU": 1.0}, 1)], new_pod=new_pod,
                                  url=None if case.answers else closed_port())

    for _ in loops(stock, raygate, clock=clock, until=600, every=30):
        pass

    # Ray 2.60 reads no gate: the pending worker stays (until its hour is up).
    assert all(w == {PENDING: "ALLOCATED"} for _, w in stock.history)
    assert stock.kube.patches == []
    assert raygate.provider.gates.failed_open == case.failed_open
    if not case.honoured:
        assert raygate.history == stock.history
        assert raygate.kube.patches == []
        return
    # The pending worker stays, uncounted; small gets the demand in the same loop.
    assert all(w.get(PENDING) == "ALLOCATED" for _, w in raygate.history)
    assert raygate.kube.deleted == []
    assert launches(raygate) == [(0, "small", 1)]
    assert first(raygate, lambda w: "RAY_RUNNING" in w.values()) == 30
    assert raygate.workers() == {PENDING: "ALLOCATED",
                                 f"{CLUSTER}-small-worker-n0": "RAY_RUNNING"}
    assert strategy(raygate, "large") == {"scaleGate": [{case.key: case.gate}]}
    # No ALLOCATION_TIMEOUT: large is not ranked down for when the gate lifts.
    assert raygate.autoscaler._cloud_resource_monitor.get_resource_availabilities() == {}
    said = [r.getMessage() for r in caplog.records if r.name == "raygate.autoscaler"
            and "gated" in r.getMessage()]
    assert said == [
        f"worker group large is gated ({case.gate}): no new workers, its pending ones not "
        "counted on, demand goes to the other groups",
        f"raygate: not counting on pending worker {PENDING} while worker group large is "
        f"gated ({case.gate}): the demand goes to other groups; the pod stays"]


def launches(side: Side) -> list[tuple[float, str, int]]:
    """(seconds since T0, group, replicas) of each scale-up written."""
    groups = [g["groupName"] for g in side.kube.cluster["spec"]["workerGroupSpecs"]]
    return [(when - T0_EPOCH, groups[int(op["path"].split("/")[3])], op["value"])
            for when, patch in side.kube.patches for op in patch
            if op["path"].endswith("/replicas") and op["op"] == "replace"
            and op["value"] > 0]


def test_when_the_gate_lifts_new_demand_goes_to_the_preferred_group_at_once(
        bench: Bench, server: ServerThread) -> None:
    """After the loop at 120 s the gate goes, large's pending worker gets its node, and a
    third worker is asked for: it is large's, launched in the next loop (after an
    ALLOCATION_TIMEOUT, Ray 2.60 would rank large below small for
    RAY_AUTOSCALER_AVAILABILITY_RECOVERY_S, 600 s)."""
    clock = server.clock
    pods = [head(clock.now), waiting_for_cpu(PENDING, "large", clock.now)]
    demand = [({"CPU": 1.0}, 1)]
    _, raygate = side_by_side(bench, server, gated("type", NO_NODE), pods, demand,
                              new_pod=new_pod)
    for elapsed in loops(raygate, clock=clock, until=240, every=30):
        if elapsed == 120:
            del raygate.kube.group("large")["scaleStrategy"]["scaleGate"]
            raygate.kube.touch()
            raygate.kube.pods[PENDING] = started(PENDING, "large", clock.now)
            demand[0] = ({"CPU": 1.0}, 3)

    assert launches(raygate) == [(0, "small", 1), (150, "large", 2)]
    assert raygate.workers()[PENDING] == "RAY_RUNNING"


def test_raygates_gate_is_ignored_while_raygate_is_silent_and_honoured_again_after(
        bench: Bench, server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    """raygate answers, then (120-270 s) knows nothing of the cluster, then answers
    again. While it is silent its gate does not count: large's pending worker counts
    again, and a third worker asked for from 120 s is large's; once raygate answers,
    neither pending worker of large is counted on and small gets the demand. One
    warning, one line when it ends, one gate failed open."""
    caplog.set_level(logging.INFO, logger="raygate.autoscaler")
    clock = server.clock
    pods = [head(clock.now), waiting_for_cpu(PENDING, "large", clock.now)]
    demand = [({"CPU": 1.0}, 1)]
    _, raygate = side_by_side(bench, server, gated("type", NO_NODE), pods, demand,
                              new_pod=new_pod)

    def publish() -> None:
        silent = 120 <= clock.now - T0_EPOCH < 270
        server.publish(*(() if silent else raygate.kube.objects()))

    raygate.before_loop = publish
    for elapsed in loops(raygate, clock=clock, until=330, every=30):
        if elapsed == 90:
            demand[0] = ({"CPU": 1.0}, 3)

    assert launches(raygate) == [(0, "small", 1), (120, "large", 2), (270, "small", 3)]
    assert raygate.kube.deleted == []
    assert strategy(raygate, "large") == {"scaleGate": [{"type": NO_NODE}]}
    assert raygate.provider.gates.failed_open == 1
    said = [(r.levelname, r.getMessage().split(" (", 1)[0]) for r in caplog.records
            if r.name == "raygate.autoscaler" and "scale gates" in r.getMessage()]
    assert said == [
        ("WARNING", "raygate does not answer: not honouring its scale gates"),
        ("INFO", "raygate's scale gates are honoured again")]


def test_a_scale_down_keeps_the_gates(bench: Bench, server: ServerThread) -> None:
    """large, gated by Kueue, has a pending worker nothing explains: raygate says Stuck
    after 120 s and it is replaced; the scale-down writes workersToDelete alone. Ray 2.60
    deletes it at its hour, writing the group's whole scaleStrategy: the gate is gone."""
    clock = server.clock
    pods = [head(clock.now), unjudged(PENDING, "large", clock.now)]
    stock, raygate = side_by_side(bench, server, gated("type", KUEUE), pods,
                                  [({"CPU": 1.0}, 1)], new_pod=new_pod)

    for _ in loops(stock, raygate, clock=clock, until=2 * HOUR, every=600):
        pass

    assert stock.kube.deleted[0] == raygate.kube.deleted[0] == PENDING
    assert "scaleGate" not in strategy(stock, "large")
    assert strategy(raygate, "large")["scaleGate"] == [{"type": KUEUE}]


def test_a_gated_group_that_fits_the_demand_best_is_passed_over(
        bench: Bench, server: ServerThread) -> None:
    """large's workers have 2 CPUs: Ray's scheduler scores them above small's for two
    1-CPU tasks, before availability or priority. Gated, large is not a candidate at
    all: small gets two workers in the first loop, and no launch of large is refused."""
    clock = server.clock
    cluster = gated("type", KUEUE)
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 0
    resources = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0][
        "resources"]
    for kind in ("requests", "limits"):
        resources[kind]["cpu"] = "2"
    stock, raygate = side_by_side(bench, server, cluster, [head(clock.now)],
                                  [({"CPU": 1.0}, 2)], new_pod=new_pod)

    for _ in loops(stock, raygate, clock=clock, until=120, every=30):
        pass

    assert stock.kube.created == [f"{CLUSTER}-large-worker-n0"]
    assert raygate.kube.created == [f"{CLUSTER}-small-worker-n0",
                                    f"{CLUSTER}-small-worker-n1"]
    assert raygate.failed_launches() == []
    assert strategy(raygate, "large") == {"scaleGate": [{"type": KUEUE}]}


def test_a_gate_written_just_before_a_scale_down_is_kept(
        bench: Bench, server: ServerThread) -> None:
    """The first scale-down of a group with no scaleStrategy: between Ray's read and its
    write, Kueue gates the group. The write, made on the version read, is refused; Ray
    retries it in the next loop, as workersToDelete alone: Kueue's gate stays."""
    clock = server.clock
    pods = [head(clock.now), unjudged(PENDING, "large", clock.now)]
    _, raygate = side_by_side(bench, server, gated(None, None), pods, [({"CPU": 1.0}, 1)],
                              new_pod=new_pod)

    def kueue() -> None:
        large = raygate.kube.group("large")
        if "scaleStrategy" not in large:
            large["scaleStrategy"] = {"scaleGate": [{"type": KUEUE}]}
            raygate.kube.touch()

    raygate.kube.before_patch = kueue
    for _ in loops(raygate, clock=clock, until=300, every=30):
        pass

    # raygate says Stuck at 120 s (no scheduler verdict): replace it. That write is
    # refused; the retry at 150 s writes workersToDelete alone, and KubeRay deletes the
    # pod (the list is cleared with Ray's next scale request, as ever).
    (refused,) = raygate.kube.refused
    assert refused[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "1000"}
    assert [when - T0_EPOCH for when, _ in raygate.kube.patches] == [120, 150]
    assert raygate.kube.deleted == [PENDING]
    assert strategy(raygate, "large") == {"scaleGate": [{"type": KUEUE}],
                                          "workersToDelete": [PENDING]}
    assert raygate.workers() == {f"{CLUSTER}-small-worker-n0": "RAY_RUNNING"}


def test_a_gate_that_rests_on_the_pending_pods_holds(
        bench: Bench, server: ServerThread) -> None:
    """A writer that gates large exactly while a pod of it pends, as raygate's rules do
    (no node comes for it). Deleting that pod would lift the gate, and large would be
    tried again, a pod every other loop: the pod stays, the gate with it, and small
    takes the whole demand."""
    clock = server.clock
    pods = [head(clock.now), waiting_for_cpu(PENDING, "large", clock.now)]
    _, raygate = side_by_side(bench, server, gated(None, None), pods, [({"CPU": 1.0}, 3)],
                              new_pod=new_pod)
    publish = raygate.before_loop

    def writer() -> None:
        strategy = raygate.kube.group("large").setdefault("scaleStrategy", {})
        if raygate.kube.group_pods("large"):
            strategy["scaleGate"] = [{"type": NO_NODE}]
        else:
            strategy.pop("scaleGate", None)
        raygate.kube.touch()
        publish()

    raygate.before_loop = writer
    for _ in loops(raygate, clock=clock, until=600, every=5):
        pass

    assert raygate.kube.created == [f"{CLUSTER}-small-worker-n{n}" for n in range(3)]
    assert raygate.kube.deleted == []
    assert launches(raygate) == [(0, "small", 3)]
