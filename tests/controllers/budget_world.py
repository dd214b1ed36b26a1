"""The floor-budget writer's world for its tests: a RayCluster builder, a recording double
of the API server's budget calls (``FakeApi``) and the writer over a cache (``World``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raygate.policy.budgets import budget_name
from raygate.policy.config import PolicyConfig
from raygate.policy.model import RayClusterView, WorkerGroupSpec
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.cache.keys import RAYCLUSTER, View
from raygate.server.controllers.events import EventRecorder
from raygate.server.controllers.floor_budgets import FloorBudgets
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


