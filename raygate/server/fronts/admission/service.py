"""The admission-status API: the derivation of ``raygate.policy.admission`` memoised per
snapshot, versioned and watched. Its fronts read the same ``AdmissionService``: HTTP
(``http``: get, list, ETag, long-poll) and gRPC (``servicer``).

``AdmissionService`` keeps one ``Generation``: the statuses of every RayCluster for one
snapshot. It is rebuilt when the cache publishes a new snapshot (it follows the cache on
the server's event loop, ``controllers.follow.OnLoop``: the cache may publish from any
thread) or when time alone changes a status (a pod turning ``Stuck``: a timer at the
generation's ``next_change``) — in the background while anything waits for a change, else
when someone next reads. A cluster the cache says is untouched since the last generation
(``ClusterCache.changes_between``) keeps its status unlooked-at; one whose inputs are the
very same objects keeps it without being derived again, so a snapshot that changes one
pod costs one cluster's derivation. The rebuild
runs in the background a chunk of clusters per turn of the loop, so the scheduler's
requests never wait for thousands of clusters; an admission request that finds the
generation stale finishes the rebuild itself, so it always answers from the current
snapshot.

Each status has a version, a hash of its JSON, so equal content gives an equal version
whatever the time. Waiters (long-polls, Watch streams) sleep on one ``asyncio.Event``
per scope (a cluster, a namespace, everything), set only when a status in that scope
changes: a thousand idle watchers cost nothing per request, and a change wakes only the
watchers that care. Every state change of a pod is logged once, at info level, when the
generation that holds it is built.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

from raygate.contract.admission_status import changes
from raygate.contract.errors import RayClusterNotFound
from raygate.policy.admission import admission_inputs, admission_status
from raygate.policy.model import RayClusterView
from raygate.process.logs import about
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Snapshot
from raygate.server.controllers.follow import OnLoop
from raygate.server.fronts.admission.state import Build, Entry, Generation, Key, Scope, untouched
from raygate.server.fronts.admission.waiters import WAKE_BATCH, Signal

__all__ = ["AdmissionService"]

log = logging.getLogger("raygate.admission")


REBUILD_SLICE_SECONDS = 0.002
"""How long a background rebuild runs per turn of the loop before the loop serves what
arrived meanwhile. A cluster whose inputs did not change costs ~10-20 µs (looking them
up and comparing), one that changed ~100 µs: a slice covers some hundred clusters."""
REBUILD_CHECK_EVERY = 16
"""Clusters derived between two looks at the clock."""


class AdmissionService(OnLoop):
    """Admission statuses of the cache's current snapshot, memoised, versioned, watched.

    Everything but ``__init__`` runs on the server's event loop (``attach`` binds it).
    """

    def __init__(self, cache: ClusterCache, clock: Callable[[], float] = time.time, *,
                 wake_batch: int = WAKE_BATCH,
                 rebuild_slice_seconds: float = REBUILD_SLICE_SECONDS) -> None:
        super().__init__(cache)
        self.clock = clock
        self.wake_batch = wake_batch
        self.rebuild_slice_seconds = rebuild_slice_seconds
        self._generation: Generation | None = None
        self._signals: dict[Scope, Signal] = {}
        self._build: Build | None = None
        self._rebuilding: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the cache's publishes on ``loop`` (the server's)."""
        super().attach(loop)
        self.current()  # the first generation before the server answers anything

    def close(self) -> None:
        """Stop following the cache; end every long-poll and Watch now (shutdown)."""
        super().close()
        if self._rebuilding is not None:
            self._rebuilding.cancel()
        for signal in self._signals.values():
            signal.fire()

    def check(self) -> None:
        """After a publish, and when time alone changes a status: ``refresh``. A next
        change still to come is asked for again (a publish's wake took its place)."""
        self.refresh()
        generation, now = self._generation, self.clock()
        if generation is not None and (generation.next_change or 0.0) > now:
            self._schedule(generation, now)

    # --- the statuses -------------------------------------------------------------------
    def current(self) -> Generation:
        """The generation for the current snapshot and time. A request that finds it stale
        finishes the rebuild itself (what the background rebuild has not done yet)."""
        generation = self._generation
        if generation is None or self._stale(generation):
            generation = self._complete(self._build_for_now())
        return generation

    def pod_states(self) -> Iterator[tuple[Key, Counter[str]]]:
        """Pods not running by admission state, per RayCluster, for ``/metrics``.
        Scrapes run on the server's event loop, as admission requests do: ``current``
        finishes a rebuild in progress, so the counts are those of the current snapshot."""
        for key, entry in sorted(self.current().entries.items()):
            yield key, Counter(p.state.value for p in entry.derivation.status.pods)

    def refresh(self) -> None:
        """Bring the statuses up to date and wake whoever waits for a change: in the
        background, a chunk of clusters per turn of the loop, so that the scheduler's
        requests are not held up by a rebuild of thousands of statuses. The cache listener
        and the deadline timer call it; so may a test that moved a fake clock.

        With nobody waiting, nothing is built: the next reader (a GET, a scrape) builds what
        it needs, from what changed since. Under a stream of pod events this keeps the
        scheduler's requests from sharing the loop with statuses nobody asked for."""
        loop = self.loop
        if loop is None:
            self.current()
            return
        if not any(signal.waiters for signal in self._signals.values()):
            return
        if self._rebuilding is None or self._rebuilding.done():
            self._rebuilding = loop.create_task(self._rebuild_in_background())

    async def _rebuild_in_background(self) -> None:
        while not self.closed:
            generation = self._generation
            if generation is not None and not self._stale(generation):
                return
            build = self._build_for_now()
            deadline = time.perf_counter() + self.rebuild_slice_seconds
            while not self._step(build, REBUILD_CHECK_EVERY):
                if time.perf_counter() >= deadline:
                    break
            else:
                self._complete(build)
                continue
            await asyncio.sleep(0)  # let the I/O that arrived meanwhile go first

    def _stale(self, generation: Generation) -> bool:
        return generation.snapshot is not self.cache.snapshot or (
            generation.next_change is not None and self.clock() >= generation.next_change)

    def get(self, namespace: str, name: str) -> Entry:
        entry = self.current().entries.get((namespace, name))
        if entry is None:
            raise RayClusterNotFound(namespace, name, self.cache.ready)
        return entry

    def _build_for_now(self) -> Build:
        """The rebuild under way if it is for the current snapshot and still in time, else
        a new one (which may reuse what the abandoned one derived)."""
        build, snapshot, now = self._build, self.cache.snapshot, self.clock()
        generation = self._generation
        if build is None or build.snapshot is not snapshot or (
                generation is not None and generation.next_change is not None
                and build.now < generation.next_change <= now):
            carried = {**build.carried, **build.entries} if build is not None else {}
            changes = (None if generation is None
                       else self.cache.changes_between(generation.snapshot, snapshot))
            build = self._build = Build(snapshot, now, carried, changes)
        return build

    def _step(self, build: Build, limit: int | None) -> bool:
        """Derive up to ``limit`` more clusters of ``build`` (None: all); True when done."""
        old = self._generation
        end = len(build.clusters) if limit is None else min(len(build.clusters),
                                                            build.done + limit)
        for cluster in build.clusters[build.done:end]:
            key = (cluster.namespace, cluster.name)
            previous = build.carried.get(key) or (old.entries.get(key) if old else None)
            if previous is not None and untouched(previous, build):
                build.entries[key] = previous
            else:
                build.entries[key] = self._entry(cluster, build.snapshot, build.now, previous)
        build.done = end
        return end == len(build.clusters)

    def _complete(self, build: Build) -> Generation:
        """Finish ``build``, make it the generation, log what changed, wake the waiters."""
        self._step(build, None)
        self._build = None
        old = self._generation
        changed: list[Key] = []
        for key, entry in build.entries.items():
            previous = old.entries.get(key) if old else None
            if previous is None or previous.version != entry.version:
                changed.append(key)
                self._log_transitions(previous, entry, build.snapshot)
        gone = [key for key in (old.entries if old else {}) if key not in build.entries]
        generation = self._generation = Generation(build.snapshot, build.entries, build.now)
        self._notify([*changed, *gone])
        self._schedule(generation, build.now)
        return generation

    def _entry(self, cluster: RayClusterView, snapshot: Snapshot, now: float,
               previous: Entry | None) -> Entry:
        inputs = admission_inputs(cluster, snapshot, snapshot.config,
                                  previous.inputs if previous is not None else None)
        # Tuples compare their elements by identity first: when the source kept the
        # objects, this is a pointer walk; when it rebuilt them, an equality check.
        # The last status holds from when it was derived until its next_change (a clock
        # that went back is outside that span too).
        if (previous is not None and previous.inputs == inputs
                and previous.derived_at <= now
                and (previous.derivation.next_change is None
                     or now < previous.derivation.next_change)):
            return previous
        return Entry(admission_status(cluster, snapshot, snapshot.config, now), inputs, now)

    def _log_transitions(self, previous: Entry | None, entry: Entry, snapshot: Snapshot) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        before = {p.uid: p for p in previous.derivation.status.pods} if previous else {}
        after = {p.uid: p for p in entry.derivation.status.pods}
        namespace, name = entry.key
        for uid, now_pod in after.items():
            was = before.get(uid)
            if was is None or was.state is not now_pod.state:
                log.info("RayCluster %s/%s: pod %s %s -> %s: %s", namespace, name,
                         now_pod.name, was.state.value if was else "(new)",
                         now_pod.state.value, now_pod.reason,
                         extra=about(namespace=namespace, raycluster=name, pod=now_pod.name))
        for uid, was in before.items():
            if uid not in after:
                pod = snapshot.pod(uid)
                outcome = "gone" if pod is None or pod.deleted is not None else (
                    "Running" if pod.phase == "Running" else pod.phase or "done")
                log.info("RayCluster %s/%s: pod %s %s -> %s", namespace, name, was.name,
                         was.state.value, outcome,
                         extra=about(namespace=namespace, raycluster=name, pod=was.name))

    def _schedule(self, generation: Generation, now: float) -> None:
        """A refresh at ``generation``'s next change, when time alone changes a status."""
        if generation.next_change is not None:
            self.wake(min(max(generation.next_change - now, 0.0), 24 * 3600.0))

    # --- waiting for changes ------------------------------------------------------------
    def waiting(self, scope: Scope) -> bool:
        """Does anything (a long-poll, a Watch stream) wait for a change in ``scope`` now?"""
        signal = self._signals.get(scope)
        return signal is not None and bool(signal.waiters)

    def _signal(self, scope: Scope) -> Signal:
        signal = self._signals.get(scope)
        if signal is None:
            signal = self._signals[scope] = Signal(self.wake_batch)
        return signal

    def _notify(self, keys: Iterable[Key]) -> None:
        scopes: set[Scope] = set()
        for namespace, name in keys:
            scopes.update({(namespace, name), (namespace, None), (None, None)})
        for scope in scopes:
            signal = self._signals.get(scope)
            if signal is not None:
                signal.fire()

    async def wait_for_change(self, scope: Scope, version: Callable[[Generation], str],
                              seen: str, timeout: float) -> Generation:
        """The generation once ``version(generation)`` differs from ``seen`` (at once if it
        already does), or when ``timeout`` seconds pass, or at shutdown."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        signal = self._signal(scope)
        while True:
            woken = signal.arm()  # before reading: a change after the read wakes it
            try:
                generation = self.current()
                remaining = deadline - loop.time()
                if version(generation) != seen or self.closed or remaining <= 0:
                    return generation
                await asyncio.wait_for(woken, remaining)
            except TimeoutError:
                return self.current()
            finally:
                signal.disarm(woken)

    async def watch(self, scope: Scope) -> AsyncIterator[tuple[str, Entry | None]]:
        """("ADDED", entry) for each cluster in ``scope``, ("SYNCED", None), then one
        ("ADDED" | "MODIFIED" | "DELETED", entry) per change, until ``close``. A slow
        consumer skips intermediate versions, never the latest."""
        sent: dict[Key, Entry] = {}
        synced = False
        signal = self._signal(scope)
        while not self.closed:
            woken = signal.arm()  # before reading: a change after the read wakes it
            entries = {e.key: e for e in self.current().select(scope)}
            events: list[tuple[str, Entry | None]] = [
                *changes(sent, entries, lambda e: e.version)]
            sent = entries
            if not synced:
                events.append(("SYNCED", None))
                synced = True
            try:
                if not events:
                    await woken
            finally:
                signal.disarm(woken)
            for kind_entry in events:
                yield kind_entry
