"""The list/watch state of each kind, for ``/readyz`` and metrics."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

import msgspec


class KindReport(msgspec.Struct, rename="camel", omit_defaults=True):
    """One kind's list/watch state as ``/readyz`` shows it."""

    resource: str
    state: str
    synced: bool
    objects: int
    events: int
    relists: int
    errors: int
    last_event_age_seconds: float | None = None
    last_error: str = ""


class KindSync:
    """The list/watch state of one kind. Written by the source's threads, read by
    ``/readyz`` and metrics (single attribute writes: a reader may see one counter a step
    ahead of another, never a torn value)."""

    __slots__ = ("errors", "events", "kind", "last_error", "last_event",
                 "objects", "relists", "resource", "state", "synced")

    def __init__(self, kind: str, resource: str = "") -> None:
        self.kind = kind
        self.resource = resource
        """``plural.version.group`` being watched (empty until discovered)."""
        self.state = "pending"
        """pending | listing | watching | backoff | absent (a CRD not installed)."""
        self.synced = False
        """The first complete LIST is in the cache; stays True through re-lists."""
        self.objects = 0
        self.events: Counter[str] = Counter()
        """Watch events applied, by type (ADDED, MODIFIED, DELETED, BOOKMARK, ...)."""
        self.relists = 0
        """LISTs after the first: 410 Gone, a CRD that came back."""
        self.errors = 0
        """Failed requests, broken streams, objects raygate could not read."""
        self.last_error = ""
        self.last_event: float | None = None
        """Monotonic time of the last event, bookmark or LIST page received."""


class SyncStatus:
    """Per-kind list/watch state of a cluster source: readiness, ``/readyz`` details and
    the counters a metrics exporter reads."""

    def __init__(self, kinds: Iterable[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.kinds: dict[str, KindSync] = {kind: KindSync(kind) for kind in kinds}
        self.clock = clock

    def ready(self) -> bool:
        """Every kind has completed its first LIST, or is a CRD that is not installed."""
        return all(k.synced or k.state == "absent" for k in self.kinds.values())

    def absent(self) -> list[str]:
        return [k.kind for k in self.kinds.values() if k.state == "absent"]

    def report(self) -> dict[str, KindReport]:
        now = self.clock()
        return {
            k.kind: KindReport(
                resource=k.resource, state=k.state, synced=k.synced, objects=k.objects,
                events=sum(k.events.values()), relists=k.relists, errors=k.errors,
                last_event_age_seconds=(None if k.last_event is None
                                        else round(max(now - k.last_event, 0.0), 3)),
                last_error=k.last_error,
            )
            for k in self.kinds.values()
        }
