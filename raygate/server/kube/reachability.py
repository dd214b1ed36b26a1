"""Whether the API server answers, as the watchers of every kind find it: one log line
when it stops answering, one when it answers again — not a line per kind and attempt.

An API server that is down (a control-plane restart, a network partition) fails every
kind's requests at once, and each kind retries with its own backoff (up to 30 s apart);
logged per attempt that was a storm of identical warnings (with urllib3's own retries
below it, 45 in the first 6 s). The attempts go on as before; only the first failure
after a success is a warning, the rest are debug, and the first success after it says
how long the outage lasted and how many attempts failed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Reachability"]

log = logging.getLogger("raygate.kube")


class Reachability:
    """Shared by the watchers of one API server; safe from their threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.down_since: float | None = None
        """When the first failure of the current outage happened; None while answering.
        Read without the lock on every answer (each LIST page, each watch opened): a
        stale read only delays the "answers again" line to the next answer."""
        self.failures = 0
        """Failed attempts in the current outage, every kind counted."""

    def failed(self, kind: str, problem: str, retry_at_most: float) -> None:
        """A request of ``kind`` got no usable answer (``problem`` says why)."""
        with self._lock:
            self.failures += 1
            first = self.down_since is None
            if first:
                self.down_since = self.clock()
        if first:
            log.warning("no answer from the API server (%s: %s); every kind retries with "
                        "backoff, at most %.0fs apart, and a line follows when it answers",
                        kind, problem, retry_at_most)
        else:
            log.debug("%s: still no answer from the API server: %s", kind, problem)

    def answered(self) -> None:
        """A request got an answer (an error ``Status`` counts: the server is there)."""
        if self.down_since is None:
            return
        with self._lock:
            if self.down_since is None:
                return
            seconds, failures = self.clock() - self.down_since, self.failures
            self.down_since, self.failures = None, 0
        log.info("the API server answers again, after %.1fs and %d failed attempts",
                 seconds, failures)
