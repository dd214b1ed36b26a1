"""The controller runtime (``controllers.follow``, ``controllers.reconcile``): the one
backoff, the per-key failure records, the debounce on the loop and on a thread, the keyed
reconcile loop and a clean stop; over a real ``ClusterCache`` (virtual time where the
rule is arithmetic, the real loop and threads where it is timing)."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.model import RayClusterView
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.cache.keys import RAYCLUSTER
from raygate.server.cache.snapshot import Changes, Snapshot
from raygate.server.controllers.follow import OnLoop, OnThread
from raygate.server.controllers.reconcile import Reconciler, Result, Retries
from raygate.server.kube.transport import Backoff, BackoffPolicy
from tests.conftest import FakeClock

log = logging.getLogger("raygate.test-runtime")
NS = "ray"
POLICY = BackoffPolicy(initial=1.0, maximum=8.0, jitter=0.0)


# --- the one backoff --------------------------------------------------------------------
@pytest.mark.parametrize(("policy", "delays"), [
    (POLICY, [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]),
    (BackoffPolicy(initial=0.01, maximum=30.0, factor=2.0, jitter=0.0),
     [0.01, 0.02, 0.04, 0.08, 0.16, 0.32]),
    (BackoffPolicy(initial=0.8, maximum=30.0, factor=3.0, jitter=0.0),
     [0.8, 2.4, 7.2, 21.6, 30.0, 30.0]),
], ids=["doubles-then-caps", "controllers-small", "factor-3"])
def test_the_backoff_grows_by_its_factor_and_caps(policy: BackoffPolicy,
                                                   delays: list[float]) -> None:
    got = [policy.delay(n) for n in range(1, len(delays) + 1)]
    assert got == pytest.approx(delays)
    assert policy.delay(10_000) == policy.maximum, "no overflow however long it fails"


def test_the_watches_backoff_is_the_same_rule_with_jitter() -> None:
    policy = BackoffPolicy(initial=0.8, maximum=30.0, jitter=1.0)
    watch = Backoff(policy, random.Random(7))
    draws = random.Random(7)
    for n in range(1, 9):
        assert watch.next() == policy.delay(n, draws)
        assert policy.delay(n) <= policy.delay(n, random.Random(n)) < 2 * policy.delay(n)
    watch.reset()
    assert watch.next() < 2 * policy.initial


# --- per-key failure records ------------------------------------------------------------
@dataclass
class Step:
    at: float
    act: str
    """``fail``, ``refuse`` or ``forget`` of key "a"."""
    waiting_at: dict[float, bool] = field(default_factory=dict)


RECORD = [
    Step(0.0, "fail", {0.5: True, 1.0: False}),
    Step(1.0, "refuse", {2.9: True, 3.0: False}),
    Step(3.0, "fail", {6.9: True, 7.0: False}),
    Step(7.0, "fail", {14.9: True, 15.0: False}),
    Step(15.0, "fail", {22.9: True, 23.0: False}),  # capped at 8 s
    Step(23.0, "forget", {23.0: False, 1e9: False}),
]


def test_a_failure_record_backs_off_per_key_and_is_forgotten() -> None:
    retries: Retries[str] = Retries(POLICY)
    for step in RECORD:
        if step.act == "forget":
            assert retries.forget("a") is not None
        else:
            retries.failed("a", step.at, refused=step.act == "refuse")
        for at, waiting in step.waiting_at.items():
            assert retries.waiting("a", at) is waiting, (step, at)
    assert "a" not in retries and retries.next_due() is None and retries.due(1e9) == set()
    retries.failed("a", 0.0, refused=True)
    retries.failed("b", 0.0)
    failure = retries.get("a")
    assert failure is not None and (failure.attempts, failure.refusals) == (1, 1), \
        "a new record: the old one's failures are not counted"
    assert retries.due(0.5) == set() and retries.due(1.0) == {"a", "b"}


# --- following on the loop --------------------------------------------------------------
class Counting(OnLoop):
    def __init__(self, cache: ClusterCache, *, delay_seconds: float = 0.0,
                 at_start: bool = False, workers: int = 0) -> None:
        super().__init__(cache, delay_seconds=delay_seconds, at_start=at_start,
                         workers=workers)
        self.checks: list[float] = []
        self.busy = True

    def check(self) -> None:
        self.checks.append(time.monotonic())

    def wanted(self) -> bool:
        return self.busy


def publish(cache: ClusterCache, *clusters: str) -> None:
    editor = SnapshotEditor(cache.snapshot)
    for name in clusters:
        editor.upsert(RayClusterView(NS, name, f"uid-{name}"), "1")
    cache.publish(editor.finish())


@dataclass
class Burst:
    id: str
    delay: float
    gaps: list[float]
    """Seconds between publishes."""
    checks: int


BURSTS = [
    Burst("a burst within the delay: one check", 0.1, [0.0] * 9, 1),
    Burst("a burst spread under the delay: one check", 0.2, [0.01] * 5, 1),
    Burst("two bursts apart: two checks", 0.05, [0.0, 0.0, 0.2, 0.0], 2),
    Burst("no delay: publishes in one turn of the loop make one check", 0.0, [0.0] * 5, 1),
]


@pytest.mark.parametrize("case", BURSTS, ids=[b.id for b in BURSTS])
def test_on_the_loop_a_burst_of_publishes_makes_one_check(case: Burst) -> None:
    cache = ClusterCache(PolicyConfig(), "test")
    follower = Counting(cache, delay_seconds=case.delay)

    async def main() -> None:
        follower.attach(asyncio.get_running_loop())
        for gap in case.gaps:
            publish(cache, "rc")
            if gap:
                await asyncio.sleep(gap)
        await asyncio.sleep(case.delay + 0.1)
        follower.close()

    asyncio.run(main())
    assert len(follower.checks) == case.checks


@pytest.mark.parametrize(("first", "second", "runs_within"), [
    (1.0, 0.01, 0.5), (0.01, 1.0, 0.5), (0.01, 0.01, 0.5)])
def test_on_the_loop_the_soonest_wake_stands(first: float, second: float,
                                             runs_within: float) -> None:
    follower = Counting(ClusterCache(PolicyConfig(), "test"))

    async def main() -> None:
        follower.attach(asyncio.get_running_loop())
        start = time.monotonic()
        follower.wake(first)
        follower.wake(second)
        await asyncio.sleep(runs_within)
        assert [at - start < runs_within for at in follower.checks] == [True]
        follower.close()

    asyncio.run(main())


def test_on_the_loop_an_unwanted_wake_costs_nothing_and_at_start_checks_once() -> None:
    cache = ClusterCache(PolicyConfig(), "test")
    follower = Counting(cache, at_start=True)

    async def main() -> None:
        follower.attach(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        follower.busy = False
        publish(cache, "rc")
        follower.wake(0.0)
        await asyncio.sleep(0.05)
        follower.close()

    asyncio.run(main())
    assert len(follower.checks) == 1


def test_on_the_loop_close_is_clean_and_idempotent() -> None:
    cache = ClusterCache(PolicyConfig(), "test")
    follower = Counting(cache, workers=1)
    answered: list[BaseException | None] = []
    began = threading.Event()
    release = threading.Event()

    def blocking() -> None:
        began.set()
        release.wait(5)

    async def main() -> None:
        follower.attach(asyncio.get_running_loop())
        follower.write(lambda: None, done=answered.append)
        await asyncio.sleep(0.05)
        assert answered == [None], "a write's answer comes back on the loop"
        follower.write(blocking, done=answered.append)  # in flight at close
        follower.write(lambda: None, done=answered.append)  # not begun: dropped
        assert began.wait(5)
        follower.wake(0.01)
        follower.close()
        follower.close()
        publish(cache, "rc")
        follower.wake(0.0)
        release.set()
        await asyncio.sleep(0.1)

    asyncio.run(main())
    assert follower.checks == [], "no check after close: the timer and the listener are gone"
    assert answered == [None, None], "the write in flight ends; the one not begun is dropped"


# --- following on a thread --------------------------------------------------------------
class Threaded(OnThread):
    def __init__(self, cache: ClusterCache | None, *, delay_seconds: float = 0.0,
                 at_start: bool = False) -> None:
        super().__init__(cache, log, name="raygate-test", doing="checking the test",
                         delay_seconds=delay_seconds, at_start=at_start)
        self.checks = 0
        self.fail = False
        self.idle: float | None = None

    def check(self) -> None:
        self.checks += 1
        if self.fail:
            self.fail = False
            raise RuntimeError("a bug")

    def idle_seconds(self) -> float | None:
        return self.idle


def eventually(probe: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.01)
    return False


def test_on_a_thread_a_burst_makes_one_check_and_close_is_clean() -> None:
    cache = ClusterCache(PolicyConfig(), "test")
    follower = Threaded(cache, delay_seconds=0.2, at_start=True)
    follower.attach()
    assert eventually(lambda: follower.checks == 1), "once at start"
    for _ in range(10):
        publish(cache, "rc")
    assert eventually(lambda: follower.checks == 2)
    time.sleep(0.4)
    assert follower.checks == 2, "ten publishes within the delay: one check"
    follower.close()
    follower.close()
    assert follower._thread is None
    publish(cache, "rc")
    time.sleep(0.3)
    assert follower.checks == 2, "no listener after close"


def test_on_a_thread_it_sleeps_until_idle_says_and_survives_a_bug(
        caplog: pytest.LogCaptureFixture) -> None:
    follower = Threaded(None)
    follower.idle = 0.05
    follower.fail = True
    follower.attach()
    try:
        assert eventually(lambda: follower.checks >= 3), "woken by its idle time, unasked"
        follower.idle = None
        time.sleep(0.1)
        settled = follower.checks
        time.sleep(0.3)
        assert follower.checks == settled, "asleep until woken"
        follower.wake()
        assert eventually(lambda: follower.checks == settled + 1)
    finally:
        follower.close()
    assert "checking the test failed" in caplog.text and "a bug" in caplog.text


# --- the keyed reconcile loop -----------------------------------------------------------
class Writer(Reconciler[tuple[str, str]]):
    """Reconciles RayClusters; ``failing`` raise; a deleted cluster is gone."""

    def __init__(self, cache: ClusterCache, clock: FakeClock,
                 leading: Callable[[], bool] = lambda: True) -> None:
        super().__init__(cache, clock, log, POLICY, name="raygate-test", doing="writing",
                         leading=leading)
        self.failing: set[str] = set()
        self.calls: list[str] = []

    def keys(self, snap: Snapshot, changes: Changes | None) -> Iterable[tuple[str, str]]:
        if changes is None:
            return {(c.namespace, c.name) for c in snap.rayclusters()}
        return changes.clusters

    def reconcile(self, key: tuple[str, str], snap: Snapshot, now: float) -> Result:
        self.calls.append(key[1])
        if snap.raycluster(*key) is None:
            return Result.GONE
        if key[1] in self.failing:
            raise OSError(f"{key[1]} refused")
        return Result.DONE


@dataclass
class Tick:
    at: float
    do: str = ""
    """``publish NAME``, ``delete NAME``, ``fail NAME``, ``heal NAME``, ``lose``, ``lead``."""
    calls: list[str] = field(default_factory=list)
    """Reconciled at this tick's check."""


SCRIPTS = {
    "a failed key is retried after the backoff, and forgotten once it succeeds": [
        Tick(0.0, "fail b", ["a", "b"]),
        Tick(0.5, "publish b", []),  # a change to a key that waits: it waits too
        Tick(1.0, "", ["b"]),
        Tick(2.0, "", []),
        Tick(3.0, "heal b", ["b"]),
        Tick(100.0, "", []),  # the record went with the success
    ],
    "a deleted key is forgotten, record and all": [
        Tick(0.0, "fail b", ["a", "b"]),
        Tick(1.0, "delete b", ["b"]),
        Tick(100.0, "", []),
    ],
    "a replica that does not lead reconciles nothing, and a new term looks at all": [
        Tick(0.0, "fail b", ["a", "b"]),
        Tick(1.0, "lose", []),
        Tick(2.0, "publish a", []),
        Tick(50.0, "lead", ["a", "b"]),
    ],
}


@pytest.mark.parametrize("script", SCRIPTS, ids=list(SCRIPTS))
def test_the_keyed_loop(script: str) -> None:
    cache = ClusterCache(PolicyConfig(), "test")
    clock, leads = FakeClock(0.0), [True]
    writer = Writer(cache, clock, leading=lambda: leads[0])
    publish(cache, "a", "b")
    for tick in SCRIPTS[script]:
        clock.now = tick.at
        verb, _, name = tick.do.partition(" ")
        if verb == "publish":
            publish(cache, name)
        elif verb == "delete":
            editor = SnapshotEditor(cache.snapshot)
            editor.delete(RAYCLUSTER, (NS, name))
            cache.publish(editor.finish())
        elif verb in ("fail", "heal"):
            (writer.failing.add if verb == "fail" else writer.failing.discard)(name)
        elif verb in ("lose", "lead"):
            leads[0] = verb == "lead"
        writer.calls.clear()
        writer.check()
        assert writer.calls == tick.calls, tick
    assert len(writer.retries) == 0 or script.startswith("a replica")


def test_the_keyed_loop_says_a_failure_once_and_its_end(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = ClusterCache(PolicyConfig(), "test")
    clock = FakeClock(0.0)
    writer = Writer(cache, clock)
    publish(cache, "a")
    writer.failing.add("a")
    with caplog.at_level(logging.DEBUG, logger=log.name):
        for at in (0.0, 1.0, 3.0, 7.0):
            clock.now = at
            writer.check()
        writer.failing.clear()
        clock.now = 15.0
        assert writer.idle_seconds() == 0.0, "its retry is due"
        writer.check()
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0] == ("WARNING", "reconciling ray/a failed: a refused; trying again in 1s, "
                                  "then less often")
    assert [level for level, _ in said] == ["WARNING", "DEBUG", "DEBUG", "DEBUG", "INFO"]
    assert said[-1] == ("INFO", "reconciling ray/a: done now")
    assert writer.idle_seconds() is None, "nothing due: asleep until a publish"
