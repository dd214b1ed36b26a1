"""``GateRelease``: the release of gated pods, over a real ``ClusterCache``, with a fake
API server that applies each JSON Patch to its pods (jsonpatch) and publishes the result
late, as a watch does. The fake exists for what the real one cannot be made to do on cue:
fail a write, answer a conflict, lag. The real kube-apiserver's answers are in
e2e/test_native_placement.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from raygate.policy.config import NodeAutoscaler, PolicyConfig
from raygate.policy.native import GATE, LABEL_ROLE, LABEL_RULE
from raygate.policy.scale_up import ALL_OR_NOTHING, ANNOTATION, KUEUE_GATE
from raygate.server.cache.cluster import ClusterCache
from raygate.server.controllers.events import EventRecorder
from raygate.server.controllers.gate_release import FAIL_OPEN_AFTER, GateRelease
from raygate.server.kube.transport import ApiError, TransportError
from raygate.server.metrics.registry import Metrics
from testkit.builders import T0_EPOCH, Obj, iso, make_node, make_pod, make_raycluster
from tests.conftest import FakeClock, snapshot_of
from tests.controllers.event_api import FakeEventApi, told

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


class FakeApi:
    """Pods by name; ``patch`` applies a JSON Patch all or nothing (422 when a ``test``
    fails), unless ``fail`` says otherwise for that call."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []
        self.fail: Callable[[str], Exception | None] = lambda name: None
        self.lock = threading.Lock()
        self.events = FakeEventApi()
        self.said: list[tuple[str, str]] = []
        """``(object, reason)`` of each Event said, once ``run`` is done."""

    def patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        with self.lock:
            self.calls.append((name, ops))
            error = self.fail(name)
            if error is not None:
                raise error
            for i, obj in enumerate(self.objects):
                if obj["metadata"].get("name") == name and obj["kind"] == "Pod":
                    try:
                        self.objects[i] = jsonpatch.apply_patch(obj, ops)
                    except jsonpatch.JsonPatchException as exc:
                        raise ApiError(422, "Invalid", str(exc)) from None
                    return
            raise ApiError(404, "NotFound", name)

    def pod(self, name: str) -> Obj:
        return next(o for o in self.objects if o["metadata"]["name"] == name)


def run(api: FakeApi, steps: Callable[[GateRelease, ClusterCache, FakeClock],
                                      Any], **options: Any) -> Metrics:
    """``steps`` against a controller; what it says is in ``api.said`` after."""
    metrics = Metrics()
    clock = FakeClock(T0_EPOCH)
    events = EventRecorder(api.events, metrics, "raygate-0", clock=clock)

    async def main() -> None:
        cache = ClusterCache(PolicyConfig(), "test")
        cache.publish(snapshot_of(*api.objects))
        native = GateRelease(cache, clock, api.patch, metrics, tick_seconds=0.01,
                                 retry_seconds=0.01, events=events, **options)
        native.attach(asyncio.get_running_loop())
        try:
            await steps(native, cache, clock)
        finally:
            native.close()

    asyncio.run(main())
    api.said = told(events, api.events)
    return metrics


async def settle(seconds: float = 0.2) -> None:
    await asyncio.sleep(seconds)


def burst(count: int, floor: int) -> list[Obj]:
    cluster = (make_raycluster("rc").autoscaling()
               .group("g", replicas=count, min=floor, max=count).obj())
    head = make_pod("rc-head").head("rc").gated(GATE).created(iso(T0_EPOCH)).obj()
    return [cluster, head, *(make_pod(f"w{i}").ray("rc", "g").gated(GATE)
                             .created(iso(T0_EPOCH + i)).obj() for i in range(count))]


def test_a_burst_is_released_once_each_floor_first() -> None:
    api = FakeApi(burst(5, 2))

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        await settle()
        cache.publish(snapshot_of(*api.objects))  # the watch catches up
        await settle()

    metrics = run(api, steps)
    assert sorted(name for name, _ in api.calls) == ["rc-head", "w0", "w1", "w2", "w3", "w4"]
    roles = {o["metadata"]["name"]: o["metadata"]["labels"][LABEL_ROLE]
             for o in api.objects if o["kind"] == "Pod"}
    assert roles == {"rc-head": "head", "w0": "floor", "w1": "floor", "w2": "surplus",
                     "w3": "surplus", "w4": "surplus"}
    for name, role in roles.items():
        pod = api.pod(name)
        assert pod["spec"]["schedulingGates"] == []
        node = pod["spec"]["affinity"]["nodeAffinity"]
        assert (REQUIRED in node) == (role != "surplus")
        assert (PREFERRED in node) == (role == "surplus")
        assert pod["metadata"]["labels"][LABEL_RULE] in (
            "head-avoids-gpu", "floor-avoids-gpu", "surplus-prefers-cpu")
    assert metrics.placement_releases.labels(
        "floor-avoids-gpu", "required-not-gpu", "released").value == 2
    assert api.said == [], "released at the first look: its labels say it, no Event"


def test_a_replica_that_does_not_lead_writes_nothing() -> None:
    api = FakeApi(burst(3, 1))

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        await settle()

    run(api, steps, leading=lambda: False)
    assert api.calls == []


def test_a_pod_of_an_unknown_raycluster_waits_then_goes_as_floor() -> None:
    _, *pods = burst(2, 0)
    api = FakeApi(pods)  # the RayCluster has not reached the cache

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        await settle()
        assert api.calls == []
        clock.now += 11  # past wait_seconds
        await settle()

    run(api, steps, wait_seconds=10)
    assert {api.pod(n)["metadata"]["labels"][LABEL_ROLE] for n in ("w0", "w1")} == {"floor"}
    assert sorted(api.said) == [(pod, reason) for pod in ("rc-head", "w0", "w1")
                                for reason in ("Held", "Released")]


def test_refused_writes_are_retried_with_a_backoff_then_released_bare() -> None:
    api = FakeApi(burst(1, 1)[0:1] + burst(1, 1)[2:])
    api.fail = lambda name: (ApiError(400, "BadRequest", "an admission plugin objects")
                             if len(api.calls) <= FAIL_OPEN_AFTER else None)

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        for _ in range(FAIL_OPEN_AFTER + 1):
            await settle(0.1)
            clock.now += 60  # past any backoff

    metrics = run(api, steps)
    assert len(api.calls) == FAIL_OPEN_AFTER + 1  # no hot loop
    pod = api.pod("w0")
    assert pod["spec"]["schedulingGates"] == [] and "affinity" not in pod["spec"]
    assert pod["metadata"]["labels"][LABEL_RULE] == "failed-open"  # not the rule it lacks
    assert api.said == [("w0", "ReleasedWithoutRule")]
    assert metrics.placement_releases.labels(
        "floor-avoids-gpu", "required-not-gpu", "failed").value == FAIL_OPEN_AFTER


@pytest.mark.parametrize("error", [ApiError(500, "InternalError", "etcd"),
                                   ApiError(429, "TooManyRequests", "slow down"),
                                   ApiError(403, "Forbidden", "a restarted authorizer"),
                                   TransportError("connection refused")])
def test_an_api_server_out_of_reach_is_waited_for_rule_and_all(error: Exception) -> None:
    api = FakeApi(burst(1, 1)[0:1] + burst(1, 1)[2:])
    api.fail = lambda name: error if len(api.calls) <= 2 * FAIL_OPEN_AFTER else None

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        for _ in range(2 * FAIL_OPEN_AFTER + 1):
            await settle(0.1)
            clock.now += 60

    run(api, steps)
    assert len(api.calls) == 2 * FAIL_OPEN_AFTER + 1
    assert REQUIRED in api.pod("w0")["spec"]["affinity"]["nodeAffinity"]


@pytest.mark.parametrize("code", [404, 422])
def test_a_pod_released_or_deleted_meanwhile_is_not_patched_again_at_once(code: int) -> None:
    api = FakeApi(burst(1, 1)[0:1] + burst(1, 1)[2:])
    api.fail = lambda name: ApiError(code, "x", "y")

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        for _ in range(5):  # publishes that touch the cluster, the clock standing still
            cache.publish(snapshot_of(*api.objects))
            await settle(0.05)

    run(api, steps)
    assert len(api.calls) == 1


def all_or_nothing(count: int, node_cpu: str) -> list[Obj]:
    """A RayCluster of ``raygate.io/scale-up: all-or-nothing`` with its head running on the
    one node, and a scale-up of ``count`` 2-CPU workers at the gate (no floor)."""
    cluster = (make_raycluster("rc").autoscaling().group("g", min=0, max=8, cpu="2")
               .annotate(ANNOTATION, ALL_OR_NOTHING).obj())
    head = make_pod("rc-head").head("rc").requests(cpu="1").on("a").obj()
    return [cluster, make_node("a").allocatable(cpu=node_cpu).obj(), head,
            *(make_pod(f"w{i}").ray("rc", "g").gated(GATE).requests(cpu="2")
              .created(iso(T0_EPOCH + i)).obj() for i in range(count))]


def test_an_all_or_nothing_scale_up_is_held_then_released_whole_once_it_fits() -> None:
    api = FakeApi(all_or_nothing(4, node_cpu="5"))  # room for two of four

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        await settle()
        clock.now += 5  # long complete
        await settle()
        assert api.calls == [], "two fit, four asked: none goes"
        assert held_series(native.metrics) == {("ray", "rc"): 4}
        assert released(native.metrics, "fits") == 0
        api.objects.append(make_node("b").allocatable(cpu="4").obj())
        cache.publish(snapshot_of(*api.objects))  # a node with room for the other two
        await settle()

    metrics = run(api, steps)
    assert sorted(name for name, _ in api.calls) == ["w0", "w1", "w2", "w3"]
    assert {api.pod(f"w{i}")["metadata"]["labels"][LABEL_ROLE] for i in range(4)} == {"surplus"}
    assert released(metrics, "fits") == 1, "one batch, released once"
    assert held_series(metrics) == {}
    assert [e for e in api.said if e[0] == "rc"] == [("rc", "ScaleUpHeld"),
                                                     ("rc", "ScaleUpReleased")]
    assert sorted(e for e in api.said if e[0] != "rc") == [
        (f"w{i}", reason) for i in range(4) for reason in ("Held", "Released")]


def released(metrics: Metrics, trigger: str) -> float:
    return metrics.scale_up_releases.labels(trigger).value


def held_series(metrics: Metrics) -> dict[tuple[str, str], float]:
    """``raygate_scale_up_held_pods`` as a scrape reads it."""
    return {(s.labels["namespace"], s.labels["raycluster"]): s.value
            for family in metrics.registry.collect()
            if family.name == "raygate_scale_up_held_pods" for s in family.samples}


def test_an_all_or_nothing_scale_up_waits_until_it_is_complete() -> None:
    api = FakeApi(all_or_nothing(2, node_cpu="16"))

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        await settle()
        assert api.calls == [], "seen just now: more workers of the scale-up may come"
        api.objects += all_or_nothing(3, node_cpu="16")[-1:]  # w2 comes
        cache.publish(snapshot_of(*api.objects))
        clock.now += 1.5
        await settle()
        assert api.calls == [], "w2 came 1.5 s ago: not complete yet"
        clock.now += 2.5
        await settle()

    run(api, steps)
    assert sorted(name for name, _ in api.calls) == ["w0", "w1", "w2"]
    assert api.said == [], "a scale-up that goes whole once complete is told nothing"


def test_with_a_node_autoscaler_the_scale_up_goes_whole_whatever_fits() -> None:
    api = FakeApi(all_or_nothing(4, node_cpu="1"))  # room for none

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        cache.publish(snapshot_of(*api.objects, config=PolicyConfig(
            node_autoscaler=NodeAutoscaler.PRESENT)))
        await settle()
        assert api.calls == [], "not complete yet"
        clock.now += 3
        await settle()

    metrics = run(api, steps)
    assert sorted(name for name, _ in api.calls) == ["w0", "w1", "w2", "w3"]
    assert (released(metrics, "node-autoscaler"), released(metrics, "fits")) == (1, 0)


def test_behind_kueues_elastic_gate_the_scale_up_is_kueues_until_kueue_lifts_it() -> None:
    """A scale-up of an elastic RayCluster under Kueue: its pods carry Kueue's gate too.
    raygate keeps its own gate, holds no batch and says nothing while Kueue's quota decides;
    once Kueue lifts its gate (the slice admitted) they go whole, as they fit."""
    objects = all_or_nothing(2, node_cpu="16")
    for pod in objects[-2:]:
        pod["spec"]["schedulingGates"].append({"name": KUEUE_GATE})
    api = FakeApi(objects)

    async def steps(native: GateRelease, cache: ClusterCache, clock: FakeClock) -> None:
        clock.now += 5
        await settle()
        assert api.calls == [] and held_series(native.metrics) == {}
        for pod in api.objects[-2:]:  # Kueue admits the new slice and lifts its gate
            pod["spec"]["schedulingGates"] = [{"name": GATE}]
        cache.publish(snapshot_of(*api.objects))
        await settle()
        assert api.calls == [], "seen whole just now: the batch settles first"
        clock.now += 5
        await settle()

    metrics = run(api, steps)
    assert sorted(name for name, _ in api.calls) == ["w0", "w1"]
    assert released(metrics, "fits") == 1
    assert api.said == []
