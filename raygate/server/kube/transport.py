"""What the list/watch driver and the API connection say to each other: the errors, a LIST
page, a WATCH line, the retry policy and settings, and the protocols of the transport
and of the sink that takes what was read."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from raygate.server.cache.keys import ObjectKey, View
from raygate.server.cache.snapshot import Snapshot
from raygate.server.kube.resources import Served
from raygate.server.wire import kube

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"
"""The types of watch events (k8s.io/apimachinery pkg/watch/watch.go)."""


class TransportError(Exception):
    """No usable answer: the connection failed, broke, or stayed silent too long."""


class ApiError(Exception):
    """The API server answered with an error ``Status``."""

    def __init__(self, code: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class Gone(ApiError):
    """410: the resourceVersion (or continue token) asked for is older than the API
    server's history."""


class NotServed(ApiError):
    """404: the resource is not served (a custom resource whose CRD is not installed)."""


def api_error(code: int, reason: str = "", message: str = "") -> ApiError:
    if code == 410:
        return Gone(code, reason, message)
    if code == 404:
        return NotServed(code, reason, message)
    return ApiError(code, reason, message)


@dataclass(frozen=True)
class BackoffPolicy:
    """Delays between failed attempts: ``initial × factor^n``, capped at ``maximum``, each
    stretched by a random fraction up to ``jitter``."""

    initial: float = 0.8
    """Seconds before the first retry. Default 0.8 s, client-go's reflector's."""
    maximum: float = 30.0
    """Seconds, the longest delay before jitter. Default 30 s, client-go's reflector's:
    an API server that is down for long is retried twice a minute per kind."""
    factor: float = 2.0
    jitter: float = 1.0
    """Fraction: a delay ``d`` becomes ``d × (1 + jitter × U[0, 1))``, so that watchers
    of several kinds (and several raygate replicas) do not retry in step."""

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after ``failures`` failures in a row (1: the first); stretched
        by ``rng``'s draw (none: no jitter). The one backoff: the watches' (``Backoff``)
        and the controllers' retries (``controllers.reconcile.Retries``)."""
        delay = min(self.initial * self.factor ** min(failures - 1, 64), self.maximum)
        return delay if rng is None else delay * (1.0 + self.jitter * rng.random())


class Backoff:
    """A watch's failures in a row, and the delay after each."""

    def __init__(self, policy: BackoffPolicy, rng: random.Random) -> None:
        self.policy = policy
        self.rng = rng
        self.failures = 0

    def next(self) -> float:
        self.failures += 1
        return self.policy.delay(self.failures, self.rng)

    def reset(self) -> None:
        self.failures = 0


@dataclass(frozen=True)
class WatchSettings:
    """How raygate lists and watches. Every duration is in seconds."""

    page_size: int = 500
    """Objects per LIST page (``limit``). Default 500, client-go's reflector's: pages the
    API server builds cheaply, about 300 round trips for 150,000 pods."""
    watch_timeout: float = 300.0
    """The shortest server-side WATCH timeout (``timeoutSeconds``); each watch asks for
    a random one in [this, 2 × this), as client-go does, so watches of many clients do
    not end together. Default 300 s. The stream then resumes from its last version."""
    read_timeout: float = 150.0
    """A watch that receives nothing for this long is deemed dead and opened again.
    Default 150 s: kube-apiserver sends a BOOKMARK about once a minute to a watcher that
    allows them, so two minutes of silence means a broken connection."""
    request_timeout: float = 60.0
    """Limit on a LIST page or a discovery request, and on connecting."""
    rediscover_seconds: float = 60.0
    """How often a custom resource that is not installed is looked up again."""
    freeze_gc: bool = True
    """After each LIST page, each large re-list applied and every 20,000 changes, move
    every live object into the garbage collector's permanent generation (``gc.freeze``).
    150,000 pods are millions of objects that never form cycles; left to the collector,
    each full collection walks them all (during a sync, again and again: the sync takes
    several times longer) and pauses every thread. Frozen objects are still freed by
    reference counting; only cyclic garbage old enough to have left the young
    generations when a freeze happens is kept for good."""
    publish_interval: float = 0.05
    """Seconds: the cache publishes at most this often. Events arriving meanwhile are
    applied to the same next snapshot, so a burst costs one publish, and whatever
    follows each publish (the admission status's listener, which re-derives the changed
    RayClusters on the server's event loop) runs at most 20 times a second. A lone event
    after a quiet spell is published at once. Default 50 ms: a change reaches filter
    decisions well within one kube-scheduler cycle."""
    stream_list: bool = False
    """Take a kind's state by the streaming list (KEP-3157: a WATCH with
    ``sendInitialEvents=true``) where the API server serves it, rather than by LIST pages
    (kube-apiserver 1.37 serves it by default: its WatchList gate, beta and on since 1.34,
    k8s.io/apiserver pkg/features/kube_features.go); one that refuses it (422 with the
    gate off) or never marks the end of the initial events is listed in pages. Off by
    default: in JSON, what raygate decodes, 1.37 spends 2-3x the CPU on a streaming list
    that it spends on the same objects' LIST pages (it copies each object out of its
    watch cache, cache_watcher.go ``getMutableObject``, encodes it, then encodes the
    event around it again, handlers/response.go ``doEncode``), and the API server's CPU
    is what a sync waits for (docs/benchmarks.md)."""
    compression: bool = False
    """Ask for gzip (``Accept-Encoding``) on LIST pages and streaming lists. kube-apiserver
    compresses at level 1 what exceeds 128 KiB; over loopback that is CPU spent on both
    sides of a connection that needed none (docs/benchmarks.md measures it)."""
    min_watch_seconds: float = 1.0
    """A watch that ends with no event sooner than this counts as a failure (backs off),
    so an API server that closes watches at once is not hammered."""
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)


@dataclass(frozen=True, slots=True)
class ListPage:
    items: list[Any]
    """Wire objects (``resource.wire``) of the page."""
    resource_version: str
    continue_: str = ""
    unreadable: list[tuple[kube.ObjectMeta | None, str]] = field(default_factory=list)
    """Items that could not be decoded: their metadata when it could be, and why."""


@dataclass(frozen=True, slots=True)
class WatchLine:
    """One decoded line of a watch stream."""

    type: str
    obj: Any = None
    """The wire object of ADDED, MODIFIED, DELETED and BOOKMARK."""
    status: kube.Status | None = None
    """The error of an ERROR event."""
    meta: kube.ObjectMeta | None = None
    """An object that could not be decoded: what its metadata says."""
    problem: str = ""
    initial_events_end: bool = False
    """A BOOKMARK that ends a streaming list's initial events (``kube.INITIAL_EVENTS_END``):
    every object of the kind's state at its resourceVersion has been sent."""


class WatchStream(Protocol):
    def __iter__(self) -> Iterator[WatchLine]:
        ...

    def close(self) -> None:
        """End the stream; safe from another thread while it is being read."""
        ...


class Transport(Protocol):
    """The API server, as the driver needs it. Errors: ``ApiError`` (and its ``Gone`` and
    ``NotServed``) for an answered error, ``TransportError`` for no answer."""

    def discover(self, group_version: str) -> frozenset[str] | None:
        """The resource names (plurals) a group/version serves; None if it serves none."""
        ...

    def list(self, served: Served, limit: int, continue_: str) -> ListPage:
        ...

    def watch(self, served: Served, resource_version: str, timeout_seconds: int, *,
              initial_events: bool = False) -> WatchStream:
        """Every change after ``resource_version``; with ``initial_events``, a streaming
        list: first the state not older than it ("" for the latest, read consistently),
        one ADDED event per object, then a ``WatchLine.initial_events_end`` BOOKMARK."""
        ...

    def close(self) -> None:
        """Release connections and helper threads (after every watcher has stopped)."""
        ...


class Sink(Protocol):
    """Where the driver's changes go (``raygate.server.kube.source.CacheWriter``)."""

    def current(self) -> Snapshot:
        """The latest state built, to keep the views a re-list finds unchanged."""
        ...

    def replace(self, kind: str, items: list[tuple[str, View]], resource_version: str) -> None:
        ...

    def change(self, kind: str, type_: str, key: ObjectKey, resource_version: str,
               view: View | None) -> None:
        """An ADDED, MODIFIED or DELETED event; ``view`` None removes the object (deleted,
        or a version raygate cannot read)."""
        ...

    def absent(self, kind: str) -> None:
        """The kind is not served: drop its objects."""
        ...
