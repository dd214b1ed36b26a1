"""``ClusterCache``: the current snapshot, published in one assignment, and the journal of
what each publish changed."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable

from raygate.policy.config import PolicyConfig
from raygate.server.cache.editor import reconfigured
from raygate.server.cache.snapshot import Changes, Snapshot
from raygate.server.cache.sync import SyncStatus

JOURNAL_LENGTH = 1024
"""Publishes remembered by ``changes_between``: a reader further behind looks at all."""


class ClusterCache:
    """Holds the current snapshot. Readers take ``cache.snapshot`` once per request; a
    source replaces it whole (one reference assignment, atomic under the GIL)."""

    def __init__(self, config: PolicyConfig, source: str) -> None:
        self.source = source
        self.snapshot = Snapshot.empty(config)
        self.ready = False
        self.sync: SyncStatus | None = None
        """Per-kind list/watch state when the source is a cluster; None for files."""
        self._listeners: list[Callable[[Snapshot], None]] = []
        self._reconfigure: Callable[[PolicyConfig], None] | None = None
        self._lock = threading.Lock()
        self._journal: deque[tuple[int, int, Changes | None]] = deque(maxlen=JOURNAL_LENGTH)
        """(serial, base serial, changes) of the last snapshots published."""

    def changes_between(self, old: Snapshot, new: Snapshot) -> Changes | None:
        """What changed from ``old`` to ``new`` (both published, ``new`` the later), or
        None when that is not known: a snapshot built whole, a bulk load, or ``old`` too
        far back."""
        if old is new:
            return Changes(frozenset(), frozenset())
        links = {serial: (base, changes) for serial, base, changes in list(self._journal)}
        total: Changes | None = None
        serial = new.serial
        while serial != old.serial:
            base, changes = links.get(serial, (0, None))
            if changes is None:
                return None
            total = changes if total is None else total | changes
            serial = base
        return total

    def set_policy(self, config: PolicyConfig) -> None:
        """Serve ``config`` from now on: the current objects are re-classified and
        published under it (by the source's writer when one follows a cluster, so the
        change never races an event). Safe from any thread."""
        if self._reconfigure is not None:
            self._reconfigure(config)
            return
        with self._lock:
            self.publish(reconfigured(self.snapshot, config))

    def follow_writer(self, reconfigure: Callable[[PolicyConfig], None]) -> None:
        """A source that edits snapshots in a thread of its own takes policy changes
        through ``reconfigure`` from now on."""
        self._reconfigure = reconfigure

    def publish(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` the current one, then tell every listener (in the publishing
        thread: a listener must be quick and must not block, e.g. schedule work on its
        own event loop with ``call_soon_threadsafe``)."""
        # Journal first: whoever sees the new snapshot finds how it came about.
        self._journal.append((snapshot.serial, snapshot.base_serial, snapshot.changes))
        self.snapshot = snapshot
        self.ready = True
        for listener in list(self._listeners):
            listener(snapshot)

    def follow_on(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., object],
                  *args: object) -> Callable[[], None]:
        """Call ``callback(*args)`` on ``loop`` after each publish: the hop from the
        publishing thread that every follower on the server's loop needs (a loop closed
        meanwhile has nobody left to tell). Returns a function that stops it."""

        def on_publish(_: Snapshot) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback, *args)

        return self.add_listener(on_publish)

    def add_listener(self, listener: Callable[[Snapshot], None]) -> Callable[[], None]:
        """Call ``listener`` after each publish; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)
