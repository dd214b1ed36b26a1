"""The floor's PodDisruptionBudgets, the writer (``raygate.server.controllers.floor_budgets``): what
it applies and deletes after the cache's publishes, against a recording double of the
API server (the e2e scenario writes to kube-apiserver); virtual time for the backoff."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from raygate.policy.model import PodView, RayClusterView
from raygate.server.controllers.events import FINISH_SECONDS
from raygate.server.controllers.floor_budgets import manifest
from raygate.server.kube.transport import ApiError
from tests.controllers.budget_world import BASE, BURST, HEAD, NS, FakeApi, World, cluster, names


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
