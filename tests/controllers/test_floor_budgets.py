"""The floor's PodDisruptionBudgets, the writer (``raygate.server.controllers.floor_budgets``): what
it applies and deletes after the cache's publishes, against a recording double of the
API server (the e2e scenario writes to kube-apiserver); virtual time for the backoff."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from raygate.policy.budgets import budget_name
from raygate.policy.config import PolicyConfig
from raygate.policy.model import PodView, RayClusterView, WorkerGroupSpec
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.cache.keys import RAYCLUSTER, View
from raygate.server.controllers.events import FINISH_SECONDS, EventRecorder
from raygate.server.controllers.floor_budgets import FloorBudgets, manifest
from raygate.server.kube.transport import ApiError
from raygate.server.metrics.registry import Metrics
from tests.conftest import FakeClock
from tests.controllers.event_api import FakeEventApi, told

NS = "ray"


def cluster(name: str = "rc", *, floor: int = 2, burst: int = 0, suspended: bool = False,
            uid: str = "") -> RayClusterView:
    return RayClusterView(NS, name, uid or f"uid-{name}", autoscaling=True,
                          suspended=suspended, worker_groups=(
                              WorkerGroupSpec("base", replicas=4, min_replicas=floor),
                              WorkerGroupSpec("burst", replicas=4, min_replicas=burst)))


@dataclass
class FakeApi:
    """PodDisruptionBudgets in a dict; an apply replaces the object (one field manager,
    forced: what the API server's server-side apply makes of it). Records every call;
    fails while ``failure`` is set."""

    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    failure: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply_budget(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        with self.lock:
            self.calls.append(("apply", namespace, name))
            if self.failure is not None:
                raise self.failure
            self.objects[namespace, name] = dict(body)

    def delete_budget(self, namespace: str, name: str) -> None:
        with self.lock:
            self.calls.append(("delete", namespace, name))
            if self.failure is not None:
                raise self.failure
            self.objects.pop((namespace, name), None)

    def list_budgets(self, label_selector: str) -> list[tuple[str, str, str]]:
        assert label_selector == "app.kubernetes.io/managed-by=raygate"
        with self.lock:
            self.calls.append(("list", "", ""))
            if self.failure is not None:
                raise self.failure
            return [(ns, name, body["metadata"]["labels"]["raygate.io/raycluster"])
                    for (ns, name), body in self.objects.items()]

    def floors(self) -> dict[str, int]:
        """minAvailable by budget name."""
        return {name: body["spec"]["minAvailable"] for (_, name), body in self.objects.items()}

    def take(self) -> list[tuple[str, str, str]]:
        with self.lock:
            calls, self.calls = self.calls, []
        return calls


class World:
    """A cache whose snapshots are edited as the list/watch source edits them, a
    writer over it and a FakeApi."""

    def __init__(self, api: FakeApi | None = None, **options: Any) -> None:
        self.cache = ClusterCache(PolicyConfig(), "test")
        self.api = api or FakeApi()
        self.clock = FakeClock(0.0)
        self.metrics = Metrics()
        self.event_api = FakeEventApi()
        self.events = EventRecorder(self.event_api, self.metrics, "raygate-0",
                                    clock=self.clock)
        self.writer = FloorBudgets(self.cache, self.api, self.metrics, self.clock,
                                        events=self.events, **options)

    def upsert(self, *views: View) -> None:
        editor = SnapshotEditor(self.cache.snapshot)
        for view in views:
            editor.upsert(view, "1")
        self.cache.publish(editor.finish())

    def delete(self, name: str) -> None:
        editor = SnapshotEditor(self.cache.snapshot)
        editor.delete(RAYCLUSTER, (NS, name))
        self.cache.publish(editor.finish())

    def written(self, result: str) -> float:
        return self.metrics.disruption_budget_writes.labels(result).value

    def said(self) -> list[tuple[str, str, str]]:
        """``(object, reason, note)`` of each Event said so far."""
        told(self.events, self.event_api)
        return [(b["regarding"]["name"], b["reason"], b["note"])
                for b in self.event_api.events.values()]


def names(*groups: str, of: str = "rc") -> set[str]:
    return {budget_name(of, g) for g in groups}


HEAD = budget_name("rc", "headgroup")
BASE = budget_name("rc", "base")
BURST = budget_name("rc", "burst")


def test_startup_lists_once_then_applies_each_floor_and_the_head() -> None:
    world = World()
    world.upsert(cluster())
    world.writer.check()
    assert world.api.take() == [("list", "", ""), ("apply", NS, HEAD), ("apply", NS, BASE)]
    assert world.api.floors() == {HEAD: 1, BASE: 2}
    body = world.api.objects[NS, BASE]
    assert body == manifest(next(b for b in _desired(cluster()) if b.name == BASE))
    assert body["metadata"]["ownerReferences"] == [{
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "uid-rc",
        "blockOwnerDeletion": False}]
    assert body["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert body["spec"]["selector"] == {"matchLabels": {
        "ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "base"}}
    assert world.written("applied") == 2
    assert world.said() == [
        ("rc", "FloorBudgetWritten", f"PodDisruptionBudget {HEAD} keeps 1 pod of group "
                                     "headgroup from voluntary disruption (its floor)"),
        ("rc", "FloorBudgetWritten", f"PodDisruptionBudget {BASE} keeps 2 pods of group "
                                     "base from voluntary disruption (its floor)")]
    world.upsert(cluster())
    world.writer.check()
    assert len(world.said()) == 2, "nothing changed: nothing written, nothing said"


def _desired(view: RayClusterView) -> tuple[Any, ...]:
    from raygate.policy.budgets import desired_budgets
    return desired_budgets(view)


def test_nothing_is_listed_or_written_before_the_cache_is_loaded() -> None:
    world = World()
    world.writer.check()
    assert world.api.take() == []
    world.upsert(cluster())
    world.writer.check()
    assert world.api.floors() == {HEAD: 1, BASE: 2}


def test_an_unchanged_cluster_costs_no_call() -> None:
    world = World()
    world.upsert(cluster())
    world.writer.check()
    world.api.take()
    # A pod of the cluster changes: the cluster is looked at, its budgets are the same.
    world.upsert(PodView("p1", NS, "rc-base-1", labels={
        "ray.io/cluster": "rc", "ray.io/group": "base", "ray.io/node-type": "worker"}))
    world.writer.check()
    world.writer.check()
    assert world.api.take() == []


@dataclass
class Step:
    id: str
    after: RayClusterView | None
    calls: list[tuple[str, str, str]]
    floors: dict[str, int]


STEPS = [
    Step("min raised: that group's budget follows", cluster(floor=3),
         [("apply", NS, BASE)], {HEAD: 1, BASE: 3}),
    Step("a second group gets a floor: one more budget", cluster(burst=1),
         [("apply", NS, BURST)], {HEAD: 1, BASE: 2, BURST: 1}),
    Step("the floor goes to 0: its budget is deleted", cluster(floor=0),
         [("delete", NS, BASE)], {HEAD: 1}),
    Step("suspended: every budget is deleted", cluster(suspended=True),
         [("delete", NS, HEAD), ("delete", NS, BASE)], {}),
    Step("made anew under the same name: owned by the new one", cluster(uid="uid-2"),
         [("apply", NS, HEAD), ("apply", NS, BASE)], {HEAD: 1, BASE: 2}),
    Step("deleted: nothing written (the garbage collector deletes the budgets)", None,
         [], {HEAD: 1, BASE: 2}),
]


@pytest.mark.parametrize("step", STEPS, ids=[s.id for s in STEPS])
def test_budgets_follow_the_cluster(step: Step) -> None:
    world = World()
    world.upsert(cluster())
    world.writer.check()
    world.api.take()
    if step.after is None:
        world.delete("rc")
    else:
        world.upsert(step.after)
    world.writer.check()
    assert world.api.take() == step.calls
    assert world.api.floors() == step.floors


def test_the_startup_list_finds_what_a_previous_run_left() -> None:
    """A budget of a group that lost its floor while raygate was down is deleted; one of a
    cluster that is gone is the garbage collector's."""
    api = FakeApi()
    before = World(api)
    before.upsert(cluster(), cluster("gone"))
    before.writer.check()
    after = World(api)
    after.upsert(cluster(floor=0))
    api.take()
    after.writer.check()
    assert api.take() == [("list", "", ""), ("apply", NS, HEAD), ("delete", NS, BASE)]
    assert set(api.floors()) == {HEAD} | names("headgroup", "base", of="gone")


def test_a_failed_write_is_counted_logged_once_and_retried_with_backoff(
        caplog: pytest.LogCaptureFixture) -> None:
    world = World(backoff_initial=1.0, backoff_maximum=8.0)
    world.upsert(cluster())
    world.writer.check()
    world.api.take()
    world.api.failure = ApiError(403, "Forbidden", "cannot patch poddisruptionbudgets")
    world.upsert(cluster(floor=3))
    tries: list[float] = []
    with caplog.at_level(logging.DEBUG, logger="raygate.budgets"):
        # Every publish and every tenth of a second for a minute: tried at 0, 1, 3, 7,
        # 15, 23, ... (the delay doubles up to 8 s), never in between.
        for tick in range(600):
            world.clock.now = tick / 10
            world.upsert(PodView(f"p{tick}", NS, f"p{tick}",
                                 labels={"ray.io/cluster": "rc"}))
            world.writer.check()
            if world.api.take():
                tries.append(world.clock.now)
    assert tries == [0.0, 1.0, 3.0, 7.0, 15.0, 23.0, 31.0, 39.0, 47.0, 55.0]
    assert world.written("failed") == len(tries)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "403 Forbidden" in warnings[0].getMessage()
    assert getattr(warnings[0], "raycluster", None) == "rc"
    ((*_, note),) = [e for e in world.said() if e[1] == "FloorBudgetFailed"]
    assert "403 Forbidden: cannot patch poddisruptionbudgets" in note

    # The API answers again: the next try writes, and says so.
    world.api.failure = None
    world.clock.now = 63.0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="raygate.budgets"):
        world.writer.check()
    assert world.api.floors()[BASE] == 3
    assert any("done now" in r.getMessage() for r in caplog.records)
    world.clock.now += FINISH_SECONDS  # the series ends: its count is written
    world.said()
    (failed,) = [b for b in world.event_api.events.values() if b["type"] == "Warning"]
    assert failed["series"]["count"] == len(tries), "one Event, counted"


def test_a_failure_of_one_cluster_holds_up_no_other() -> None:
    @dataclass
    class RefusesOne(FakeApi):
        def apply_budget(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
            if body["metadata"]["labels"]["raygate.io/raycluster"] == "bad":
                raise ApiError(422, "Invalid", "spec.minAvailable: Invalid value")
            super().apply_budget(namespace, name, body)

    world = World(RefusesOne())
    world.upsert(cluster("bad"), cluster("good"))
    world.writer.check()
    assert set(world.api.floors()) == names("headgroup", "base", of="good")


def test_a_failed_startup_list_is_retried_with_backoff() -> None:
    world = World()
    world.api.failure = ApiError(403, "Forbidden", "cannot list poddisruptionbudgets")
    world.upsert(cluster())
    world.writer.check()
    world.clock.now = 0.5
    world.writer.check()
    assert world.api.take() == [("list", "", "")]
    world.api.failure = None
    world.clock.now = 1.0
    world.writer.check()
    assert world.api.floors() == {HEAD: 1, BASE: 2}


def test_resync_lists_and_applies_again() -> None:
    """A budget someone deleted comes back within ``resync_seconds``."""
    world = World(resync_seconds=600.0)
    world.upsert(cluster())
    world.writer.check()
    del world.api.objects[NS, BASE]
    world.clock.now = 599.0
    world.writer.check()
    assert world.api.floors() == {HEAD: 1}
    world.clock.now = 600.0
    world.writer.check()
    assert world.api.floors() == {HEAD: 1, BASE: 2}


def test_two_replicas_converge_without_a_leader() -> None:
    """Two writers, each over its own cache, one API: whichever order their snapshots
    arrive in, both end on the latest cluster's budgets."""
    api = FakeApi()
    a, b = World(api), World(api)
    a.upsert(cluster(floor=3))
    a.writer.check()
    b.upsert(cluster(floor=2))  # b lags: its snapshot is older, and it writes last
    b.writer.check()
    assert api.floors()[BASE] == 2
    b.upsert(cluster(floor=3))  # b catches up
    b.writer.check()
    a.writer.check()
    assert api.floors() == {HEAD: 1, BASE: 3}


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
