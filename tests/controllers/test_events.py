"""The Event recorder (``raygate.server.controllers.events``): what it creates and
patches as Events alike repeat, its rate limit and queue, against a recording double of
the API server (the double is here for virtual time and faults; the e2e scenarios have
the real kube-apiserver store and show what raygate says)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.server.controllers.events import (
    BURST,
    FINISH_SECONDS,
    MAX_NOTE,
    MAX_QUEUED,
    REFILL_SECONDS,
    REFRESH_SECONDS,
    EventRecorder,
    Reason,
    Regarding,
)
from raygate.server.kube.transport import ApiError
from raygate.server.metrics.registry import Metrics
from tests.conftest import FakeClock
from tests.controllers.event_api import FakeEventApi, taken

POD = Regarding("v1", "Pod", "ray", "w-1", "uid-1")
CLUSTER = Regarding("ray.io/v1", "RayCluster", "ray", "rc", "uid-rc")


def recorder(api: FakeEventApi, clock: FakeClock, *, leading: bool = True
             ) -> tuple[EventRecorder, Metrics]:
    metrics = Metrics()
    return EventRecorder(api, metrics, "raygate-0", leading=lambda: leading,
                         clock=clock), metrics


def say(rec: EventRecorder, clock: FakeClock, reason: Reason = Reason.HELD,
        regarding: Regarding = POD, note: str = "held", *, at: float | None = None,
        related: Regarding | None = None) -> None:
    """Record, then let the writer run, at ``at`` seconds from the clock's start."""
    if at is not None:
        clock.now = at
    rec.record(regarding, reason, note, related=related)
    rec.write(*taken(rec))


def counted(metrics: Metrics, reason: str, outcome: str) -> float:
    return metrics.events.labels(reason, outcome).value


def test_the_first_event_is_created_as_the_events_api_wants_it() -> None:
    api, clock = FakeEventApi(), FakeClock(1_800_000_000.25)
    rec, metrics = recorder(api, clock)
    say(rec, clock, Reason.NO_NODE_COMING, note="x" * (MAX_NOTE + 10), related=CLUSTER)
    ((name, body),) = api.events.items()
    assert name.startswith("w-1.")
    assert body["metadata"]["namespace"] == "ray"
    assert body["eventTime"] == "2027-01-15T08:00:00.250000Z"
    assert {k: body[k] for k in ("reportingController", "reportingInstance", "action",
                                 "reason", "type")} == {
        "reportingController": "raygate.io/raygate", "reportingInstance": "raygate-0",
        "action": "Judge", "reason": "NoNodeComing", "type": "Warning"}
    assert body["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ray",
                                 "name": "w-1", "uid": "uid-1"}
    assert body["related"]["kind"] == "RayCluster"
    assert len(body["note"].encode()) == MAX_NOTE
    assert counted(metrics, "NoNodeComing", "created") == 1


def test_repeats_are_one_event_whose_count_is_written_when_due() -> None:
    """client-go's series: created; the second patches count 2; later ones count in
    memory, written at the refresh while it grows and once when the series ends."""
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, metrics = recorder(api, clock)
    for at, note in ((0, "a"), (10, "b"), (20, "c"), (30, "d")):
        say(rec, clock, note=note, at=at)
    ((name, body),) = api.events.items()
    assert api.calls == [("create", name), ("patch", name)]
    assert body["series"]["count"] == 2 and body["note"] == "a"
    say(rec, clock, at=30 + REFRESH_SECONDS)
    assert body["series"] == {"count": 5, "lastObservedTime": "1970-01-01T00:30:30.000000Z"}
    clock.now = 30 + REFRESH_SECONDS + FINISH_SECONDS
    rec.write([], 0)
    assert len(api.calls) == 3  # nothing new to write at its end
    say(rec, clock)  # the series ended: a new Event
    assert [call for call, _ in api.calls] == ["create", "patch", "patch", "create"]
    assert counted(metrics, "Held", "folded") == 3
    assert counted(metrics, "Held", "series") == 2


def test_the_count_is_written_when_a_series_ends() -> None:
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, _ = recorder(api, clock)
    for at in (0, 1, 2, 3):
        say(rec, clock, at=at)
    clock.now = 3 + FINISH_SECONDS
    rec.write([], 0)
    (body,) = api.events.values()
    assert body["series"]["count"] == 4
    assert rec._series == {}


@pytest.mark.parametrize(("first", "second", "alike"), [
    (dict(reason=Reason.HELD), dict(reason=Reason.HELD, note="other words"), True),
    (dict(reason=Reason.HELD), dict(reason=Reason.RELEASED), False),
    (dict(regarding=POD), dict(regarding=CLUSTER), False),
    (dict(related=None), dict(related=CLUSTER), False),
])
def test_events_alike_are_those_with_the_same_object_reason_and_related(
        first: dict[str, Any], second: dict[str, Any], alike: bool) -> None:
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, _ = recorder(api, clock)
    say(rec, clock, **first)
    say(rec, clock, **second)
    assert [call for call, _ in api.calls] == (["create", "patch"] if alike
                                               else ["create", "create"])


def test_an_objects_events_are_rate_limited_as_client_gos_spam_filter() -> None:
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, metrics = recorder(api, clock)
    others = [Regarding("v1", "Pod", "ray", f"p-{i}", f"u-{i}") for i in range(BURST + 5)]
    for related in others:
        say(rec, clock, related=related)
    assert len(api.events) == BURST
    assert counted(metrics, "Held", "limited") == 5
    say(rec, clock, regarding=CLUSTER)  # another object has a bucket of its own
    clock.now = REFILL_SECONDS
    say(rec, clock, related=CLUSTER)
    say(rec, clock, related=POD)
    assert len(api.events) == BURST + 2  # one more each REFILL_SECONDS


def test_a_series_whose_event_is_gone_is_created_anew() -> None:
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, _ = recorder(api, clock)
    say(rec, clock)
    api.events.clear()  # its TTL, or someone deleted it
    say(rec, clock)
    (body,) = api.events.values()
    assert body["series"]["count"] == 2
    assert [call for call, _ in api.calls] == ["create", "patch", "create"]


def test_a_failed_write_is_counted_logged_once_and_not_tried_again(
        caplog: pytest.LogCaptureFixture) -> None:
    api, clock = FakeEventApi(fail=ApiError(403, "Forbidden", "events is forbidden")), \
        FakeClock(0.0)
    rec, metrics = recorder(api, clock)
    say(rec, clock)
    say(rec, clock, related=CLUSTER)
    assert counted(metrics, "Held", "failed") == 2
    assert len(api.calls) == 2
    assert [r.getMessage() for r in caplog.records].count(
        "writing a Held Event failed (not tried again; logged again when the error "
        "changes): 403 Forbidden: events is forbidden") == 1


def test_a_replica_that_does_not_lead_says_nothing() -> None:
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, _ = recorder(api, clock, leading=False)
    say(rec, clock)
    assert api.calls == []


def test_a_full_queue_drops_and_counts() -> None:
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, metrics = recorder(api, clock)
    for _ in range(MAX_QUEUED + 3):
        rec.record(POD, Reason.HELD, "held")
    rec.write(*taken(rec))
    assert counted(metrics, "", "dropped") == 3
    assert counted(metrics, "Held", "created") == 1
    assert counted(metrics, "Held", "folded") == MAX_QUEUED - 2


def test_the_writer_thread_writes_what_is_recorded_and_stops() -> None:
    api = FakeEventApi()
    rec = EventRecorder(api, Metrics(), "raygate-0")
    rec.attach()
    try:
        rec.record(POD, Reason.RELEASED, "released")
        assert api.written.wait(10)
    finally:
        rec.close()
    assert rec._thread is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([POD, CLUSTER]),
                          st.sampled_from([Reason.HELD, Reason.RELEASED]),
                          st.floats(0, 3 * REFRESH_SECONDS)), max_size=40))
def test_every_repeat_is_counted_in_the_event_and_writes_stay_bounded(
        said: list[tuple[Regarding, Reason, float]]) -> None:
    """Whatever is said when: once each series ended, the Events' counts add up to what
    was said, and no series took more than a create, its second and one write per
    refresh span beyond (ends included)."""
    api, clock = FakeEventApi(), FakeClock(0.0)
    rec, _ = recorder(api, clock)
    for regarding, reason, at in sorted(said, key=lambda s: s[2]):
        say(rec, clock, reason, regarding, at=at)
    clock.now = 10 * REFRESH_SECONDS
    rec.write([], 0)
    total = Counter(f"{r.name}/{reason.reason}" for r, reason, _ in said)
    counts = Counter[str]()
    for body in api.events.values():
        key = f"{body['regarding']['name']}/{body['reason']}"
        counts[key] += (body["series"] or {}).get("count", 1)
    assert counts == total
    # Per Event: its create, its second, a count per refresh span of the run, its end.
    assert len(api.calls) <= len(api.events) * (2 + 3 + 1)
