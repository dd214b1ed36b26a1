"""Leadership of the Lease (raygate/server/kube/leader.py, lease.py): the timing on a
clock the tests move, the client library's attempts over an in-memory Lease, release."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from raygate.server.kube.leader import Leadership, LeaseTiming
from raygate.server.kube.lease import LeaseElector, identity, lease_namespace
from raygate.server.metrics.registry import Metrics
from tests.conftest import ServerThread

TIMING = LeaseTiming(lease_seconds=15, renew_deadline_seconds=10.0, retry_seconds=2.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeElector:
    identity: str = "raygate-0_abcd"
    held: bool = True
    error: Exception | None = None
    attempts: int = 0
    releases: int = 0

    def try_acquire_or_renew(self) -> bool:
        self.attempts += 1
        if self.error is not None:
            raise self.error
        return self.held

    def release(self) -> bool:
        self.releases += 1
        return True


def started(elector: FakeElector, clock: Clock) -> tuple[Leadership, list[bool]]:
    """A started Leadership whose thread never runs: the tests call ``step`` themselves."""
    leadership = Leadership(elector, TIMING, clock=clock)
    told: list[bool] = []
    leadership.on_change(told.append)
    leadership._running = True  # start() without its thread
    return leadership, told


def test_it_leads_from_a_successful_attempt_until_the_renew_deadline() -> None:
    clock, elector = Clock(), FakeElector()
    leadership, told = started(elector, clock)
    assert not leadership.leading()
    assert leadership.step() == TIMING.retry_seconds
    assert leadership.leading() and told == [True]
    elector.held = False  # renewals fail from here on
    clock.now += 2.0
    assert leadership.step() == TIMING.retry_seconds
    clock.now += 7.0
    # Woken at the deadline, not a retry period past it.
    assert leadership.step() == pytest.approx(1.0)
    assert leadership.leading()
    clock.now += 1.0  # 10 s after the last successful attempt began
    assert not leadership.leading()
    leadership.step()
    assert told == [True, False]
    assert leadership.transitions == {"gained": 1, "lost": 1}


def test_the_deadline_counts_from_when_the_renewal_began() -> None:
    """A renewal that took long proves the Lease held when it was sent, not when it
    answered: others measure from the record change they saw, which is no later."""
    clock = Clock()

    class Slow(FakeElector):
        def try_acquire_or_renew(self) -> bool:
            clock.now += 4.0
            return True

    leadership, _ = started(Slow(), clock)
    assert leadership.step() == TIMING.retry_seconds
    clock.now += 5.9
    assert leadership.leading()
    clock.now += 0.1
    assert not leadership.leading()


def test_a_failed_connection_is_no_renewal() -> None:
    clock, elector = Clock(), FakeElector(error=OSError("connection refused"))
    leadership, told = started(elector, clock)
    assert leadership.step() == TIMING.retry_seconds
    assert not leadership.leading() and told == []


def test_it_leads_again_when_renewals_come_back() -> None:
    clock, elector = Clock(), FakeElector()
    leadership, told = started(elector, clock)
    leadership.step()
    elector.held = False
    clock.now += 11
    leadership.step()
    elector.held = True
    leadership.step()
    assert leadership.leading() and told == [True, False, True]


def test_stop_stops_leading_before_it_releases() -> None:
    clock, elector = Clock(), FakeElector()
    leadership, told = started(elector, clock)
    leadership.step()
    seen: list[tuple[bool, int]] = []
    leadership.on_change(lambda leading: seen.append((leading, elector.releases)))
    leadership.stop()
    assert not leadership.leading()
    assert told == [True, False] and seen == [(False, 0)] and elector.releases == 1
    leadership.stop()
    assert elector.releases == 1


def test_a_failed_release_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Unreleasing(FakeElector):
        def release(self) -> bool:
            raise OSError("no route to host")

    leadership, _ = started(Unreleasing(), Clock())
    leadership.step()
    leadership.stop()
    assert "could not release the lease" in caplog.text


def test_the_thread_attempts_and_stops() -> None:
    elector = FakeElector()
    leadership = Leadership(elector, LeaseTiming(3, 2.0, 1.0))
    gained = asyncio.Event()

    async def lead() -> None:
        loop = asyncio.get_running_loop()
        leadership.follow_on(loop, lambda leading: gained.set() if leading else None)
        leadership.start()
        await asyncio.wait_for(gained.wait(), 5)

    asyncio.run(lead())
    assert leadership.leading()
    leadership.stop()
    assert not leadership.leading() and elector.releases == 1


def test_without_a_lease_it_leads_while_started() -> None:
    leadership = Leadership(None)
    told: list[bool] = []
    remove = leadership.on_change(told.append)
    assert not leadership.leading()
    leadership.start()
    assert leadership.leading()
    remove()
    leadership.stop()
    assert not leadership.leading() and told == [True]


def test_each_api_call_ends_before_the_lease_could_pass() -> None:
    assert TIMING.request_timeout == 2.0
    assert LeaseTiming(15, 12.0, 2.0).request_timeout == 1.5


def test_metrics_say_who_leads() -> None:
    metrics, clock = Metrics(), Clock()
    leadership, _ = started(FakeElector(), clock)
    metrics.watch_leadership(leadership)
    leadership.step()
    text = metrics.exposition().decode()
    assert "raygate_leader 1.0" in text
    assert 'raygate_leader_transitions_total{change="gained"} 1.0' in text
    clock.now += 60
    assert "raygate_leader 0.0" in metrics.exposition().decode()


def test_identity_and_namespace_come_from_the_pod() -> None:
    env = {"POD_NAME": "raygate-7d9f-x2", "POD_NAMESPACE": "raygate-system"}
    mine, again = identity(env), identity(env)
    assert mine.startswith("raygate-7d9f-x2_") and mine != again
    assert identity({})  # the host's name
    assert lease_namespace("", env) == "raygate-system"
    assert lease_namespace("ops", env) == "ops"
    assert lease_namespace("", {}) == "raygate"


# --- the client library's attempts over an in-memory Lease ---------------------------


@dataclass
class Store:
    """One Lease: its record and resourceVersion, as the API server keeps them."""

    record: dict[str, Any] | None = None
    version: int = 0


@dataclass
class FakeLock:
    """``LeaseLock``'s get/create/update over a ``Store``: an update carries the version
    read last, and a changed Lease refuses it (409)."""

    store: Store
    identity: str
    name: str = "raygate"
    namespace: str = "raygate-system"
    read: int = field(default=-1)

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        if self.store.record is None:
            return False, NotFound()
        self.read = self.store.version
        return True, Record(**self.store.record)

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        if self.store.record is not None:
            return False
        self._write(election_record)
        return True

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.read != self.store.version:
            return False
        self._write(updated_record)
        return True

    def _write(self, record: Any) -> None:
        # As LeaseLock's get_lock_object reads an empty holder back: None.
        self.store.record = {**vars(record),
                             "holder_identity": record.holder_identity or None}
        self.store.version += 1
        self.read = self.store.version


class NotFound:
    body = json.dumps({"code": 404})
    reason = "Not Found"


@dataclass
class Record:
    holder_identity: str | None
    lease_duration: str | None
    acquire_time: str | None
    renew_time: str | None


def electors(store: Store, *names: str) -> list[LeaseElector]:
    return [LeaseElector(FakeLock(store, name), TIMING) for name in names]


def test_one_of_two_candidates_holds_the_lease() -> None:
    store = Store()
    a, b = electors(store, "a", "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # held, and not run out
    assert a.try_acquire_or_renew()  # renewed
    assert store.record is not None and store.record["holder_identity"] == "a"


def test_a_released_lease_is_taken_at_the_next_attempt() -> None:
    store = Store()
    a, b = electors(store, "a", "b")
    assert a.try_acquire_or_renew()
    assert not b.release()  # b holds nothing to release
    assert a.release()
    assert store.record is not None and store.record["holder_identity"] is None
    assert store.record["lease_duration"] == "1"
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()
    assert not a.release()


def test_a_release_loses_to_a_change_it_did_not_read() -> None:
    store = Store()
    (a,) = electors(store, "a")
    assert a.try_acquire_or_renew()
    real_get = a.lock.get

    def get_then_someone_writes(name: str, namespace: str) -> tuple[bool, Any]:
        found = real_get(name, namespace)
        store.version += 1  # another writer, between the read and the replace
        return found

    a.lock.get = get_then_someone_writes  # type: ignore[method-assign]
    assert not a.release()


def test_a_server_leads_while_it_runs(server: ServerThread) -> None:
    """Without a cluster, the running server's replica leads: what a controller takes
    (``services.leadership.leading``) says so, and so does the metric."""
    assert server.server.services.leadership.leading()
    text = httpx.get(f"{server.url}/metrics").text
    assert "raygate_leader 1.0" in text
