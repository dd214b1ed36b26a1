"""Each RayCluster's floor as PodDisruptionBudgets, kept in step with the cache.

The rule is ``raygate.policy.budgets.desired_budgets``; this module writes what it says.
After each publish of the cache, a thread of its own (never the request path) looks at
the RayClusters the publish touched (``ClusterCache.changes_between``), computes their
budgets and compares them with a memo of what it wrote: an unchanged cluster costs no
API call. A budget that changed is written with a server-side apply (field manager
``raygate``, forced), owned by its RayCluster (``blockOwnerDeletion: false``: no
permission on the RayCluster's finalizers needed), so the garbage collector deletes it
with the cluster. A budget a cluster no longer wants (a group's floor went to 0, the
group went away, the cluster was suspended) is deleted.

Startup: every budget raygate wrote earlier is listed once (label
``app.kubernetes.io/managed-by: raygate``) to seed the memo, then every cluster is
reconciled. Every ``resync_seconds`` the memo is dropped and the same happens again: a
budget someone edited or deleted comes back, with no watch on budgets.

Two replicas need no leader: each applies the object its own snapshot calls for, and
the last write of each is made from its latest snapshot, so both end on the same object
(an apply of an unchanged object writes nothing).

A write that fails (403: the ClusterRole lacks the verb; 422; the API server down) is
counted (``raygate_disruption_budget_writes_total{result="failed"}``), logged once per
cluster and failure (again only when either changes), and that cluster is tried again
after a delay that doubles from ``backoff_initial`` up to ``backoff_maximum``: never in a
hot loop. The other clusters go on.

``kubectl describe raycluster`` shows each budget written (``FloorBudgetWritten``: a new
or changed floor) and each failure (``FloorBudgetFailed``, a warning; a failure that
repeats is one Event with a count), said by the leader (``controllers.events``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from raygate.policy.budgets import LABEL_MANAGED_BY, MANAGED_BY, Budget, desired_budgets
from raygate.policy.model import RayClusterView
from raygate.process.logs import about
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Snapshot
from raygate.server.controllers.events import (
    RAYCLUSTER_API_VERSION,
    EventRecorder,
    Reason,
    Regarding,
)
from raygate.server.metrics.registry import Metrics

__all__ = ["BudgetApi", "FloorBudgets", "manifest"]

log = logging.getLogger("raygate.budgets")

SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"

ClusterKey = tuple[str, str]
"""(namespace, RayCluster name)."""


class BudgetApi(Protocol):
    """What the writer asks of the API server (``raygate.server.kube.client.KubeTransport``)."""

    def apply_budget(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Server-side apply of ``body``, or raise."""

    def delete_budget(self, namespace: str, name: str) -> None:
        """Delete the budget (gone already is no error), or raise."""

    def list_budgets(self, label_selector: str) -> list[tuple[str, str, str]]:
        """``(namespace, name, raygate.io/raycluster label)`` of each budget selected, in
        every namespace; or raise."""


def manifest(budget: Budget) -> dict[str, Any]:
    """The PodDisruptionBudget ``budget`` stands for, as raygate applies it."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": budget.name,
            "namespace": budget.namespace,
            "labels": dict(budget.labels),
            "ownerReferences": [{
                "apiVersion": RAYCLUSTER_API_VERSION, "kind": "RayCluster",
                "name": budget.cluster, "uid": budget.cluster_uid,
                # true would need `update` on rayclusters/finalizers
                # (OwnerReferencesPermissionEnforcement); the garbage collector deletes
                # the budget with its owner either way.
                "blockOwnerDeletion": False,
            }],
        },
        "spec": {
            # An integer, not a percentage: the disruption controller then needs no scale
            # subresource of the pods' controller (a RayCluster has none).
            "minAvailable": budget.min_available,
            "selector": {"matchLabels": dict(budget.selector)},
            # A pending or unready pod never blocks a drain: only the running floor counts.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


@dataclass(slots=True)
class _Failure:
    attempts: int
    retry_at: float
    logged: str
    """What was logged last (the desired budgets and the error): logged again on change."""


_SEED: ClusterKey = ("", "")
"""The failure record of the startup list, beside those of the clusters."""


class FloorBudgets:
    def __init__(self, cache: ClusterCache, api: BudgetApi, metrics: Metrics,
                 clock: Callable[[], float], *, delay_seconds: float = 0.2,
                 backoff_initial: float = 1.0, backoff_maximum: float = 300.0,
                 resync_seconds: float = 600.0, events: EventRecorder | None = None) -> None:
        self.cache = cache
        self.api = api
        self.clock = clock
        self.delay_seconds = delay_seconds
        """How long a publish waits before the check: a burst of publishes makes one."""
        self.backoff_initial = backoff_initial
        self.backoff_maximum = backoff_maximum
        self.resync_seconds = resync_seconds
        self.events = events
        # Lock-free cells (metrics.registry): this thread is the only one that writes them.
        self._written = {result: metrics.disruption_budget_writes.labels(result)
                         for result in ("applied", "deleted", "failed")}
        self._memo: dict[ClusterKey, dict[str, Budget | None]] | None = None
        """Per cluster, the budgets raygate knows are there: what it applied, or None for
        one listed (content unknown: applied again). None: not listed yet."""
        self._failures: dict[ClusterKey, _Failure] = {}
        self._checked: Snapshot | None = None
        self._resync_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._remove_listener: Callable[[], None] | None = None

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Follow the cache's publishes in a thread of its own."""
        self._remove_listener = self.cache.add_listener(lambda _: self._wake.set())
        self._wake.set()  # everything once at start
        self._thread = threading.Thread(target=self._run, name="raygate-budgets",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            # A write in flight ends within the API request timeout; not waited for.
            self._thread.join(timeout=1.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._idle_seconds())
            if self._stop.is_set():
                return
            if self._wake.is_set():
                self._stop.wait(self.delay_seconds)  # let a burst of publishes finish
                self._wake.clear()
            try:
                self.check()
            except Exception:  # a bug: say so, and keep the thread (and the budgets) going
                log.exception("checking the disruption budgets failed")
                self._stop.wait(self.backoff_maximum)

    def _idle_seconds(self) -> float | None:
        """Until the next retry or resync is due; None: until woken (the cache is not
        loaded yet, its first publish wakes the thread)."""
        if not self.cache.ready:
            return None
        now = self.clock()
        if self._memo is None:
            # Nothing is written before the list: only its own retry can be due (another
            # cluster's due retry would wake the thread to a check that lists nothing, at
            # once and again, for as long as the list keeps failing).
            seed = self._failures.get(_SEED)
            return 0.0 if seed is None else max(seed.retry_at - now, 0.0)
        due = min((f.retry_at for f in self._failures.values()), default=self._resync_at)
        return max(min(due, self._resync_at) - now, 0.0)

    # --- the check ----------------------------------------------------------------------
    def check(self) -> None:
        """Bring the budgets of every RayCluster that changed since the last check (and
        of those whose retry is due) in line with the current snapshot."""
        if not self.cache.ready:
            # Until every kind is listed the snapshot is empty: a budget listed at start
            # would look like a cluster's that is gone, and be forgotten (the list/watch
            # source publishes nothing before; its first publish wakes the thread).
            return
        now = self.clock()
        if now >= self._resync_at:
            self._memo, self._checked = None, None
            self._resync_at = now + self.resync_seconds
        if self._memo is None and not self._seed(now):
            return
        memo = self._memo
        assert memo is not None
        snap = self.cache.snapshot
        changes = None if self._checked is None else self.cache.changes_between(
            self._checked, snap)
        self._checked = snap
        if changes is None:
            keys = {(c.namespace, c.name) for c in snap.rayclusters()} | memo.keys()
        else:
            keys = {key for key in changes.clusters if key in memo
                    or snap.raycluster(*key) is not None}
        keys |= {key for key, f in self._failures.items() if f.retry_at <= now}
        keys.discard(_SEED)
        for key in sorted(keys):
            failure = self._failures.get(key)
            if failure is not None and failure.retry_at > now:
                continue  # its retry comes; a change meanwhile waits for it
            self._reconcile(key, snap, now)

    def _seed(self, now: float) -> bool:
        failure = self._failures.get(_SEED)
        if failure is not None and failure.retry_at > now:
            return False
        try:
            listed = self.api.list_budgets(SELECTOR)
        except Exception as exc:
            self._failed(_SEED, "list", exc, now, "listing raygate's disruption budgets")
            return False
        self._succeeded(_SEED, "listing raygate's disruption budgets")
        memo: dict[ClusterKey, dict[str, Budget | None]] = {}
        for namespace, name, cluster in listed:
            memo.setdefault((namespace, cluster), {})[name] = None
        self._memo = memo
        return True

    def _reconcile(self, key: ClusterKey, snap: Snapshot, now: float) -> None:
        assert self._memo is not None
        view = snap.raycluster(*key)
        if view is None:
            # Deleted: its budgets go with it (ownerReferences, the garbage collector).
            self._memo.pop(key, None)
            self._failures.pop(key, None)
            return
        if not view.uid:
            return  # no owner to give a budget, and no reason to take one away
        desired = {b.name: b for b in desired_budgets(view)}
        memo = self._memo.setdefault(key, {})
        what = ", ".join(f"{b.name} minAvailable {b.min_available}"
                         for b in desired.values()) or "none"
        try:
            for name, budget in desired.items():
                if memo.get(name) != budget:
                    self.api.apply_budget(budget.namespace, name, manifest(budget))
                    self._tell(view, Reason.FLOOR_BUDGET_WRITTEN, (
                        f"PodDisruptionBudget {name} keeps {budget.min_available} "
                        f"pod{'s' if budget.min_available != 1 else ''} of group "
                        f"{budget.group} from voluntary disruption (its floor)"),
                        Regarding("policy/v1", "PodDisruptionBudget", key[0], name, ""))
                    memo[name] = budget
                    self._written["applied"].inc()
            for name in [n for n in memo if n not in desired]:
                self.api.delete_budget(key[0], name)
                del memo[name]
                self._written["deleted"].inc()
        except Exception as exc:
            self._tell(view, Reason.FLOOR_BUDGET_FAILED,
                       f"Writing its floor's PodDisruptionBudgets ({what}) failed: {exc}")
            self._failed(key, what, exc, now, f"writing the disruption budgets of RayCluster "
                         f"{key[0]}/{key[1]} ({what})")
            return
        self._succeeded(key, f"writing the disruption budgets of RayCluster {key[0]}/{key[1]} "
                        f"({what})")

    def _failed(self, key: ClusterKey, state: str, exc: Exception, now: float,
                subject: str) -> None:
        self._written["failed"].inc()
        failure = self._failures.get(key)
        attempts = 1 if failure is None else failure.attempts + 1
        delay = min(self.backoff_initial * 2.0 ** min(attempts - 1, 64), self.backoff_maximum)
        logged = f"{state}: {exc}"
        if failure is None or failure.logged != logged:
            log.warning("%s failed: %s; trying again in %gs, then less often",
                        subject, exc, delay, extra=self._fields(key))
        else:
            log.debug("%s failed again: %s; next try in %gs", subject, exc, delay,
                      extra=self._fields(key))
        self._failures[key] = _Failure(attempts, now + delay, logged)

    def _succeeded(self, key: ClusterKey, subject: str) -> None:
        if self._failures.pop(key, None) is not None:
            log.info("%s: done now", subject, extra=self._fields(key))

    def _tell(self, cluster: RayClusterView, reason: Reason, note: str,
              budget: Regarding | None = None) -> None:
        if self.events is not None:
            self.events.record(Regarding.of_raycluster(cluster), reason, note, related=budget)

    @staticmethod
    def _fields(key: ClusterKey) -> dict[str, str]:
        return about(namespace=key[0], raycluster=key[1])
