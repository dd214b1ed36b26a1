"""Events (``events.k8s.io/v1``) on the objects raygate decides about, so that
``kubectl describe pod`` and ``kubectl describe raycluster`` tell the story without a
port-forward; written as client-go's recorders write them, so that a verdict that flaps
cannot flood the API server:

- **Series** (client-go's ``tools/events``): Events alike (the same regarding object,
  reason, action and related object: client-go's key; the note is not part of it) are one
  Event. The first is created; the second patches its ``series`` (count 2); later ones
  only count in memory, and the count is written every ``REFRESH_SECONDS`` while it grows
  and once more when the series ends (nothing alike for ``FINISH_SECONDS``).
- **A rate limit per object** (``tools/record``'s spam filter): a token bucket per
  regarding object, ``BURST`` new Events at once, then one per ``REFILL_SECONDS``; an Event
  beyond it is dropped and counted.
- **A bounded queue**: ``record`` appends and returns (the server's loop, a controller's
  thread never waits on the API server); beyond ``MAX_QUEUED`` waiting, an Event is dropped
  and counted. One thread of its own writes.
- **The leader tells it**: ``record`` drops what a replica that does not lead says, as two
  replicas would each tell the same story.

A write that fails is counted and logged once per reason and error, and not tried again:
an Event is worth less than the API server's calm (a series still being counted is written
at its next refresh or its end).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol

from raygate.policy.model import PodView, RayClusterView
from raygate.server.controllers.follow import OnThread
from raygate.server.kube.transport import ApiError
from raygate.server.metrics.registry import Metrics

__all__ = ["EventApi", "EventRecorder", "Reason", "Regarding"]

log = logging.getLogger("raygate.events")

REPORTING_CONTROLLER = "raygate.io/raygate"
RAYCLUSTER_API_VERSION = "ray.io/v1"
FINISH_SECONDS = 6 * 60.0
"""A series with nothing alike for this long ends (client-go's ``finishTime``)."""
REFRESH_SECONDS = 30 * 60.0
"""A growing series writes its count this often (client-go's ``refreshTime``)."""
BURST = 25
REFILL_SECONDS = 300.0
"""Per regarding object: ``BURST`` Events at once, then one each ``REFILL_SECONDS``
(client-go's ``defaultSpamBurst`` and ``defaultSpamQPS``)."""
MAX_QUEUED = 1000
"""Events waiting to be written beyond which one is dropped (client-go's
``maxQueuedEvents``)."""
MAX_BUCKETS = 4096
"""Objects whose rate limit is remembered, least recently used first out (client-go's
``maxLruCacheEntries``)."""
MAX_NOTE = 1024
"""``note``'s limit in the API's validation, in bytes."""


class Reason(Enum):
    """What raygate says, and the action it says it about (``events.k8s.io/v1``'s
    ``reason`` and ``action``) and whether it is a warning."""

    HELD = ("Held", "Hold", False)
    RELEASED = ("Released", "Release", False)
    RELEASED_WITHOUT_RULE = ("ReleasedWithoutRule", "Release", True)
    NO_NODE_COMING = ("NoNodeComing", "Judge", True)
    SCALE_UP_HELD = ("ScaleUpHeld", "HoldScaleUp", False)
    SCALE_UP_RELEASED = ("ScaleUpReleased", "ReleaseScaleUp", False)
    FLOOR_BUDGET_WRITTEN = ("FloorBudgetWritten", "WriteBudget", False)
    FLOOR_BUDGET_FAILED = ("FloorBudgetFailed", "WriteBudget", True)

    def __init__(self, reason: str, action: str, warning: bool) -> None:
        self.reason = reason
        self.action = action
        self.type = "Warning" if warning else "Normal"


@dataclass(frozen=True, slots=True)
class Regarding:
    """An object an Event is about (a core ``ObjectReference``; ``uid`` "" when raygate
    does not know it, as for a budget it applied)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    @classmethod
    def of_pod(cls, pod: PodView) -> Regarding:
        return cls("v1", "Pod", pod.namespace, pod.name, pod.uid)

    @classmethod
    def of_raycluster(cls, cluster: RayClusterView) -> Regarding:
        return cls(RAYCLUSTER_API_VERSION, "RayCluster", cluster.namespace, cluster.name,
                   cluster.uid)

    def reference(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind,
               "namespace": self.namespace, "name": self.name}
        return ref | {"uid": self.uid} if self.uid else ref


class EventApi(Protocol):
    """What the recorder asks of the API server (``KubeTransport``)."""

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create the Event, or raise."""

    def patch_event(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Merge-patch the Event, or raise (``ApiError`` 404: it is gone)."""


_Key = tuple[Regarding, Reason, Regarding | None]


@dataclass(slots=True)
class _Said:
    """A queued Event."""

    key: _Key
    note: str
    at: float


@dataclass(slots=True)
class _Series:
    """An Event written, and how often the same was said since."""

    name: str
    body: dict[str, Any]
    count: int = 1
    last: float = 0.0
    written_count: int = 1
    refresh_at: float = 0.0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


@dataclass
class _Queue:
    items: deque[_Said] = field(default_factory=deque)
    dropped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class EventRecorder(OnThread):
    def __init__(self, api: EventApi, metrics: Metrics, instance: str, *,
                 leading: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(None, log, name="raygate-events", doing="recording Events")
        self.api = api
        self.instance = instance
        """``reportingInstance``: this replica (its pod's name)."""
        self.leading = leading
        self.clock = clock
        self._events = metrics.events
        self._queue = _Queue()
        self._series: dict[_Key, _Series] = {}
        self._buckets: OrderedDict[Regarding, _Bucket] = OrderedDict()
        self._logged: dict[Reason, str] = {}

    # --- the callers' side ----------------------------------------------------------
    def record(self, regarding: Regarding, reason: Reason, note: str, *,
               related: Regarding | None = None) -> None:
        """Say ``note`` about ``regarding``; returns at once."""
        if not self.leading():
            return
        queue = self._queue
        with queue.lock:
            if len(queue.items) >= MAX_QUEUED:
                queue.dropped += 1
                return
            queue.items.append(_Said((regarding, reason, related), note, self.clock()))
        self.wake()

    # --- the writer's side (one thread) -------------------------------------------------
    def check(self) -> None:
        """Write what was recorded since the last look."""
        queue = self._queue
        with queue.lock:
            said = list(queue.items)
            queue.items.clear()
            dropped, queue.dropped = queue.dropped, 0
        self.write(said, dropped)

    def idle_seconds(self) -> float | None:
        """Until the next series' count is due, or its end."""
        due = min((s.refresh_at for s in self._series.values() if s.count > s.written_count),
                  default=None)
        ends = min((s.last + FINISH_SECONDS for s in self._series.values()), default=None)
        soonest = min((t for t in (due, ends) if t is not None), default=None)
        return None if soonest is None else max(soonest - self.clock(), 0.0)

    def write(self, said: list[_Said], dropped: int = 0) -> None:
        """Write what was said, then the series whose count is due."""
        for _ in range(dropped):
            self._count(None, "dropped")
        for item in said:
            self._say(item)
        self._flush(self.clock())

    def _say(self, said: _Said) -> None:
        regarding, reason, _ = said.key
        series = self._series.get(said.key)
        if series is not None:
            series.count += 1
            series.last = said.at
            if series.written_count == 1:  # the second: shown as a series at once
                self._write_series(said.key, series)
            else:
                self._count(reason, "folded")
            return
        if not self._take_token(regarding, said.at):
            self._count(reason, "limited")
            return
        body = self._body(said)
        series = _Series(body["metadata"]["name"], body, last=said.at,
                         refresh_at=said.at + REFRESH_SECONDS)
        if self._send(reason, "created", lambda: self.api.create_event(
                regarding.namespace, body)):
            self._series[said.key] = series

    def _flush(self, now: float) -> None:
        for key, series in list(self._series.items()):
            ended = now - series.last >= FINISH_SECONDS
            if series.count > series.written_count and (ended or now >= series.refresh_at):
                self._write_series(key, series)
            if ended:
                del self._series[key]

    def _write_series(self, key: _Key, series: _Series) -> None:
        regarding, reason, _ = key
        series.refresh_at = series.last + REFRESH_SECONDS
        count = {"count": series.count, "lastObservedTime": _micro_time(series.last)}
        series.body["series"] = count

        def patch() -> None:
            try:
                self.api.patch_event(regarding.namespace, series.name, {"series": count})
            except ApiError as exc:
                if exc.code != 404:
                    raise
                # Gone (its TTL, someone deleted it): made anew, as client-go does.
                series.body["metadata"].pop("resourceVersion", None)
                self.api.create_event(regarding.namespace, series.body)

        if self._send(reason, "series", patch):
            series.written_count = series.count

    def _send(self, reason: Reason, outcome: str, write: Callable[[], None]) -> bool:
        try:
            write()
        except Exception as exc:
            self._count(reason, "failed")
            if self._logged.get(reason) != str(exc):
                self._logged[reason] = str(exc)
                log.warning("writing a %s Event failed (not tried again; logged again when "
                            "the error changes): %s", reason.reason, exc)
            return False
        self._logged.pop(reason, None)
        self._count(reason, outcome)
        return True

    def _take_token(self, regarding: Regarding, now: float) -> bool:
        bucket = self._buckets.pop(regarding, None) or _Bucket(float(BURST), now)
        bucket.tokens = min(float(BURST), bucket.tokens + (now - bucket.at) / REFILL_SECONDS)
        bucket.at = now
        self._buckets[regarding] = bucket  # the most recently used last
        if len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _body(self, said: _Said) -> dict[str, Any]:
        regarding, reason, related = said.key
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # As client-go names them: the object's name and the time in hex nanoseconds.
            "metadata": {"name": f"{regarding.name}.{time.time_ns():x}",
                         "namespace": regarding.namespace},
            "eventTime": _micro_time(said.at),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance[:128],
            "action": reason.action,
            "reason": reason.reason,
            "type": reason.type,
            "note": said.note.encode()[:MAX_NOTE].decode(errors="ignore"),
            "regarding": regarding.reference(),
        }
        if related is not None:
            body["related"] = related.reference()
        return body

    def _count(self, reason: Reason | None, outcome: str) -> None:
        self._events.labels(reason.reason if reason else "", outcome).inc()


def _micro_time(at: float) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds, in UTC."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
