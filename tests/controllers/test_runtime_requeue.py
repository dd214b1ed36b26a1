"""The keyed reconcile loop's requeue (``Reconciler.requeue``, controller-runtime's
RequeueAfter): a key whose decision changes with time alone is looked at again when it
asked, without a publish; a key that stops asking is not; and a key that waits out its
backoff waits for its retry, the thread asleep until then (never a busy wait)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Changes, Snapshot
from raygate.server.controllers.reconcile import Reconciler, Result
from tests.conftest import FakeClock
from tests.controllers.test_runtime import NS, POLICY, log, publish

Key = tuple[str, str]


class Timed(Reconciler[Key]):
    """Asks to be looked at again ``asks[name]`` seconds after each reconcile; those in
    ``failing`` raise after asking."""

    def __init__(self, cache: ClusterCache, clock: FakeClock) -> None:
        super().__init__(cache, clock, log, POLICY, name="raygate-test", doing="writing")
        self.asks: dict[str, float] = {}
        self.failing: set[str] = set()
        self.calls: list[str] = []

    def keys(self, snap: Snapshot, changes: Changes | None) -> Iterable[Key]:
        if changes is None:
            return {(c.namespace, c.name) for c in snap.rayclusters()}
        return changes.clusters

    def reconcile(self, key: Key, snap: Snapshot, now: float) -> Result:
        self.calls.append(key[1])
        if key[1] in self.asks:
            self.requeue(key, now + self.asks[key[1]])
        if key[1] in self.failing:
            raise OSError(f"{key[1]} refused")
        return Result.DONE


def started(asks: dict[str, float], failing: set[str]) -> tuple[Timed, FakeClock]:
    cache, clock = ClusterCache(PolicyConfig(), "test"), FakeClock(0.0)
    timed = Timed(cache, clock)
    timed.asks, timed.failing = asks, failing
    publish(cache, "a", "b")
    timed.check()
    assert sorted(timed.calls) == ["a", "b"]
    return timed, clock


@pytest.mark.parametrize(("at", "calls", "idle"), [
    (1.0, [], 1.0),  # asleep until b asked
    (2.0, ["b"], 2.0),  # looked at again, and it asks again
])
def test_a_key_that_asks_is_looked_at_again_without_a_publish(
        at: float, calls: list[str], idle: float) -> None:
    timed, clock = started({"b": 2.0}, set())
    clock.now = at
    timed.calls.clear()
    timed.check()
    assert (timed.calls, timed.idle_seconds()) == (calls, idle)


def test_a_key_that_stops_asking_is_not_looked_at_again() -> None:
    timed, clock = started({"b": 2.0}, set())
    del timed.asks["b"]
    clock.now = 2.0
    timed.check()
    assert timed.idle_seconds() is None, "nothing due: asleep until a publish"


def test_a_key_waiting_out_its_backoff_waits_for_its_retry_not_its_ask() -> None:
    timed, clock = started({"b": 0.25}, {"b"})  # asks for 0.25 s, its retry is 1 s away
    clock.now = 0.5
    timed.calls.clear()
    timed.check()
    assert timed.calls == [] and timed.idle_seconds() == 0.5, "asleep until the retry"
    assert (NS, "b") in timed.retries
