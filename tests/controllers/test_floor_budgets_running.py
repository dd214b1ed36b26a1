"""The floor's PodDisruptionBudgets writer running: its thread over the cache's publishes,
its metrics, and the server that starts it (``raygate serve``'s switch)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.controllers.floor_budgets import FloorBudgets
from tests.conftest import FakeClock
from tests.controllers.budget_world import BASE, HEAD, FakeApi, World, cluster


@pytest.fixture
def running() -> Iterator[World]:
    world = World(delay_seconds=0.2)
    world.writer.clock = time.monotonic
    world.writer.attach()
    yield world
    world.writer.close()


def eventually(probe: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.02)
    return False


def test_the_thread_waits_for_the_cache_without_spinning(running: World) -> None:
    calls = 0
    check = running.writer.check

    def counted() -> None:
        nonlocal calls
        calls += 1
        check()

    running.writer.check = counted  # type: ignore[method-assign]
    time.sleep(0.5)
    assert calls <= 1, "checked once at start, then asleep until a publish"
    running.upsert(cluster())
    assert eventually(lambda: running.api.floors() == {HEAD: 1, BASE: 2})


def test_the_thread_follows_publishes_and_coalesces_a_burst(running: World) -> None:
    running.upsert(cluster())
    assert eventually(lambda: running.api.floors() == {HEAD: 1, BASE: 2})
    running.api.take()
    for floor in range(3, 13):  # ten publishes within milliseconds
        running.upsert(cluster(floor=floor))
    assert eventually(lambda: running.api.floors().get(BASE) == 12)
    time.sleep(0.5)
    applies = [c for c in running.api.take() if c[0] == "apply"]
    assert 1 <= len(applies) <= 2, applies


def test_metrics_name_each_result() -> None:
    world = World()
    world.upsert(cluster())
    world.writer.check()
    text = world.metrics.exposition().decode()
    assert 'raygate_disruption_budget_writes_total{result="applied"} 2.0' in text
    assert 'raygate_disruption_budget_writes_total{result="failed"} 0.0' in text


def test_a_cluster_without_a_uid_gets_no_budget() -> None:
    """Snapshot files may lack UIDs: a budget without an owner would outlive its
    cluster."""
    world = World()
    world.upsert(replace(cluster(), uid=""))
    world.writer.check()
    assert world.api.floors() == {}


def test_the_server_runs_the_writer_and_serves_its_metric() -> None:
    """``build_server(budget_api=...)`` (what ``raygate serve`` passes when it follows a
    cluster with ``disruptionBudgets: on``): the writer starts and stops with the server,
    its counter is on ``/metrics``."""
    import httpx

    from tests.conftest import ServerThread

    api = FakeApi()
    served = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock(), budget_api=api)
    served.start()
    try:
        assert served.server.services.follower(FloorBudgets) is not None
        editor = SnapshotEditor(served.cache.snapshot)
        editor.upsert(cluster(), "1")
        served.cache.publish(editor.finish())
        assert eventually(lambda: api.floors() == {HEAD: 1, BASE: 2})
        with httpx.Client(base_url=served.url) as client:
            text = client.get("/metrics").text
        assert 'raygate_disruption_budget_writes_total{result="applied"} 2.0' in text
    finally:
        served.stop()
    writer = served.server.services.follower(FloorBudgets)
    assert writer is not None and writer._thread is None  # joined


def test_without_a_budget_api_nothing_runs(server: Any) -> None:
    """No cluster to write to (the demo, snapshot files) or ``disruptionBudgets: off``."""
    assert server.server.services.follower(FloorBudgets) is None


@pytest.mark.parametrize(("setting", "writes"), [("on", True), ("off", False)])
def test_serve_writes_budgets_only_when_on(setting: str, writes: bool) -> None:
    from raygate.server.app import _server
    from raygate.server.config.settings import ServeSettings

    @dataclass
    class Transport(FakeApi):
        def annotate_pod(self, namespace: str, name: str, uid: str,
                         annotations: Mapping[str, str]) -> None:
            raise AssertionError("not called here")

        def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
            raise AssertionError("not called here")

    settings = ServeSettings(http_addr="127.0.0.1:0", grpc_addr="127.0.0.1:0",
                             disruption_budgets=setting)
    server = _server(settings, ClusterCache(PolicyConfig(), "test"), None,
                     Transport())  # type: ignore[arg-type]
    server.http_sock.close()
    assert (server.services.follower(FloorBudgets) is not None) is writes


def test_while_the_list_fails_the_thread_waits_for_its_retry_not_a_clusters() -> None:
    """A cluster's retry falls due while the resync's list keeps failing: nothing can be
    written before the list, so the thread waits for the list's retry (it used to wait 0 s,
    again and again: a core spun for the whole outage)."""
    world = World()
    world.upsert(cluster())
    world.writer.check()  # listed and applied
    world.api.failure = OSError("API down")
    world.upsert(cluster(floor=3))
    world.writer.check()  # the apply fails: the cluster's retry in 1 s
    world.clock.now += world.writer.resync_seconds  # the resync forgets the memo...
    world.writer.check()  # ...and its list fails: the cluster's retry is long past due
    idle = world.writer.idle_seconds()
    assert idle is not None and idle > 0
