"""The admission-status API: the derivation of ``raygate.plugin.admission`` memoised per
snapshot, versioned, and served over HTTP (get, list, ETag, long-poll); the gRPC servicer
(``raygate.extender.grpc.servicers``) reads the same ``AdmissionService``.

``AdmissionService`` keeps one ``Generation``: the statuses of every RayCluster for one
snapshot. It is rebuilt when the cache publishes a new snapshot (the listener hops onto
the server's event loop with ``call_soon_threadsafe``: the cache may publish from any
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
import contextlib
import hashlib
import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from datetime import UTC, datetime
from importlib import resources

import msgspec

from raygate.extender.errors import JSON, BadRequest, RayClusterNotFound
from raygate.extender.http.routes import AsyncRoute, Request, Response, Route
from raygate.extender.proto.raygate.v1 import admission_pb2 as pb
from raygate.extender.state.cache import ClusterCache
from raygate.extender.state.snapshot import Changes, Snapshot
from raygate.extender.wire import admission_status as wire
from raygate.plugin.admission import AdmissionStatus, Derivation, admission_inputs, admission_status
from raygate.plugin.model import RayClusterView

__all__ = [
    "MAX_WAIT_SECONDS",
    "AdmissionService",
    "Entry",
    "Generation",
    "admission_routes",
    "openapi_document",
    "rfc3339",
]

log = logging.getLogger("raygate.admission")

MAX_WAIT_SECONDS = 300.0
"""The longest long-poll (``timeoutSeconds``); a client polls again after it."""
DEFAULT_WAIT_SECONDS = 30.0

Key = tuple[str, str]
"""(namespace, name) of a RayCluster."""
Scope = tuple[str | None, str | None]
"""(namespace, name), None for "any": a cluster, a namespace, or everything."""


def rfc3339(epoch: float | None) -> str | None:
    """Seconds since the epoch to RFC 3339 in UTC, whole seconds, as Kubernetes writes."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(math.floor(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _wire(status: AdmissionStatus, version: str) -> wire.AdmissionStatus:
    gang = status.gang
    source = gang.source
    return wire.AdmissionStatus(
        metadata=wire.Metadata(status.namespace, status.name, version),
        gang=wire.Gang(
            source=None if source is None else wire.ObjectReference(
                source.kind, source.namespace, source.name),
            phase=gang.phase, admitted=gang.admitted, min_member=gang.min_member,
            running=gang.running, reason=gang.reason),
        groups=[wire.Group(
            name=g.name, floor=g.floor, desired=g.desired, scheduled=g.scheduled,
            running=g.running, pending=g.pending, preempted=g.preempted,
            scale_up=wire.Advice(g.scale_up.value, g.scale_up_reason))
            for g in status.groups],
        pods=[wire.Pod(
            name=p.name, uid=p.uid, group=p.group, node_name=p.node_name,
            state=p.state.value, reason=p.reason, since=rfc3339(p.since),
            advice=wire.Advice(p.advice.value, p.advice_reason))
            for p in status.pods],
    )


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class Entry:
    """One RayCluster's status in every form a reply needs, each built at most once."""

    __slots__ = ("_events", "_proto", "body", "derivation", "derived_at", "inputs", "key",
                 "status", "version")

    def __init__(self, derivation: Derivation, inputs: tuple[object, ...],
                 derived_at: float) -> None:
        status = derivation.status
        self.key: Key = (status.namespace, status.name)
        self.derivation = derivation
        self.inputs = inputs
        self.derived_at = derived_at
        # The version hashes the content alone (an empty version in its place): equal
        # statuses, equal versions, whenever they were derived.
        self.version = _hash(msgspec.json.encode(_wire(status, "")))
        self.status = _wire(status, self.version)
        self.body = msgspec.json.encode(self.status)
        self._proto: pb.AdmissionStatus | None = None
        self._events: dict[str, pb.WatchEvent] = {}

    def proto(self) -> pb.AdmissionStatus:
        """The gRPC message, built on first use and shared by every stream."""
        if self._proto is None:
            self._proto = wire.to_proto(self.status)
        return self._proto

    def watch_event(self, kind: str) -> pb.WatchEvent:
        """The Watch message ``kind`` (ADDED, MODIFIED, DELETED) with this status, built
        once for every stream that sends it."""
        event = self._events.get(kind)
        if event is None:
            event = self._events[kind] = pb.WatchEvent(
                type=pb.WatchEvent.Type.Value(kind), status=self.proto())
        return event


class Generation:
    """The statuses of every RayCluster for one snapshot (and one span of time)."""

    def __init__(self, snapshot: Snapshot, entries: dict[Key, Entry], now: float) -> None:
        self.snapshot = snapshot
        self.entries = entries
        self.derived_at = now
        deadlines = [e.derivation.next_change for e in entries.values()
                     if e.derivation.next_change is not None]
        self.next_change = min(deadlines, default=None)
        self._lists: dict[str | None, tuple[str, bytes, list[Entry]]] = {}

    def select(self, scope: Scope) -> list[Entry]:
        namespace, name = scope
        if name is not None and namespace is not None:
            entry = self.entries.get((namespace, name))
            return [] if entry is None else [entry]
        return sorted((e for e in self.entries.values()
                       if namespace is None or e.key[0] == namespace), key=lambda e: e.key)

    def listing(self, namespace: str | None) -> tuple[str, bytes, list[Entry]]:
        """(version, JSON body, entries) of the list of a namespace (None: all), built once
        per generation from the entries' own bodies."""
        cached = self._lists.get(namespace)
        if cached is None:
            entries = self.select((namespace, None))
            version = _hash(b"\n".join(b"%s/%s=%s" % (e.key[0].encode(), e.key[1].encode(),
                                                     e.version.encode()) for e in entries))
            head = msgspec.json.encode(wire.AdmissionStatusList(
                metadata=wire.ListMetadata(version), items=[]))
            # Splice the pre-encoded statuses into `"items":[]`, the last key.
            body = head[:-2] + b",".join(e.body for e in entries) + b"]}"
            cached = self._lists[namespace] = (version, body, entries)
        return cached


class _Build:
    """A generation being derived, a chunk of clusters at a time."""

    __slots__ = ("carried", "changes", "clusters", "done", "entries", "now", "snapshot")

    def __init__(self, snapshot: Snapshot, now: float, carried: dict[Key, Entry],
                 changes: Changes | None) -> None:
        self.snapshot = snapshot
        self.now = now
        self.changes = changes
        """What changed since the generation this build follows (None: unknown)."""
        self.clusters = snapshot.rayclusters()
        self.done = 0
        self.entries: dict[Key, Entry] = {}
        self.carried = carried
        """Entries an abandoned rebuild derived: reused where their inputs still match."""


def _untouched(entry: Entry, build: _Build) -> bool:
    """Does ``entry`` hold for ``build`` without a look at its inputs? Yes when the
    cache says nothing it reads changed since, and its time has not run out. This
    makes a rebuild cost O(changed clusters), not O(clusters)."""
    changes, now = build.changes, build.now
    if changes is None or entry.key in changes.clusters:
        return False
    if changes.podgroups:
        names: tuple[str, ...] = entry.inputs[-1]  # type: ignore[assignment]
        if any((entry.key[0], name) in changes.podgroups for name in names):
            return False
    next_change = entry.derivation.next_change
    return entry.derived_at <= now and (next_change is None or now < next_change)


REBUILD_SLICE_SECONDS = 0.002
"""How long a background rebuild runs per turn of the loop before the loop serves what
arrived meanwhile. A cluster whose inputs did not change costs ~10-20 µs (looking them
up and comparing), one that changed ~100 µs: a slice covers some hundred clusters."""
REBUILD_CHECK_EVERY = 16
"""Clusters derived between two looks at the clock."""

WAKE_BATCH = 8
"""Waiters woken per turn of the event loop when a status changes. A change watched by
thousands wakes them a batch at a time, with the loop's I/O polled between batches, so a
scheduler request that arrives meanwhile waits for one batch (a Watch send costs some
50-150 µs of Python: about a millisecond), not for all of them."""


class _Signal:
    """The waiters of one scope (a cluster, a namespace, everything). A waiter ``arm``s a
    future before it reads the state, so that a change after the read wakes it; it
    ``disarm``s the future when done. ``fire`` wakes every armed waiter."""

    __slots__ = ("waiters",)

    def __init__(self) -> None:
        self.waiters: dict[asyncio.Future[None], None] = {}  # an ordered set

    def arm(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters[future] = None
        return future

    def disarm(self, future: asyncio.Future[None]) -> None:
        self.waiters.pop(future, None)

    def fire(self) -> None:
        if self.waiters:
            futures, self.waiters = list(self.waiters), {}
            _wake(futures, 0)


def _wake(futures: list[asyncio.Future[None]], start: int) -> None:
    for future in futures[start:start + WAKE_BATCH]:
        if not future.done():
            future.set_result(None)
    if start + WAKE_BATCH < len(futures):
        # The rest on a later turn of the loop, after the I/O that arrived meanwhile.
        asyncio.get_running_loop().call_soon(_wake, futures, start + WAKE_BATCH)


class AdmissionService:
    """Admission statuses of the cache's current snapshot, memoised, versioned, watched.

    Everything but ``__init__`` runs on the server's event loop (``attach`` binds it).
    """

    def __init__(self, cache: ClusterCache, clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.clock = clock
        self._generation: Generation | None = None
        self._signals: dict[Scope, _Signal] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._build: _Build | None = None
        self._rebuilding: asyncio.Task[None] | None = None
        self.closed = False

    # --- lifecycle ----------------------------------------------------------------------
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the cache's publishes on ``loop`` (the server's)."""
        self._loop = loop
        self.closed = False

        def on_publish(_: Snapshot) -> None:  # in the publishing thread: hop to the loop
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(self.refresh)

        self._remove_listener = self.cache.add_listener(on_publish)
        self.current()  # the first generation before the server answers anything

    def close(self) -> None:
        """Stop following the cache; end every long-poll and Watch now (shutdown)."""
        self.closed = True
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._rebuilding is not None:
            self._rebuilding.cancel()
        for signal in self._signals.values():
            signal.fire()

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
        if self._loop is None:
            self.current()
            return
        if not any(signal.waiters for signal in self._signals.values()):
            return
        if self._rebuilding is None or self._rebuilding.done():
            self._rebuilding = self._loop.create_task(self._rebuild_in_background())

    async def _rebuild_in_background(self) -> None:
        while not self.closed:
            generation = self._generation
            if generation is not None and not self._stale(generation):
                return
            build = self._build_for_now()
            deadline = time.perf_counter() + REBUILD_SLICE_SECONDS
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

    def _build_for_now(self) -> _Build:
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
            build = self._build = _Build(snapshot, now, carried, changes)
        return build

    def _step(self, build: _Build, limit: int | None) -> bool:
        """Derive up to ``limit`` more clusters of ``build`` (None: all); True when done."""
        old = self._generation
        end = len(build.clusters) if limit is None else min(len(build.clusters),
                                                            build.done + limit)
        for cluster in build.clusters[build.done:end]:
            key = (cluster.namespace, cluster.name)
            previous = build.carried.get(key) or (old.entries.get(key) if old else None)
            if previous is not None and _untouched(previous, build):
                build.entries[key] = previous
            else:
                build.entries[key] = self._entry(cluster, build.snapshot, build.now, previous)
        build.done = end
        return end == len(build.clusters)

    def _complete(self, build: _Build) -> Generation:
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
                         now_pod.state.value, now_pod.reason)
        for uid, was in before.items():
            if uid not in after:
                pod = snapshot.pod(uid)
                outcome = "gone" if pod is None or pod.deleted is not None else (
                    "Running" if pod.phase == "Running" else pod.phase or "done")
                log.info("RayCluster %s/%s: pod %s %s -> %s", namespace, name, was.name,
                         was.state.value, outcome)

    def _schedule(self, generation: Generation, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._loop is None or self.closed or generation.next_change is None:
            return
        delay = min(max(generation.next_change - now, 0.0), 24 * 3600.0)
        self._timer = self._loop.call_later(delay, self.refresh)

    # --- waiting for changes ------------------------------------------------------------
    def waiting(self, scope: Scope) -> bool:
        """Does anything (a long-poll, a Watch stream) wait for a change in ``scope`` now?"""
        signal = self._signals.get(scope)
        return signal is not None and bool(signal.waiters)

    def _signal(self, scope: Scope) -> _Signal:
        signal = self._signals.get(scope)
        if signal is None:
            signal = self._signals[scope] = _Signal()
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
            events: list[tuple[str, Entry | None]] = []
            for key, entry in entries.items():
                last = sent.get(key)
                if last is None or last.version != entry.version:
                    events.append(("ADDED" if last is None else "MODIFIED", entry))
            events += [("DELETED", sent[key]) for key in sent if key not in entries]
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

    # --- HTTP ---------------------------------------------------------------------------
    async def http_get(self, request: Request) -> Response:
        namespace, name = request.params["namespace"], request.params["name"]
        scope: Scope = (namespace, name)

        def version(generation: Generation) -> str:
            entry = generation.entries.get((namespace, name))
            return "" if entry is None else entry.version

        generation = await self._maybe_wait(request, scope, version)
        entry = generation.entries.get((namespace, name))
        if entry is None:
            raise RayClusterNotFound(namespace, name, self.cache.ready)
        return _conditional(request, entry.version, entry.body)

    async def http_list(self, request: Request) -> Response:
        namespace = request.query.get("namespace") or None
        generation = await self._maybe_wait(
            request, (namespace, None), lambda g: g.listing(namespace)[0])
        version, body, _ = generation.listing(namespace)
        return _conditional(request, version, body)

    async def _maybe_wait(self, request: Request, scope: Scope,
                          version: Callable[[Generation], str]) -> Generation:
        seen = request.query.get("waitForChange")
        timeout = _timeout(request.query.get("timeoutSeconds"))
        if seen is None:
            return self.current()
        waiting = asyncio.ensure_future(self.wait_for_change(scope, version, seen, timeout))
        gone = asyncio.ensure_future(request.disconnected())
        try:
            await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not waiting.done():  # the client left; nobody reads the answer
            waiting.cancel()
            return self.current()
        return waiting.result()


def _timeout(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_WAIT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_WAIT_SECONDS:  # NaN fails too
        raise BadRequest(f"timeoutSeconds: expected a number of seconds in "
                         f"[0, {MAX_WAIT_SECONDS:g}], got {raw!r}")
    return seconds


def _etag_matches(header: bytes | None, etag: bytes) -> bool:
    """``If-None-Match`` (RFC 9110 §13.1.2): ``*`` or a list of entity tags, compared
    weakly (a ``W/`` prefix is ignored)."""
    if header is None:
        return False
    return any(candidate.strip().removeprefix(b"W/") in (b"*", etag)
               for candidate in header.split(b","))


def _conditional(request: Request, version: str, body: bytes) -> Response:
    etag = b'"%s"' % version.encode()
    headers = ((b"etag", etag), (b"cache-control", b"no-cache"))
    if _etag_matches(request.headers.get(b"if-none-match"), etag):
        return Response(304, b"", JSON, headers)
    return Response(200, body, JSON, headers)


def openapi_document() -> bytes:
    """The OpenAPI 3.1 document of the HTTP API, shipped in the package."""
    return resources.files("raygate.extender").joinpath("openapi.json").read_bytes()


def admission_routes(service: AdmissionService) -> dict[str, Route | AsyncRoute]:
    """``/v1/...`` admission status (get, list, long-poll) and ``/openapi.json``."""
    document = openapi_document()
    return {
        "/v1/namespaces/{namespace}/rayclusters/{name}/admission":
            AsyncRoute(b"GET", service.http_get),
        "/v1/admission": AsyncRoute(b"GET", service.http_list),
        "/openapi.json": Route(b"GET", lambda _: document),
    }
