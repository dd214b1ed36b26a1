"""Which replica acts: leadership of a Lease, for the controllers that must act from one
raygate at a time (the extenders, the webhook and the budgets' server-side apply need
none: each replica answers or writes the same thing).

``Leadership.leading()`` is the one question a controller asks, before each action. It is
True only while this replica holds the Lease and its last successful renewal began less
than ``renewDeadlineSeconds`` ago, by the monotonic clock. Another replica takes the Lease
only after it has seen the record unchanged for ``leaseSeconds`` (> the renew deadline), so
a leader cut off from the API server stops acting before anyone else can start — whatever
the thread renewing it is doing meanwhile (an attempt blocked on a dead connection
included). ``stop`` stops acting first, then releases the Lease: the next leader takes it
at its next attempt (``retrySeconds``), not after the lease runs out.

The attempts themselves (``Elector``) are ``raygate.server.kube.lease``'s, over the
``kubernetes`` client's leader election. Without a cluster (``--demo``, snapshots) or with
leader election off there is no Lease: ``Leadership(None)`` leads while started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Elector", "Leadership", "LeaseTiming"]

log = logging.getLogger("raygate.leader")


@dataclass(frozen=True)
class LeaseTiming:
    """``server.leaderElection``'s times; ``load_settings`` checks that
    retry * 1.2 < renew deadline < lease, and retry >= 1 (the client library's own bounds)."""

    lease_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    @property
    def request_timeout(self) -> float:
        """Each API call of an attempt (two at most: read, then create or replace) is
        bounded so that an attempt begun just before the renew deadline still ends
        before the lease runs out: then the loop has told its listeners in time too."""
        return min(self.retry_seconds,
                   (self.lease_seconds - self.renew_deadline_seconds) / 2)


class Elector(Protocol):
    identity: str

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease after it."""
        ...

    def release(self) -> bool:
        """Give the Lease up if this replica holds it; True when it was released."""
        ...


Listener = Callable[[bool], None]


class Leadership:
    """Leadership of one Lease by this replica: ``start``, ``leading``, ``stop``."""

    def __init__(self, elector: Elector | None, timing: LeaseTiming = LeaseTiming(), *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.elector = elector
        self.identity = "this replica (no lease)" if elector is None else elector.identity
        self.timing = timing
        self._clock = clock
        self._running = False
        self._renewed: float | None = None
        """When the last successful attempt began (``clock``); None: not held."""
        self._told = False
        """What listeners were last told."""
        self.transitions: Counter[str] = Counter()
        """Changes of leadership by direction: ``gained``, ``lost``."""
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def leading(self) -> bool:
        """Whether this replica may act now; safe from any thread, and cheap (no I/O)."""
        if not self._running:
            return False
        if self.elector is None:
            return True
        renewed = self._renewed
        return (renewed is not None
                and self._clock() - renewed < self.timing.renew_deadline_seconds)

    def on_change(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(leading)`` on each change, from the thread that noticed it (the
        election's, or the caller of ``start``/``stop``): it must be quick. Returns a
        function that removes it."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def follow_on(self, loop: asyncio.AbstractEventLoop,
                  callback: Listener) -> Callable[[], None]:
        """``on_change``, with ``callback(leading)`` called on ``loop`` (a loop closed
        meanwhile has nobody left to tell). Returns a function that stops it."""

        def hop(leading: bool) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback, leading)

        return self.on_change(hop)

    def start(self) -> Leadership:
        """Become a candidate (without a Lease: lead at once)."""
        if self._running:
            return self
        self._running = True
        self._stopping.clear()
        if self.elector is None:
            self._tell()
        else:
            self._thread = threading.Thread(target=self._run, name="raygate-leader",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop acting at once, then release the Lease if held (this waits for an attempt
        in progress, bounded by the timing's request timeout). Idempotent."""
        with self._lock:  # two stops at once (a signal's, the loop's end): one releases
            if not self._running:
                return
            self._running = False
        self._stopping.set()
        self._tell()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._renewed = None
        if self.elector is not None:
            try:
                if self.elector.release():
                    log.info("%s released the lease", self.identity)
            except Exception as exc:  # it runs out after leaseSeconds anyway
                log.warning("%s could not release the lease: %s", self.identity, exc)

    def step(self) -> float:
        """One attempt to acquire or renew, and the listeners told; returns how long to
        wait before the next (the election thread's loop; tests call it directly)."""
        assert self.elector is not None
        began = self._clock()
        try:
            held = self.elector.try_acquire_or_renew()
        except Exception as exc:
            # The lock catches the API server's refusals; a connection that fails below
            # HTTP raises. Either way: not renewed this time.
            log.debug("%s: leader election attempt failed: %s", self.identity, exc)
            held = False
        if held and self._running:
            self._renewed = began
        self._tell()
        wait = self.timing.retry_seconds
        renewed = self._renewed
        if renewed is not None:
            # Wake at the renew deadline too, so listeners hear of a loss when it happens.
            left = renewed + self.timing.renew_deadline_seconds - self._clock()
            if 0 < left < wait:
                wait = left
        return wait

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._stopping.wait(self.step())

    def _tell(self) -> None:
        leading = self.leading()
        with self._lock:
            if leading == self._told:
                return
            self._told = leading
            self.transitions["gained" if leading else "lost"] += 1
            listeners = list(self._listeners)
        if leading:
            log.info("%s is the leader now", self.identity)
        elif self._running:
            log.warning("%s is no longer the leader: no renewal of the lease for %gs",
                        self.identity, self.timing.renew_deadline_seconds)
        else:
            log.info("%s stopped leading (stopping)", self.identity)
        for listener in listeners:
            try:
                listener(leading)
            except Exception:
                log.exception("a leadership listener failed")
