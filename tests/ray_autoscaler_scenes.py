"""The RayCluster, pods and sides the tests of ``raygate-autoscaler`` against the real Ray
autoscaler share (``tests/ray_autoscaler_harness.py`` drives them).

Import this module only once Ray is known to be importable (``tests.ray_required`` tells
first).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

from raygate.ray_autoscaler.advice import Advisor
from raygate.ray_autoscaler.provider import AdvisorFactory
from raygate.ray_autoscaler.settings import AutoscalerSettings
from testkit.builders import T0_EPOCH, Obj, iso, make_pod, make_raycluster
from tests.admission_scenarios import INSUFFICIENT_CPU
from tests.conftest import FakeClock, ServerThread
from tests.ray_autoscaler_harness import Bench, FakeKube, NewPod, Side


def ray_running(pod: Obj) -> Obj:
    """The pod as Ray sees a started node: its first container is running."""
    pod["status"]["containerStatuses"] = [{
        "name": pod["spec"]["containers"][0]["name"], "ready": True, "restartCount": 0,
        "state": {"running": {"startedAt": pod["metadata"]["creationTimestamp"]}}}]
    return pod


CLUSTER = "demo"
HOUR = 3600.0
WAIT = 10.0
"""Seconds the raygate side may wait for raygate on loopback: generous, never used up."""


def advisor_for(url: str, clock: FakeClock, timeout: float = WAIT) -> AdvisorFactory:
    def factory(namespace: str, name: str) -> Advisor:
        return Advisor(AutoscalerSettings(url, timeout_seconds=timeout), namespace, name,
                       clock=clock)
    return factory


def raycluster(*groups: tuple[str, int, int]) -> Obj:
    """``demo`` with in-tree autoscaling; (group, replicas, priority) of 1-CPU workers."""
    builder = make_raycluster(CLUSTER).autoscaling()
    for name, replicas, _ in groups:
        builder.group(name, replicas=replicas, min=0, max=4, cpu="1")
    cluster = builder.obj()
    cluster["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    for spec, (_, _, priority) in zip(cluster["spec"]["workerGroupSpecs"], groups,
                                      strict=True):
        spec["priority"] = priority
    return cluster


def head(now: float) -> Obj:
    return ray_running(make_pod(f"{CLUSTER}-head").head(CLUSTER).created(iso(now - HOUR))
                       .on("cpu-node-1").condition("PodScheduled", "True", at=iso(now - HOUR))
                       .condition("Ready", "True", at=iso(now - HOUR)).obj())


def waiting_for_cpu(name: str, group: str, now: float) -> Obj:
    """Pending: kube-scheduler found no node with room (raygate: WaitingForCapacity)."""
    return (make_pod(name).ray(CLUSTER, group).created(iso(now))
            .condition("PodScheduled", "False", "Unschedulable", INSUFFICIENT_CPU,
                       iso(now)).obj())


def started(name: str, group: str, now: float) -> Obj:
    """Bound and running: the replacement of a stuck pod that lands fine."""
    return ray_running(make_pod(name).ray(CLUSTER, group).created(iso(now)).on("cpu-node-2")
                       .condition("PodScheduled", "True", at=iso(now))
                       .condition("Ready", "True", at=iso(now)).obj())


def unjudged(name: str, group: str, now: float) -> Obj:
    """Unbound, and no scheduler has said anything about it (raygate: Starting, then
    Stuck after ``stuckUnboundSeconds``, 120 s by default)."""
    return make_pod(name).ray(CLUSTER, group).created(iso(now)).obj()


def side_by_side(bench: Bench, server: ServerThread, cluster: Obj, pods: list[Obj],
                 demand: list[tuple[dict[str, float], int]], *,
                 new_pod: NewPod = waiting_for_cpu, url: str | None = None,
                 ) -> tuple[Side, Side]:
    """The same cluster twice: Ray as shipped, and Ray with raygate's hooks asking the
    server at ``url`` (default: the loopback server, fed the raygate side's cluster
    before each of its loops)."""
    clock = server.clock
    stock_kube = FakeKube(cluster, pods, new_pod, clock)
    raygate_kube = FakeKube(cluster, pods, new_pod, clock)
    stock = bench.stock(stock_kube, demand)

    def publish() -> None:
        server.publish(*raygate_kube.objects())

    raygate = bench.raygate(raygate_kube, demand, advisor_for(url or server.url, clock),
                            publish)
    return stock, raygate


def first(side: Side, what: Callable[[dict[str, str]], bool]) -> float | None:
    """Seconds since T0 of the first loop after which ``what`` held."""
    return next((when - T0_EPOCH for when, workers in side.history if what(workers)), None)


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens: connection refused


def ray_form(patch: list[Obj]) -> list[Obj]:
    """raygate-autoscaler's JSON Patch as Ray 2.60 would have written it: without the
    ``test`` operations, and ``workersToDelete`` as a ``replace`` of the whole
    ``scaleStrategy`` (``worker_delete_patch``)."""
    out = []
    for op in patch:
        if op["op"] == "test":
            continue
        path = op["path"].removesuffix("/workersToDelete")
        value = op["value"] if path == op["path"] else {"workersToDelete": op["value"]}
        out.append({"op": "replace", "path": path, "value": value})
    return out


def loops(*sides: Side, clock: FakeClock, until: float, every: float) -> Iterator[float]:
    """One loop of each side now, then again every ``every`` seconds of ``clock`` up to
    ``until`` seconds from now; yields the elapsed time after each step."""
    start = clock.now
    for side in sides:
        side.loop()
    elapsed = 0.0
    while elapsed < until:
        elapsed = min(elapsed + every, until)
        clock.now = start + elapsed
        for side in sides:
            side.loop()
        yield elapsed
