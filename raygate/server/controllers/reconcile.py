"""The controller runtime, its second half: retries and the keyed reconcile loop (the
first, following the cache, is ``controllers.follow``).

- ``Retries``: a failure record per key: when it is tried again (``BackoffPolicy.delay``,
  the one backoff, ``kube.transport``), what was said of it; success forgets it.
- ``Reconciler``: the keyed loop on a thread of its own. The controller gives the keys a
  change touches (``keys``) and the work for one (``reconcile``); the runtime reconciles
  each, and those whose retry is due, tries one that raises again after the backoff
  (logged once per error), forgets one that succeeds or is gone, and stops cleanly.
  A controller that writes per object is a ``Reconciler``: the floors' budgets
  (``floor_budgets``), the scale-gate writer to come.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Changes, Snapshot
from raygate.server.controllers.follow import Looks, OnThread
from raygate.server.kube.transport import BackoffPolicy

__all__ = ["ClusterKey", "Failure", "Reconciler", "Result", "Retries", "cluster_keys"]

K = TypeVar("K")
Key = TypeVar("Key", bound=tuple[str, ...])
ClusterKey = tuple[str, str]
"""A RayCluster's (namespace, name): the key of the controllers that write per cluster."""


def cluster_keys(snap: Snapshot, changes: Changes | None,
                 known: Collection[ClusterKey]) -> set[ClusterKey]:
    """A per-RayCluster controller's keys: on a full look (``changes`` None) every
    RayCluster and those it ``known`` (wrote for; one gone is cleaned up); else the
    RayClusters the change touched that it knows or that still exist."""
    if changes is None:
        return {(c.namespace, c.name) for c in snap.rayclusters()} | set(known)
    return {key for key in changes.clusters if key in known or snap.raycluster(*key) is not None}


@dataclass(slots=True)
class Failure:
    """A key's failures in a row."""

    attempts: int = 0
    refusals: int = 0
    """Of those, the API server's refusals of the write itself (it answered: no)."""
    retry_at: float = 0.0
    delay: float = 0.0
    """Seconds from the last failure to ``retry_at``."""
    said: str = ""
    """What was logged of it last: said again only when it changes."""

    def news(self, said: str) -> bool:
        """Whether ``said`` differs from what was said last (and remember it)."""
        new, self.said = said != self.said, said
        return new


class Retries(Generic[K]):
    """The failure records of the keys that failed: each is tried again after the backoff
    (``policy``: its delay grows with the failures in a row, up to its maximum)."""

    def __init__(self, policy: BackoffPolicy) -> None:
        self.policy = policy
        self._failures: dict[K, Failure] = {}

    def failed(self, key: K, now: float, *, refused: bool = False) -> Failure:
        failure = self._failures.setdefault(key, Failure())
        failure.attempts += 1
        failure.refusals += refused
        failure.delay = self.policy.delay(failure.attempts)
        failure.retry_at = now + failure.delay
        return failure

    def forget(self, key: K) -> Failure | None:
        """Drop ``key``'s record (it succeeded, or its object is gone); returns it."""
        return self._failures.pop(key, None)

    def get(self, key: K) -> Failure | None:
        return self._failures.get(key)

    def waiting(self, key: K, now: float) -> bool:
        """Whether ``key`` waits out its backoff at ``now``."""
        failure = self._failures.get(key)
        return failure is not None and failure.retry_at > now

    def due(self, now: float) -> set[K]:
        return {key for key, f in self._failures.items() if f.retry_at <= now}

    def next_due(self) -> float | None:
        return min((f.retry_at for f in self._failures.values()), default=None)

    def clear(self) -> None:
        self._failures.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._failures

    def __len__(self) -> int:
        return len(self._failures)


class Result(Enum):
    """What ``Reconciler.reconcile`` made of a key."""

    DONE = "done"
    """In line with the snapshot: a failure record it had goes, and the log says so."""
    GONE = "gone"
    """Its object is gone: the key is forgotten, record and all, without a word."""


class Reconciler(OnThread, Looks, Generic[Key]):
    """The keyed reconcile loop on a thread of its own. After each publish (a burst makes
    one check), ``reconcile`` runs for each key the change touched (``keys``) and each
    whose retry is due; a key that raises is logged (again only when what is said
    changes) and tried again after the backoff; a change to it meanwhile waits for that.
    Only while ``leading``: a new term starts from a look at every key."""

    def __init__(self, cache: ClusterCache, clock: Callable[[], float],
                 log: logging.Logger, backoff: BackoffPolicy, *, name: str, doing: str,
                 delay_seconds: float = 0.2, after_bug_seconds: float = 0.0,
                 leading: Callable[[], bool] = lambda: True) -> None:
        OnThread.__init__(self, cache, log, name=name, doing=doing,
                          delay_seconds=delay_seconds, at_start=True,
                          after_bug_seconds=after_bug_seconds)
        Looks.__init__(self, cache)
        self.clock = clock
        self.leading = leading
        self.retries: Retries[Key] = Retries(backoff)
        self._requeue: dict[Key, float] = {}
        """Per key, when its last reconcile asked to be looked at again (``requeue``)."""

    # --- what the controller supplies -----------------------------------------------
    @abstractmethod
    def keys(self, snap: Snapshot, changes: Changes | None) -> Iterable[Key]:
        """The keys ``changes`` touched; every key when None."""

    @abstractmethod
    def reconcile(self, key: Key, snap: Snapshot, now: float) -> Result:
        """Bring ``key`` in line with ``snap``; raise to be tried again."""

    def subject(self, key: Key, snap: Snapshot) -> str:
        """What reconciling ``key`` does, for the log."""
        return f"reconciling {'/'.join(key)}"

    def fields(self, key: Key) -> Mapping[str, str]:
        """``extra=`` of a log line about ``key``."""
        return {}

    def prepare(self, now: float) -> bool:
        """Before the keys: False skips this check (what every key needs failed)."""
        return True

    def requeue(self, key: Key, at: float) -> None:
        """From ``reconcile``: look at ``key`` again at ``at`` even if nothing changes
        (what it decided changes with time alone; controller-runtime's RequeueAfter).
        The request lasts until the key's next reconcile, which asks again if need be."""
        self._requeue[key] = at

    def look_again(self) -> None:
        super().look_again()
        self._requeue.clear()  # every key is looked at anyway

    # --- the loop ---------------------------------------------------------------------
    def check(self) -> None:
        """Reconcile every key that changed since the last check, and those due."""
        if not self.cache.ready:
            # Until every kind is listed the snapshot is empty: every object would look
            # gone (the source publishes nothing before; its first publish wakes it).
            return
        if not self.leading():
            self.retries.clear()
            self.look_again()
            return
        now = self.clock()
        if not self.prepare(now):
            return
        snap = self.cache.snapshot
        keys = set(self.keys(snap, self.changes(snap))) | self.retries.due(now) | {
            key for key, at in self._requeue.items() if at <= now}
        for key in sorted(keys):
            if not self.retries.waiting(key, now):  # else its retry comes
                self.reconcile_one(key, snap, now)

    def reconcile_one(self, key: Key, snap: Snapshot, now: float) -> None:
        self._requeue.pop(key, None)
        try:
            result = self.reconcile(key, snap, now)
        except Exception as exc:
            self.failed(self.retries, key, self.subject(key, snap), exc, now)
            return
        if key not in self.retries:
            return
        if result is Result.GONE:
            self.retries.forget(key)
        else:
            self.succeeded(self.retries, key, self.subject(key, snap))

    def failed(self, retries: Retries[Key], key: Key, subject: str, exc: Exception,
               now: float) -> None:
        """Record ``key``'s failure in ``retries``; say it, once per what is said."""
        failure = retries.failed(key, now)
        if failure.news(f"{subject}: {exc}"):
            self.log.warning("%s failed: %s; trying again in %gs, then less often",
                             subject, exc, failure.delay, extra=self.fields(key))
        else:
            self.log.debug("%s failed again: %s; next try in %gs", subject, exc,
                           failure.delay, extra=self.fields(key))

    def succeeded(self, retries: Retries[Key], key: Key, subject: str) -> None:
        if retries.forget(key) is not None:
            self.log.info("%s: done now", subject, extra=self.fields(key))

    def idle_seconds(self) -> float | None:
        """Until the next retry or requeue is due (a key that waits out its backoff is
        looked at again with its retry); None (until a publish) while the cache loads."""
        requeue = min((at for key, at in self._requeue.items() if key not in self.retries),
                      default=None)
        due = [at for at in (self.retries.next_due(), requeue) if at is not None]
        if not self.cache.ready or not due:
            return None
        return max(min(due) - self.clock(), 0.0)
