"""A cluster as the cache's source: one watcher thread per kind, one writer.

The watchers decode and convert (``raygate.server.kube.watch``) and queue their changes; the
writer alone edits snapshots. It applies every change waiting in the queue to one
``SnapshotEditor``, and whatever else arrives before the next publish is due
(``WatchSettings.publish_interval``), then publishes the result: readers see whole
events, a burst costs one publish, and a lone event after a quiet spell (or a pod's
deletion, whatever came before it) is published at once. Nothing is published before
every kind has completed its first LIST (or is a CRD that is not installed): until then
``cache.ready`` stays False and ``/readyz`` answers 503.
"""

from __future__ import annotations

import gc
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from raygate.policy.config import PolicyConfig
from raygate.server.cache.autoscaling import ORPHAN_SECONDS
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import SnapshotEditor, reconfigured
from raygate.server.cache.keys import POD, ObjectKey, View
from raygate.server.cache.snapshot import Snapshot
from raygate.server.cache.sync import SyncStatus
from raygate.server.kube.reachability import Reachability
from raygate.server.kube.resources import RESOURCES, Resource
from raygate.server.kube.transport import Transport, WatchSettings
from raygate.server.kube.watch import DELETED, KindWatcher

__all__ = ["CacheWriter", "LiveSource"]

log = logging.getLogger("raygate.kube")

PRUNE_EVERY = 1.0
"""Seconds between two looks for thrash-guard records past their window (a record a
second late changes no decision: the guard compares times itself)."""

FREEZE_AFTER = 10_000
"""Objects in one re-list from which the writer freezes the garbage collector's view of
the heap afterwards (``WatchSettings.freeze_gc``)."""

REFREEZE_AFTER = 20_000
"""Changes applied between two freezes. Each change leaves new long-lived objects (the
views and index nodes that replace the old ones); unfrozen, they make the collector's
full collections, which stop every thread, longer and more frequent as they pile up."""


@dataclass(frozen=True, slots=True)
class _Replace:
    kind: str
    items: list[tuple[str, View]]
    resource_version: str


@dataclass(frozen=True, slots=True)
class _Change:
    kind: str
    type: str
    key: ObjectKey
    resource_version: str
    view: View | None


@dataclass(frozen=True, slots=True)
class _Absent:
    kind: str


@dataclass(frozen=True, slots=True)
class _Policy:
    config: PolicyConfig


_Message = _Replace | _Change | _Absent | _Policy | None  # None: stop


class CacheWriter:
    """The one thread that edits snapshots (``raygate.server.kube.watch.Sink``)."""

    def __init__(
        self,
        cache: ClusterCache,
        sync: SyncStatus,
        *,
        publish_interval: float = 0.05,
        freeze_gc: bool = True,
        wall_clock: Callable[[], float] = time.time,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.cache = cache
        self.sync = sync
        self.publish_interval = publish_interval
        self.freeze_gc = freeze_gc
        self.wall_clock = wall_clock
        self.on_batch = on_batch
        """Metrics hook: called after each publish with (changes applied, CPU seconds the
        writer's thread spent applying them and publishing), in the writer's thread."""
        self._state = cache.snapshot
        self._queue: queue.SimpleQueue[_Message] = queue.SimpleQueue()
        self._published_at = -float("inf")
        self._pruned_at = -float("inf")
        self._since_freeze = 0

    # --- Sink ---------------------------------------------------------------------------
    def current(self) -> Snapshot:
        return self._state

    def replace(self, kind: str, items: list[tuple[str, View]], resource_version: str) -> None:
        self._queue.put(_Replace(kind, items, resource_version))

    def change(self, kind: str, type_: str, key: ObjectKey, resource_version: str,
               view: View | None) -> None:
        self._queue.put(_Change(kind, type_, key, resource_version, view))

    def absent(self, kind: str) -> None:
        self._queue.put(_Absent(kind))

    def set_policy(self, config: PolicyConfig) -> None:
        """``ClusterCache.set_policy``: applied in order with the events around it."""
        self._queue.put(_Policy(config))

    # --- the writer thread --------------------------------------------------------------
    def stop(self) -> None:
        self._queue.put(None)

    def run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            batch = _Batch(SnapshotEditor(self._state))
            stopping = self._take(batch, first)
            # Coalesce: whatever arrives before the next publish is due joins this one; a
            # pod's deletion goes at once (``_Batch.urgent``).
            while not stopping and not batch.urgent:
                wait = self._published_at + self.publish_interval - time.monotonic()
                if wait <= 0:
                    break
                try:
                    more = self._queue.get(timeout=wait)
                except queue.Empty:
                    break
                stopping = self._take(batch, more)
            try:
                self._finish(batch)
            except Exception:
                # A bug: these changes are lost, the writer goes on (a re-list repairs the
                # state; the log says what to fix).
                log.exception("applying %d cache changes failed", batch.count)

    def drain(self) -> int:
        """Apply every change queued so far in the calling thread, as one publish (for
        tests and benchmarks that run no writer thread); returns how many."""
        batch = _Batch(SnapshotEditor(self._state))
        while True:
            try:
                message = self._queue.get_nowait()
            except queue.Empty:
                break
            self._take(batch, message)
        if batch.count:
            self._finish(batch)
        return batch.count

    def _take(self, batch: _Batch, message: _Message) -> bool:
        """Apply ``message`` and everything queued behind it; True when told to stop."""
        started = time.thread_time()
        try:
            while message is not None:
                self._apply(batch, message)
                try:
                    message = self._queue.get_nowait()
                except queue.Empty:
                    return False
            return True
        finally:
            batch.seconds += time.thread_time() - started

    def _apply(self, batch: _Batch, message: _Replace | _Change | _Absent | _Policy) -> None:
        batch.count += 1
        if isinstance(message, _Policy):
            batch.policy = message.config
            return
        editor, kind = batch.editor, message.kind
        batch.touched.add(kind)
        if isinstance(message, _Change):
            if message.view is None or message.type == DELETED:
                editor.delete(kind, message.key)
                batch.urgent = batch.urgent or kind == POD
            else:
                editor.upsert(message.view, message.resource_version)
        elif isinstance(message, _Replace):
            editor.replace(kind, message.items)
            batch.listed.add(kind)
            batch.big = batch.big or len(message.items) >= FREEZE_AFTER
        else:
            editor.absent(kind)

    def _finish(self, batch: _Batch) -> None:
        started = time.thread_time()
        if time.monotonic() - self._pruned_at >= PRUNE_EVERY:
            window = self._state.config.thrash_guard_seconds
            batch.editor.forget_preemptions_before(self.wall_clock() - max(window, 0.0))
            if self.sync.ready():  # every kind listed: an event's pod is held by now
                batch.editor.forget_events(self.wall_clock() - ORPHAN_SECONDS)
            self._pruned_at = time.monotonic()
        state = batch.editor.finish()
        if batch.policy is not None:
            # Events after the change in this batch were classified under the old
            # policy; re-classifying the whole result makes every object current.
            state = reconfigured(state, batch.policy)
        self._state = state
        for kind in batch.touched:
            status = self.sync.kinds.get(kind)
            if status is not None:
                status.objects = state.count(kind)
                if kind in batch.listed:
                    status.synced = True
        self._since_freeze += batch.count
        if self.freeze_gc and (batch.big or self._since_freeze >= REFREEZE_AFTER):
            # WatchSettings.freeze_gc. The young generations first: cyclic garbage of the
            # rest of the process (a request's exception and its frames) is collected, not
            # kept frozen.
            gc.collect(1)
            gc.freeze()
            self._since_freeze = 0
        if self.cache.ready:
            self.cache.publish(state)
        elif self.sync.ready():
            self.cache.publish(state)
            log.info("cache synced: %s", ", ".join(f"{v} {k}" for k, v in state.counts().items()))
        self._published_at = time.monotonic()
        if self.on_batch is not None:
            self.on_batch(batch.count, batch.seconds + time.thread_time() - started)


class _Batch:
    """Changes applied to one editor, published together."""

    __slots__ = ("big", "count", "editor", "listed", "policy", "seconds", "touched", "urgent")

    def __init__(self, editor: SnapshotEditor) -> None:
        self.editor = editor
        self.count = 0
        self.seconds = 0.0
        """CPU time spent applying the changes (not waiting for them, nor for the GIL)."""
        self.touched: set[str] = set()
        self.listed: set[str] = set()
        self.big = False
        self.urgent = False
        """A pod was deleted: published without waiting for more. KubeRay replaces a
        deleted pod at once, and raygate's webhook decides the replacement's role from the
        published snapshot: one that still held the deleted pod would count its floor place
        taken and make the replacement surplus (``policy.native.admission_role``)."""
        self.policy: PolicyConfig | None = None
        """A reloaded policy: the batch's result is re-classified under it."""


class LiveSource:
    """Follows a cluster into ``cache``: ``start`` the threads, ``stop`` them."""

    def __init__(
        self,
        cache: ClusterCache,
        transport: Transport,
        settings: WatchSettings | None = None,
        *,
        resources: Iterable[Resource] = RESOURCES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.cache = cache
        self.transport = transport
        self.settings = settings or WatchSettings()
        self.resources = tuple(resources)
        self.sync = SyncStatus((r.kind for r in self.resources), clock)
        cache.sync = self.sync
        self.writer = CacheWriter(
            cache, self.sync, publish_interval=self.settings.publish_interval,
            freeze_gc=self.settings.freeze_gc, wall_clock=wall_clock, on_batch=on_batch)
        cache.follow_writer(self.writer.set_policy)
        self._stop = threading.Event()
        rng = rng or random.Random()
        self.reachability = Reachability(clock)
        self.watchers = [
            KindWatcher(r, transport, self.writer, self.sync.kinds[r.kind],
                        settings=self.settings, stop=self._stop,
                        rng=random.Random(rng.random()), clock=clock,
                        reachability=self.reachability)
            for r in self.resources
        ]
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [threading.Thread(target=self.writer.run, name="raygate-cache-writer",
                                          daemon=True)]
        self._threads += [
            threading.Thread(target=w.run, name=f"raygate-watch-{w.kind}", daemon=True)
            for w in self.watchers
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching: close the open streams, let the writer apply what it has, then
        release the transport. Waits ``timeout`` seconds at most for the threads."""
        self._stop.set()
        for watcher in self.watchers:
            watcher.close()
        deadline = time.monotonic() + timeout
        for thread in self._threads[1:]:
            thread.join(max(deadline - time.monotonic(), 0.0))
        self.writer.stop()
        if self._threads:
            self._threads[0].join(max(deadline - time.monotonic(), 0.0))
        self.transport.close()
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("threads still running after stop: %s", ", ".join(alive))
