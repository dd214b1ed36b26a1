"""A recording double of the Events API, for the recorder's tests and the controllers'
(the double is here for virtual time and faults; the e2e scenarios have the real
kube-apiserver store what raygate says)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raygate.server.controllers.events import EventRecorder
from raygate.server.kube.transport import ApiError


@dataclass
class FakeEventApi:
    """Events by name; every call noted. ``fail``: the error each call raises."""

    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: Exception | None = None
    written: threading.Event = field(default_factory=threading.Event)

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.calls.append(("create", body["metadata"]["name"]))
        if self.fail is not None:
            raise self.fail
        self.events[body["metadata"]["name"]] = {**body, "series": body.get("series")}
        self.written.set()

    def patch_event(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        self.calls.append(("patch", name))
        if self.fail is not None:
            raise self.fail
        if name not in self.events:
            raise ApiError(404, "NotFound", f"events {name} not found")
        self.events[name].update(body)
        self.written.set()


def taken(rec: EventRecorder) -> tuple[list[Any], int]:
    """What waits in the recorder's queue, taken out (as its thread takes it)."""
    queue = rec._queue
    with queue.lock:
        items, dropped = list(queue.items), queue.dropped
        queue.items.clear()
        queue.dropped = 0
    return items, dropped


def told(rec: EventRecorder, api: FakeEventApi) -> list[tuple[str, str]]:
    """``(object name, reason)`` of each Event written so far, once the queue is written."""
    rec.write(*taken(rec))
    return [(b["regarding"]["name"], b["reason"]) for b in api.events.values()]
