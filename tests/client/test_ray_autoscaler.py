"""raygate's autoscaler entrypoint against the real Ray 2.60.0 autoscaler v2, offline.

Each test runs two autoscalers side by side over two copies of the same cluster: Ray as
shipped (``KubeRayProvider``), and Ray with raygate's hooks (``raygate-autoscaler``), which
asks a real raygate server on loopback serving the raygate side's cluster as a snapshot.
Both are Ray's own ``Autoscaler`` — instance manager, reconciler, scheduler, subscribers —
over a fake Kubernetes API (Ray's ``IKubernetesHttpApiClient``), a fake KubeRay and a fake
GCS (``tests/ray_autoscaler_harness.py``); time is the test's clock, shared by Ray's
modules and the raygate server, so hours pass without sleeping.

Marked ``ray``: skipped when Ray is not installed, except under ``make test-ray`` (CI),
which installs it and fails if it is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.ray_required import RAY_MISSING

if RAY_MISSING:
    pytest.skip(RAY_MISSING, allow_module_level=True)

from testkit.builders import T0_EPOCH
from tests.conftest import ServerThread
from tests.ray_autoscaler_harness import Bench
from tests.ray_autoscaler_scenes import (
    HOUR,
    advisor_for,
    closed_port,
    first,
    head,
    loops,
    ray_form,
    raycluster,
    side_by_side,
    started,
    unjudged,
    waiting_for_cpu,
)

pytestmark = pytest.mark.ray


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, server: ServerThread) -> Iterator[Bench]:
    server.clock.now = T0_EPOCH
    bench = Bench(monkeypatch, server.clock)
    yield bench
    bench.close()


def test_a_worker_waiting_for_capacity_is_kept_however_long_it_waits(
        bench: Bench, server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    """kuberay#5002: stock Ray deletes the pending worker after an hour, launches it
    again, and deletes the new one an hour later; with raygate it stays, untouched."""
    caplog.set_level(logging.INFO, logger="raygate.autoscaler")
    clock = server.clock
    cluster = raycluster(("overflow", 1, 0))
    pods = [head(clock.now), waiting_for_cpu("demo-overflow-a", "overflow", clock.now)]
    stock, raygate = side_by_side(bench, server, cluster, pods, [({"CPU": 1.0}, 1)])

    for _ in loops(stock, raygate, clock=clock, until=5 * HOUR, every=600):
        pass

    # Ray as shipped: allocate_status_timeout_s (3600 s) runs out, then the loop.
    assert first(stock, lambda w: w.get("demo-overflow-a") == "TERMINATING") == 4200
    assert ("ALLOCATED->ALLOCATION_TIMEOUT: timeout=3600s at status ALLOCATED"
            in stock.details("demo-overflow-a"))
    assert stock.kube.deleted == ["demo-overflow-a", "demo-overflow-worker-n0",
                                  "demo-overflow-worker-n1"]
    assert stock.kube.created == ["demo-overflow-worker-n0", "demo-overflow-worker-n1",
                                  "demo-overflow-worker-n2"]
    assert any("workersToDelete" in op["path"] or "scaleStrategy" in op["path"]
               for _, patch in stock.kube.patches for op in patch)

    # With raygate: the same worker, ALLOCATED for five hours, no patch at all.
    advice = raygate.advice()
    assert advice is not None
    assert advice.pods["demo-overflow-a"].action == "keep"
    assert advice.pods["demo-overflow-a"].state == "WaitingForCapacity"
    assert all(w == {"demo-overflow-a": "ALLOCATED"} for _, w in raygate.history)
    assert raygate.kube.patches == []
    assert raygate.kube.created == raygate.kube.deleted == []
    # Said once at info (the operator sees why), not once per loop.
    kept = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO
            and r.getMessage().startswith("raygate: keeping pending worker demo-overflow-a")]
    assert len(kept) == 1 and "WaitingForCapacity" in kept[0]


def test_a_stuck_worker_is_replaced_without_waiting_for_the_timeout(
        bench: Bench, server: ServerThread) -> None:
    """No scheduler verdict for 120 s: raygate says Stuck, replace. The raygate side
    terminates it through the stock path (ALLOCATION_TIMEOUT, TERMINATING,
    workersToDelete) at once, and its replacement runs; stock Ray waits the hour out."""
    clock = server.clock
    cluster = raycluster(("overflow", 1, 0))
    pods = [head(clock.now), unjudged("demo-overflow-a", "overflow", clock.now)]
    stock, raygate = side_by_side(bench, server, cluster, pods, [({"CPU": 1.0}, 1)],
                                  new_pod=started)

    for elapsed in loops(stock, raygate, clock=clock, until=HOUR, every=60):
        if elapsed == 60:  # raygate: still Starting (awaiting the scheduler): keep
            advice = raygate.advice()
            assert advice is not None
            assert advice.pods["demo-overflow-a"].action == "keep"

    assert first(raygate, lambda w: w.get("demo-overflow-a") == "TERMINATING") == 120
    assert any(d.startswith("ALLOCATED->ALLOCATION_TIMEOUT: raygate advises to replace it "
                            "(Stuck: ") for d in raygate.details("demo-overflow-a"))
    (when, patch), *_ = raygate.kube.patches
    assert when - T0_EPOCH == 120
    # Ray's write of the group's whole scaleStrategy, made only on the version read: the
    # group had none, and one made meanwhile would hold another writer's scale gates.
    assert patch[0]["op"] == "test" and patch[0]["path"] == "/metadata/resourceVersion"
    assert {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
            "value": {"workersToDelete": ["demo-overflow-a"]}} in patch
    assert ray_form(patch) == [
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 0},
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
         "value": {"workersToDelete": ["demo-overflow-a"]}}]
    assert raygate.kube.deleted == ["demo-overflow-a"]
    assert raygate.kube.created == ["demo-overflow-worker-n0"]
    assert raygate.workers() == {"demo-overflow-worker-n0": "RAY_RUNNING"}

    # Ray as shipped: an hour later the stuck pod is still there, untouched.
    assert all(w == {"demo-overflow-a": "ALLOCATED"} for _, w in stock.history)
    assert stock.kube.patches == []


def test_a_held_group_gets_no_new_workers(bench: Bench, server: ServerThread) -> None:
    """Demand for two workers, one already waiting for capacity: stock Ray adds a
    second pod that would wait too; raygate holds the group, so its launches fail (and
    say why) and nothing is patched."""
    clock = server.clock
    cluster = raycluster(("overflow", 1, 0))
    pods = [head(clock.now), waiting_for_cpu("demo-overflow-a", "overflow", clock.now)]
    stock, raygate = side_by_side(bench, server, cluster, pods, [({"CPU": 1.0}, 2)])

    for _ in loops(stock, raygate, clock=clock, until=600, every=30):
        pass

    assert stock.kube.replicas("overflow") == 2
    assert stock.kube.created == ["demo-overflow-worker-n0"]

    advice = raygate.advice()
    assert advice is not None
    assert advice.held["overflow"] == ("1 pod of this group already waiting for capacity; "
                                       "more would wait too")
    assert raygate.kube.patches == []
    assert raygate.kube.replicas("overflow") == 1
    failed = raygate.failed_launches()
    assert failed  # one per loop: Ray asks again, raygate says no again
    assert all("raygate holds scale-up of group overflow: 1 pod of this group already "
               "waiting for capacity" in f for f in failed)


def test_demand_for_a_held_group_goes_to_another_group(
        bench: Bench, server: ServerThread) -> None:
    """Two groups of the same shape, ``overflow`` preferred (priority 10 over 1). Stock
    Ray launches ``overflow`` again although its pod waits for capacity; with raygate
    holding ``overflow``, the same scheduler launches ``spare`` in its first loop."""
    clock = server.clock
    cluster = raycluster(("overflow", 1, 10), ("spare", 0, 1))
    pods = [head(clock.now), waiting_for_cpu("demo-overflow-a", "overflow", clock.now)]
    stock, raygate = side_by_side(bench, server, cluster, pods, [({"CPU": 1.0}, 2)],
                                  new_pod=started)

    for _ in loops(stock, raygate, clock=clock, until=300, every=30):
        pass

    assert (stock.kube.replicas("overflow"), stock.kube.replicas("spare")) == (2, 0)
    assert stock.kube.created == ["demo-overflow-worker-n0"]

    assert (raygate.kube.replicas("overflow"), raygate.kube.replicas("spare")) == (1, 1)
    assert raygate.kube.created == ["demo-spare-worker-n0"]
    (when, patch), = raygate.kube.patches
    assert when == T0_EPOCH  # the first loop
    assert patch == [{"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas",
                      "value": 1}]
    assert raygate.workers() == {"demo-overflow-a": "ALLOCATED",
                                 "demo-spare-worker-n0": "RAY_RUNNING"}


def test_an_unreachable_raygate_gives_the_stock_behaviour(
        bench: Bench, server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    """Nothing listens at RAYGATE_URL: the raygate side does exactly what Ray as shipped
    does, patch for patch, and says so once."""
    caplog.set_level(logging.INFO, logger="raygate.autoscaler")
    clock = server.clock
    cluster = raycluster(("overflow", 1, 0))
    pods = [head(clock.now), waiting_for_cpu("demo-overflow-a", "overflow", clock.now)]
    stock, raygate = side_by_side(bench, server, cluster, pods, [({"CPU": 1.0}, 2)],
                                  url=closed_port())

    for _ in loops(stock, raygate, clock=clock, until=3 * HOUR, every=600):
        assert raygate.advice() is None

    assert stock.kube.patches  # a launch, the timeout, the relaunch...
    # The same writes, but for workersToDelete written alone (keeping scale gates).
    assert [(when, ray_form(patch)) for when, patch in raygate.kube.patches] == (
        stock.kube.patches)
    assert raygate.kube.cluster["spec"] == stock.kube.cluster["spec"]
    assert raygate.history == stock.history
    assert raygate.failed_launches() == stock.failed_launches()
    warnings = [r for r in caplog.records
                if r.name == "raygate.autoscaler" and r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "acts as stock until it does" in warnings[0].getMessage()


def test_when_raygate_stops_answering_the_stock_timeout_counts_from_its_last_keep(
        bench: Bench, server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    """raygate keeps the worker for two hours, then answers with an error (it no longer
    knows the RayCluster). The worker is not deleted on the spot — it has waited two
    hours, but raygate vouched for it until then — and is deleted as stock Ray would,
    an hour after raygate last said to keep it. One warning for the whole outage."""
    caplog.set_level(logging.INFO, logger="raygate.autoscaler")
    clock = server.clock
    cluster = raycluster(("overflow", 1, 0))
    pods = [head(clock.now), waiting_for_cpu("demo-overflow-a", "overflow", clock.now)]
    stock, raygate = side_by_side(bench, server, cluster, pods, [({"CPU": 1.0}, 1)])

    def publish() -> None:  # from two hours on, raygate knows nothing of the cluster
        answering = clock.now - T0_EPOCH < 2 * HOUR
        server.publish(*(raygate.kube.objects() if answering else ()))

    raygate.before_loop = publish
    for _ in loops(stock, raygate, clock=clock, until=4 * HOUR, every=600):
        pass

    assert first(stock, lambda w: w.get("demo-overflow-a") == "TERMINATING") == 4200
    # The last keep came at 6600 s; at 10200 s the stock timeout has not run out since,
    # at 10800 s it has.
    assert first(raygate, lambda w: w.get("demo-overflow-a") == "TERMINATING") == 10800
    assert ("ALLOCATED->ALLOCATION_TIMEOUT: timeout=3600s at status ALLOCATED"
            in raygate.details("demo-overflow-a"))
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "raygate.autoscaler" and r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "RayCluster ray/demo is not known" in warnings[0]


def test_install_checks_what_it_replaces(server: ServerThread) -> None:
    from raygate.ray_autoscaler.provider import install

    installation = install(advisor_for(server.url, server.clock))
    try:
        with pytest.raises(RuntimeError, match="KubeRayProvider is already replaced"):
            install(advisor_for(server.url, server.clock))
    finally:
        installation.undo()
