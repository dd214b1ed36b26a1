"""The controller runtime, its first half: following the cache. What every follower of the
cache shares, so that each controller writes only what it reconciles (as
controller-runtime's reconcile loop and kopf's shared primitives let a Kubernetes
controller do); the keyed loop and the retries are ``controllers.reconcile``.

- ``Follower``: what the server starts with its loop and stops (``attach``, ``close``).
- ``OnLoop``: follows the cache on the server's event loop. After a publish
  (``delay_seconds`` later: a burst of publishes makes one run) and whenever ``wake``
  asks (the soonest wake stands), ``check`` runs on the loop; blocking writes go to a
  small pool (``write``), and what they answer comes back on the loop.
- ``OnThread``: the same on a thread of its own, for a follower whose work blocks: woken
  by a publish or ``wake``, asleep until ``idle_seconds`` says.
- Both: ``changes`` says what changed since the last look (``look_again``: everything).

``close`` is idempotent and never waits on the API server: a write in flight ends within
its request timeout, and a write not started yet is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Changes, Snapshot

__all__ = ["Follower", "Looks", "OnLoop", "OnThread"]


class Follower(Protocol):
    """What the server starts on its event loop and stops when it ends (``Services``)."""

    def attach(self, loop: asyncio.AbstractEventLoop) -> None: ...

    def close(self) -> None: ...


class Looks:
    """What changed in the cache since the last look."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._looked: Snapshot | None = None

    def changes(self, snap: Snapshot) -> Changes | None:
        """What changed from the last look to ``snap`` (now the last look); None: look at
        everything (the first look, after ``look_again``, or a change not known)."""
        looked, self._looked = self._looked, snap
        return None if looked is None else self.cache.changes_between(looked, snap)

    def look_again(self) -> None:
        """The next look sees everything (a new term, a resync)."""
        self._looked = None


class OnLoop(Looks, ABC):
    """Follows the cache on the server's event loop; ``check`` is the controller's."""

    def __init__(self, cache: ClusterCache, *, delay_seconds: float = 0.0,
                 at_start: bool = False, workers: int = 0, name: str = "raygate") -> None:
        super().__init__(cache)
        self.delay_seconds = delay_seconds
        """How long a publish waits before the check: a burst of publishes makes one."""
        self.at_start = at_start
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.Handle | None = None
        self._due = 0.0
        self._unfollow: Callable[[], None] | None = None
        self._pool = (ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
                      if workers else None)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @abstractmethod
    def check(self) -> object:
        """The controller's work, on the loop."""

    def wanted(self) -> bool:
        """Whether a wake is worth a check now (a controller with nothing to look at
        says no, and publishes cost it nothing)."""
        return True

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the cache's publishes on ``loop`` (the server's)."""
        self._loop = loop
        self._unfollow = self.cache.follow_on(loop, self.wake, self.delay_seconds)
        if self.at_start:
            self.wake(0.0)

    def close(self) -> None:
        self.closed = True  # a wake already queued on the loop finds it
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def wake(self, delay: float) -> None:
        """``check`` within ``delay`` seconds; a wake due sooner stands."""
        loop = self._loop
        if loop is None or self.closed or not self.wanted():
            return
        due = loop.time() + delay
        if self._timer is not None:
            if due >= self._due:
                return
            self._timer.cancel()
        # Its own due time: uvloop makes a ``call_later(0)`` a bare Handle, no ``when``.
        self._timer, self._due = loop.call_later(delay, self._run), due

    def _run(self) -> None:
        self._timer = None
        if not self.closed:
            self.check()

    def write(self, call: Callable[..., object], *args: Any,
              done: Callable[[BaseException | None], None]) -> None:
        """``call(*args)`` (a blocking API write) in the pool; ``done(error)`` on the loop
        when it ends, error None when it succeeded. A write ``close`` cancelled before it
        began reports nothing."""
        assert self._loop is not None and self._pool is not None
        future = self._loop.run_in_executor(self._pool, call, *args)

        def finished(ended: asyncio.Future[object]) -> None:
            if not ended.cancelled():
                done(ended.exception())

        future.add_done_callback(finished)


class OnThread(ABC):
    """Follows the cache (None: only ``wake``) on a thread of its own; ``check`` is the
    controller's. ``doing`` names the work in the log line of an error ``check`` lets out
    (a bug: logged, and the thread goes on ``after_bug_seconds`` later)."""

    def __init__(self, cache: ClusterCache | None, log: logging.Logger, *, name: str,
                 doing: str, delay_seconds: float = 0.0, at_start: bool = False,
                 after_bug_seconds: float = 0.0) -> None:
        self._source = cache
        self.log = log
        self.name = name
        self.doing = doing
        self.delay_seconds = delay_seconds
        """How long a wake waits before the check: a burst of publishes makes one."""
        self.at_start = at_start
        self.after_bug_seconds = after_bug_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unfollow: Callable[[], None] | None = None

    @abstractmethod
    def check(self) -> object:
        """The controller's work, on the thread."""

    def idle_seconds(self) -> float | None:
        """How long the thread may sleep unwoken; None: until woken."""
        return None

    def attach(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the thread (the server's loop is not needed)."""
        if self._source is not None:
            self._unfollow = self._source.add_listener(lambda _: self._wake.set())
        if self.at_start:
            self._wake.set()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            # A write in flight ends within the API request timeout; not waited for.
            self._thread.join(timeout=1.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.idle_seconds())
            if self._stop.is_set():
                return
            if self._wake.is_set():
                self._stop.wait(self.delay_seconds)  # let a burst finish
                self._wake.clear()
            try:
                self.check()
            except Exception:  # a bug: say so, and keep the thread going
                self.log.exception("%s failed", self.doing)
                self._stop.wait(self.after_bug_seconds)
