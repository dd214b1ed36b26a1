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
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from raygate.policy.budgets import LABEL_MANAGED_BY, MANAGED_BY, Budget, desired_budgets
from raygate.policy.model import RayClusterView
from raygate.process.logs import about
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Changes, Snapshot
from raygate.server.controllers.events import (
    RAYCLUSTER_API_VERSION,
    EventRecorder,
    Reason,
    Regarding,
)
from raygate.server.controllers.reconcile import (
    ClusterKey,
    Reconciler,
    Result,
    Retries,
    cluster_keys,
)
from raygate.server.kube.transport import BackoffPolicy
from raygate.server.metrics.registry import Metrics

__all__ = ["BudgetApi", "FloorBudgets", "manifest"]

log = logging.getLogger("raygate.budgets")

SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"



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


_LIST: ClusterKey = ("", "")
"""The key of the startup list's failure record (``_listing``)."""


class FloorBudgets(Reconciler[ClusterKey]):
    def __init__(self, cache: ClusterCache, api: BudgetApi, metrics: Metrics,
                 clock: Callable[[], float], *, delay_seconds: float = 0.2,
                 backoff_initial: float = 1.0, backoff_maximum: float = 300.0,
                 resync_seconds: float = 600.0, events: EventRecorder | None = None) -> None:
        backoff = BackoffPolicy(initial=backoff_initial, maximum=backoff_maximum, jitter=0.0)
        super().__init__(cache, clock, log, backoff, name="raygate-budgets",
                         doing="checking the disruption budgets",
                         delay_seconds=delay_seconds, after_bug_seconds=backoff_maximum)
        self.api = api
        self.resync_seconds = resync_seconds
        self.events = events
        # Lock-free cells (metrics.registry): this thread is the only one that writes them.
        self._written = {result: metrics.disruption_budget_writes.labels(result)
                         for result in ("applied", "deleted", "failed")}
        self._memo: dict[ClusterKey, dict[str, Budget | None]] | None = None
        """Per cluster, the budgets raygate knows are there: what it applied, or None for
        one listed (content unknown: applied again). None: not listed yet."""
        self._listing: Retries[ClusterKey] = Retries(backoff)
        self._resync_at = 0.0

    def look_again(self) -> None:
        """Every cluster, and the budgets listed anew (a resync)."""
        super().look_again()
        self._memo = None

    def idle_seconds(self) -> float | None:
        """Until the next retry or resync is due; None: until woken (the cache is not
        loaded yet, its first publish wakes the thread)."""
        if not self.cache.ready:
            return None
        now = self.clock()
        if self._memo is None:
            # Nothing is written before the list: only its own retry can be due (another
            # cluster's due retry would wake the thread to a check that lists nothing, at
            # once and again, for as long as the list keeps failing).
            listing = self._listing.next_due()
            return 0.0 if listing is None else max(listing - now, 0.0)
        retry = self.retries.next_due()
        due = self._resync_at if retry is None else min(retry, self._resync_at)
        return max(due - now, 0.0)

    # --- the check ----------------------------------------------------------------------
    def prepare(self, now: float) -> bool:
        """A resync when due; the list of the budgets raygate wrote, once per resync."""
        if now >= self._resync_at:
            self.look_again()
            self._resync_at = now + self.resync_seconds
        return self._memo is not None or self._seed(now)

    def keys(self, snap: Snapshot, changes: Changes | None) -> set[ClusterKey]:
        assert self._memo is not None
        return cluster_keys(snap, changes, self._memo.keys())

    def _seed(self, now: float) -> bool:
        if self._listing.waiting(_LIST, now):
            return False
        subject = "listing raygate's disruption budgets"
        try:
            listed = self.api.list_budgets(SELECTOR)
        except Exception as exc:
            self._written["failed"].inc()
            self.failed(self._listing, _LIST, subject, exc, now)
            return False
        self.succeeded(self._listing, _LIST, subject)
        memo: dict[ClusterKey, dict[str, Budget | None]] = {}
        for namespace, name, cluster in listed:
            memo.setdefault((namespace, cluster), {})[name] = None
        self._memo = memo
        return True

    def reconcile(self, key: ClusterKey, snap: Snapshot, now: float) -> Result:
        assert self._memo is not None
        view = snap.raycluster(*key)
        if view is None:
            # Deleted: its budgets go with it (ownerReferences, the garbage collector).
            self._memo.pop(key, None)
            return Result.GONE
        if not view.uid:
            return Result.DONE  # no owner to give a budget, and no reason to take one away
        desired = {b.name: b for b in desired_budgets(view)}
        memo = self._memo.setdefault(key, {})
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
            self._written["failed"].inc()
            self._tell(view, Reason.FLOOR_BUDGET_FAILED, f"Writing its floor's "
                       f"PodDisruptionBudgets ({_listed(desired.values())}) failed: {exc}")
            raise
        return Result.DONE

    def subject(self, key: ClusterKey, snap: Snapshot) -> str:
        view = snap.raycluster(*key)
        what = _listed(() if view is None else desired_budgets(view))
        return f"writing the disruption budgets of RayCluster {key[0]}/{key[1]} ({what})"

    def fields(self, key: ClusterKey) -> dict[str, str]:
        return about(namespace=key[0], raycluster=key[1])

    def _tell(self, cluster: RayClusterView, reason: Reason, note: str,
              budget: Regarding | None = None) -> None:
        if self.events is not None:
            self.events.record(Regarding.of_raycluster(cluster), reason, note, related=budget)


def _listed(budgets: Iterable[Budget]) -> str:
    return ", ".join(f"{b.name} minAvailable {b.min_available}" for b in budgets) or "none"
