"""The list/watch driver of one kind, over an injected transport, retry policy and clock.

It follows kube-apiserver's protocol as client-go's reflector does:

1. LIST in pages (``limit`` + ``continue``), every page carrying the resourceVersion of
   the one consistent state the pages add up to; or, with ``WatchSettings.stream_list``
   and where the API server serves it, the streaming list (``raygate.server.kube.
   initial``: a WATCH that sends the state as ADDED events, ended by a bookmark at its
   resourceVersion). Either way the kind's objects in the cache are replaced by the
   state's in one step: readers never see half a list.
2. WATCH from that version with bookmarks (the streaming list's own stream goes on as
   the watch): each change after it, in order.
3. A stream that ends — the server's timeout, a dropped connection, a read timeout on a
   silent one — resumes from the last version seen, without a LIST.
4. ``410 Gone`` (an HTTP status or an ERROR event) means that version has been compacted
   away: LIST again, and the replace drops whatever was deleted meanwhile.
5. Other failures back off exponentially with jitter, reset by the next success.

A custom resource that is not installed is reported absent and looked up again every
``rediscover_seconds``; one that disappears while watched is emptied from the cache.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from raygate.server.cache.keys import View, object_key
from raygate.server.cache.sync import KindSync
from raygate.server.kube.initial import InitialState, StreamRefused, refuses_streaming
from raygate.server.kube.objects import KindObjects
from raygate.server.kube.reachability import Reachability
from raygate.server.kube.resources import Resource, Served
from raygate.server.kube.transport import (
    ADDED,
    BOOKMARK,
    DELETED,
    ERROR,
    MODIFIED,
    ApiError,
    Backoff,
    Gone,
    NotServed,
    Sink,
    Transport,
    TransportError,
    WatchLine,
    WatchSettings,
    WatchStream,
    api_error,
)
from raygate.server.wire import kube

__all__ = [
    "ADDED",
    "BOOKMARK",
    "DELETED",
    "ERROR",
    "MODIFIED",
    "KindWatcher",
]

log = logging.getLogger("raygate.kube")

_Opened = tuple[WatchStream, Iterator[WatchLine]]
"""A watch stream being read, and where its reading is."""


class KindWatcher:
    """Lists then watches one kind until ``stop`` is set; run it in its own thread."""

    def __init__(
        self,
        resource: Resource,
        transport: Transport,
        sink: Sink,
        status: KindSync,
        *,
        settings: WatchSettings,
        stop: threading.Event,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        reachability: Reachability | None = None,
    ) -> None:
        self.resource = resource
        self.transport = transport
        self.sink = sink
        self.status = status
        self.settings = settings
        self.stop = stop
        self.rng = rng or random.Random()
        self.clock = clock
        self._wait = wait or (lambda seconds: not stop.wait(seconds))
        self.backoff = Backoff(settings.backoff, self.rng)
        self.objects = KindObjects(resource, sink, status)
        self.reachability = reachability or Reachability(clock)
        """Shared by the watchers of one API server (``LiveSource``): an outage is one
        line, not one per kind and attempt."""
        self.resource_version = ""
        """The last version seen; a watch resumes from it."""
        self._stream: WatchStream | None = None
        self._listed_once = False
        self._absent_logged = False

    @property
    def kind(self) -> str:
        return self.resource.kind

    def close(self) -> None:
        """Cut the current watch stream (from another thread, after setting ``stop``)."""
        stream = self._stream
        if stream is not None:
            stream.close()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                served = self._discover()
                if served is None:
                    return
                self._follow(served)
            except Exception as exc:
                # A bug, not the API server: log it, back off, start over from discovery.
                log.exception("%s: list/watch failed unexpectedly", self.kind)
                self._failed(exc)
                if not self._backoff():
                    return

    # --- discovery ----------------------------------------------------------------------
    def _discover(self) -> Served | None:
        """The version to follow; waits while the custom resource is not installed.
        None when stopping."""
        resource = self.resource
        if not resource.crd:
            return resource.served(resource.versions[0])
        while not self.stop.is_set():
            try:
                for version in resource.versions:
                    served = resource.served(version)
                    plurals = self.transport.discover(served.group_version)
                    self.reachability.answered()
                    if plurals is not None and resource.plural in plurals:
                        if self._absent_logged:
                            log.info("%s: %s is served now", self.kind, served)
                        self._absent_logged = False
                        return served
            except (ApiError, TransportError) as exc:
                self._failed(exc)
                if not self._backoff():
                    return None
                continue
            self._mark_absent()
            if not self._wait(self.settings.rediscover_seconds):
                return None
        return None

    def _mark_absent(self) -> None:
        if not self._absent_logged:
            wanted = ", ".join(f"{self.resource.plural}.{v}.{self.resource.group}"
                               for v in self.resource.versions)
            log.info("%s: not installed (%s not served); looking again every %.0fs",
                     self.kind, wanted, self.settings.rediscover_seconds)
            self._absent_logged = True
        self.backoff.reset()
        self.status.resource = ""
        self.status.state = "absent"
        self.sink.absent(self.kind)

    # --- list and watch -----------------------------------------------------------------
    def _follow(self, served: Served) -> None:
        """List and watch ``served`` until stopping, or until it is no longer served."""
        self.status.resource = str(served)
        relist = True
        while not self.stop.is_set():
            try:
                opened = None
                if relist:
                    opened = self._initial(served)
                    relist = False
                    if self.stop.is_set():
                        return
                self._watch(served, opened)
            except Gone as exc:
                # The version is older than the API server's history (etcd compaction,
                # or an API server restarted with a fresh watch cache): only a new
                # LIST tells what happened meanwhile.
                log.info("%s: %s; listing again", self.kind, exc)
                relist = True
            except NotServed as exc:
                if self.resource.crd:
                    # The CRD was deleted: its objects went with it.
                    log.info("%s: %s is no longer served (%s)", self.kind, served, exc)
                    self._listed_once = False
                    self._mark_absent()
                    self._wait(self.settings.rediscover_seconds)
                    return
                self._failed(exc)
                if not self._backoff():
                    return
            except (ApiError, TransportError) as exc:
                self._failed(exc)
                if not self._backoff():
                    return

    def _initial(self, served: Served) -> _Opened | None:
        """The kind's state into the cache: by the streaming list, whose stream goes on
        as the watch (returned open), or by LIST pages (None)."""
        if self.settings.stream_list:
            try:
                return self._stream_list(served)
            except StreamRefused as exc:
                log.info("%s: %s; listing in pages", self.kind, exc)
            except ApiError as exc:
                if not refuses_streaming(exc):
                    raise
                self.reachability.answered()
                log.info("%s: the streaming list is refused (%s); listing in pages",
                         self.kind, exc)
        self._list(served)
        return None

    def _stream_list(self, served: Served) -> _Opened | None:
        """Read the initial events to the bookmark that ends them, then replace the kind's
        objects with them. None when stopping."""
        self.status.state = "listing"
        started = self.clock()
        held = self.sink.current()
        state = InitialState(self.objects, held)
        stream = self.transport.watch(served, "", self._timeout(), initial_events=True)
        self.reachability.answered()
        self._stream = stream
        lines = iter(stream)
        try:
            for line in lines:
                if self.stop.is_set():
                    break
                self.status.last_event = self.clock()
                if state.take(line):
                    self._listed(state.items.values(), state.resource_version, started,
                                 "streamed")
                    return stream, lines
                if self.settings.freeze_gc and state.events % self.settings.page_size == 0:
                    gc.freeze()  # as after each LIST page (WatchSettings.freeze_gc)
        except BaseException:
            self._stream = None
            stream.close()
            raise
        self._stream = None
        stream.close()
        if self.stop.is_set():
            return None
        raise StreamRefused(f"the streaming list ended after {state.events} events without "
                            "the bookmark that ends its initial events")

    def _list(self, served: Served) -> None:
        self.status.state = "listing"
        started = self.clock()
        held = self.sink.current()
        items: list[tuple[str, View]] = []
        continue_ = ""
        while True:
            try:
                page = self.transport.list(served, self.settings.page_size, continue_)
            except Gone:
                self.reachability.answered()
                if not continue_:
                    raise
                # The continue token outlived the API server's history (it holds the
                # list's resourceVersion): start the list over.
                log.info("%s: LIST continue token expired; listing from the start", self.kind)
                items.clear()
                continue_ = ""
                continue
            self.reachability.answered()
            self.status.last_event = self.clock()
            for obj in page.items:
                item = self.objects.item(obj, held)
                if item is not None:
                    items.append(item)
            for meta, problem in page.unreadable:
                self.objects.unreadable(meta, problem)
            # Every page of one LIST is cut from the same consistent state; the last
            # page's resourceVersion is the state the pages add up to.
            resource_version, continue_ = page.resource_version, page.continue_
            del page  # the wire objects: garbage now, not to be frozen
            if self.settings.freeze_gc:
                gc.freeze()  # see WatchSettings.freeze_gc
            if not continue_:
                break
        self._listed(items, resource_version, started, "listed")

    def _listed(self, items: Iterable[tuple[str, View]], resource_version: str,
                started: float, how: str) -> None:
        """The kind's whole state, at ``resource_version``, into the cache in one step."""
        items = list(items)
        self.sink.replace(self.kind, items, resource_version)
        if self._listed_once:
            self.status.relists += 1
        self._listed_once = True
        self.resource_version = resource_version
        self.backoff.reset()
        log.info("%s: %s %d objects at resourceVersion %s in %.1fs", self.kind, how,
                 len(items), resource_version, self.clock() - started)

    def _timeout(self) -> int:
        # Like client-go: a random server-side timeout in [min, 2 min) so that the watches
        # of many clients do not all end (and re-open) at once.
        return int(self.settings.watch_timeout * (1.0 + self.rng.random()))

    def _watch(self, served: Served, opened: _Opened | None = None) -> None:
        self.status.state = "watching"
        started = self.clock()
        received = 0 if opened is None else 1  # a streaming list's stream: the state came
        if opened is None:
            stream = self.transport.watch(served, self.resource_version, self._timeout())
            self.reachability.answered()
            lines: Iterator[WatchLine] = iter(stream)
        else:
            stream, lines = opened
        self._stream = stream
        try:
            if self.stop.is_set():  # stopped while the watch was being opened
                return
            for line in lines:
                if self.stop.is_set():
                    return
                if received == 0:
                    self.backoff.reset()
                received += 1
                self.status.last_event = self.clock()
                self._line(line)
        finally:
            self._stream = None
            stream.close()
        if self.stop.is_set():
            return
        if received == 0 and self.clock() - started < self.settings.min_watch_seconds:
            raise TransportError("the watch ended at once, with no event")

    def _line(self, line: WatchLine) -> None:
        type_ = line.type
        self.status.events[type_] += 1
        if type_ in (ADDED, MODIFIED, DELETED):
            if line.obj is None:
                self.objects.unreadable(line.meta, line.problem, removed=True)
                if line.meta is not None and line.meta.resource_version:
                    self.resource_version = line.meta.resource_version
                return
            meta = line.obj.metadata
            if meta.resource_version:
                self.resource_version = meta.resource_version
            if not self.objects.kept(line.obj):
                return  # not an object the cache holds, before or after this event
            key = object_key(self.kind, meta.namespace, meta.name, meta.uid)
            # A DELETED event carries the object's last state: its key is all that counts.
            # A version raygate cannot read (view None) removes the one it holds rather
            # than keep answering from a state the object has left.
            view = None if type_ == DELETED else self.objects.view(line.obj)
            self.sink.change(self.kind, type_, key, meta.resource_version, view)
        elif type_ == BOOKMARK:
            # A BOOKMARK carries only metadata.resourceVersion: every change up to it has
            # been sent, so a watch can resume from it.
            if line.obj is not None and line.obj.metadata.resource_version:
                self.resource_version = line.obj.metadata.resource_version
        elif type_ == ERROR:
            # An ERROR event's object is a metav1.Status; 410 means "too old resource
            # version", sent instead of an HTTP error once the watch has started.
            status = line.status or kube.Status()
            raise api_error(status.code, status.reason, status.message)
        else:
            log.warning("%s: skipping a watch event of unknown type %r", self.kind, type_)

    # --- failures -----------------------------------------------------------------------
    def _failed(self, exc: Exception) -> None:
        self.status.errors += 1
        self.status.last_error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, TransportError):
            self.reachability.failed(self.kind, str(exc), self.settings.backoff.maximum)
            return
        if isinstance(exc, ApiError):
            self.reachability.answered()
        log.warning("%s: %s", self.kind, self.status.last_error)

    def _backoff(self) -> bool:
        """Wait before the next attempt; False when stopping."""
        self.status.state = "backoff"
        return self._wait(self.backoff.next())
