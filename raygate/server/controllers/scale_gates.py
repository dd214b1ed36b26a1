"""raygate's scale gates in KubeRay's ``workerGroupSpecs[].scaleStrategy.scaleGate``
(kuberay#5094), kept in step with the admission status (docs/scale-gates.md).

The rule is ``raygate.policy.scale_gates``; this module writes what it says. After each
publish of the cache (a burst makes one check), while this replica leads, the RayClusters
the publish touched are derived anew (``admission_status``) and the gates each worker group
should carry compared with raygate's entries in the group as the cache shows them: equal
costs no API call. Otherwise the RayCluster is read, and a JSON Patch of raygate's own
entries (``scale_gate_patch``, field manager ``raygate``) adds the missing and removes the
stale; another writer's entries (Kueue's, anyone's) are never touched. A patch whose tests
fail (the RayCluster changed between the read and the write: 409, 422) is read and tried
again at once, a few times; then, as every other failure (403: no ``patch`` on rayclusters;
the API server down), it is counted, logged once and tried again with the one backoff.
A RayCluster deleted meanwhile (404) is forgotten.

Kept, not just written: an entry that someone else removes (Ray 2.60's scale-down patch of
the worker groups, KubeRay 1.6.1's Update that adds the GCS fault-tolerance finalizer) or
adds under raygate's prefix shows in the cache and is corrected. A new leader starts from
a look at every RayCluster, so what changed while raygate was down is corrected in its
first term. A status that changes with time alone (the thrash-guard window ends) is looked
at again when it may.

The entry's key is the one the served RayCluster CRD names (``x-kubernetes-list-map-keys``
of the field, read from the API server's OpenAPI v3 document, again every
``schema_seconds``). Where it has no such field, nothing is written and one line says so.
``policy.scaleGates: false`` removes raygate's gates and writes none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from raygate.contract.scale_gate import PREFIX, is_raygates
from raygate.policy.admission import admission_status
from raygate.policy.model import RayClusterView
from raygate.policy.scale_gates import cluster_gates
from raygate.process.logs import about
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Changes, Snapshot
from raygate.server.controllers.reconcile import (
    ClusterKey,
    Reconciler,
    Result,
    Retries,
    cluster_keys,
)
from raygate.server.controllers.scale_gate_patch import gate_key, gate_ops
from raygate.server.kube.guarded_patch import Ops, patch_guarded
from raygate.server.kube.transport import BackoffPolicy, NotServed
from raygate.server.metrics.registry import Metrics

__all__ = ["ScaleGateApi", "ScaleGates"]

log = logging.getLogger("raygate.scale_gates")

Gates = dict[str, frozenset[str]]
"""Worker group -> raygate's gates on it."""
_SCHEMA: ClusterKey = ("", "")
"""The key of the schema read's failure record."""
_UNREAD = "?"


class ScaleGateApi(Protocol):
    """What the writer asks of the API server (``raygate.server.kube.client.KubeTransport``)."""

    def raycluster_openapi(self) -> dict[str, Any]: ...
    def raycluster_json(self, namespace: str, name: str) -> dict[str, Any]: ...
    def patch_raycluster(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None: ...


def _on_cluster(view: RayClusterView, key: str) -> Gates:
    return {g.name: frozenset(e[key] for e in g.scale_gates
                              if is_raygates(e.get(key, "")))
            for g in view.worker_groups}


class ScaleGates(Reconciler[ClusterKey]):
    def __init__(self, cache: ClusterCache, api: ScaleGateApi, metrics: Metrics,
                 clock: Callable[[], float], *, leading: Callable[[], bool] = lambda: True,
                 delay_seconds: float = 0.5, backoff_initial: float = 1.0,
                 backoff_maximum: float = 300.0, schema_seconds: float = 600.0) -> None:
        backoff = BackoffPolicy(initial=backoff_initial, maximum=backoff_maximum, jitter=0.0)
        super().__init__(cache, clock, log, backoff, name="raygate-scale-gates",
                         doing="checking the scale gates", delay_seconds=delay_seconds,
                         after_bug_seconds=backoff_maximum, leading=leading)
        self.api = api
        self.schema_seconds = schema_seconds
        self._outcomes = {o: metrics.scale_gate_writes.labels(o)
                          for o in ("written", "conflict", "failed", "gone")}
        self._key: str | None = _UNREAD
        """The entry's key in the served schema; None: no such field; _UNREAD."""
        self._schema_at = 0.0
        self._schema: Retries[ClusterKey] = Retries(backoff)
        self._gates: dict[ClusterKey, Gates] = {}
        """Per RayCluster, raygate's gates on it as last read or written."""
        self._counts: Mapping[str, int] = {}
        metrics.watch_scale_gates(lambda: self._counts)

    def look_again(self) -> None:
        """Every RayCluster, nothing taken as written (a new leader rewrites)."""
        super().look_again()
        self._gates.clear()
        self._count()

    def check(self) -> None:
        super().check()
        self._count()  # once a check, not once a key

    def idle_seconds(self) -> float | None:
        """The runtime's, or sooner the schema read's retry."""
        idle, schema = super().idle_seconds(), self._schema.next_due()
        if schema is None or not self.cache.ready:
            return idle
        wait = max(schema - self.clock(), 0.0)
        return wait if idle is None else min(idle, wait)

    # --- the check ----------------------------------------------------------------------
    def prepare(self, now: float) -> bool:
        """The schema's key, read again every ``schema_seconds``; False: nothing to write."""
        if now >= self._schema_at and not self._schema.waiting(_SCHEMA, now):
            self._read_schema(now)
        return self._key not in (None, _UNREAD)

    def _read_schema(self, now: float) -> None:
        subject = "reading the RayCluster schema (OpenAPI v3 of ray.io/v1)"
        try:
            key = gate_key(self.api.raycluster_openapi())
        except NotServed:
            key = None  # no ray.io/v1 at all
        except Exception as exc:
            self.failed(self._schema, _SCHEMA, subject, exc, now)
            return
        self.succeeded(self._schema, _SCHEMA, subject)
        self._schema_at = now + self.schema_seconds
        if key == self._key:
            return
        if key is None:
            log.info("the served RayCluster CRD has no workerGroupSpecs[].scaleStrategy."
                     "scaleGate keyed by one field: raygate writes no scale gates")
        else:
            log.info("scale gates: the served RayCluster CRD keys scaleGate entries by %r",
                     key)
        self._key = key
        self.look_again()

    def keys(self, snap: Snapshot, changes: Changes | None) -> set[ClusterKey]:
        return cluster_keys(snap, changes, self._gates.keys())

    def reconcile(self, key: ClusterKey, snap: Snapshot, now: float) -> Result:
        view = snap.raycluster(*key)
        if view is None:
            self._forget(key)
            return Result.GONE
        field = self._key
        assert field is not None and field != _UNREAD
        want, reasons = self._wanted(view, snap, now)
        have = _on_cluster(view, field)
        if all(have.get(g, frozenset()) == gates for g, gates in want.items()):
            self._remember(key, want)
            return Result.DONE
        try:
            written = self._write(key, field, want)
        except Exception:
            self._outcomes["failed"].inc()
            raise
        if written is None:
            self._forget(key)
            self._outcomes["gone"].inc()
            return Result.GONE
        if written:
            self._said(key, have, want, reasons)
        self._remember(key, want)
        return Result.DONE

    def _wanted(self, view: RayClusterView, snap: Snapshot, now: float
                ) -> tuple[Gates, dict[str, dict[str, str]]]:
        if not snap.config.scale_gates:
            return {g.name: frozenset() for g in view.worker_groups}, {}
        derived = admission_status(view, snap, snap.config, now)
        if derived.next_change is not None:  # the status changes with time alone
            self.requeue((view.namespace, view.name), derived.next_change)
        reasons = dict(cluster_gates(derived.status))
        return {g: frozenset(gates) for g, gates in reasons.items()}, reasons

    def _write(self, key: ClusterKey, field: str, want: Gates) -> list[dict[str, Any]] | None:
        """Bring the RayCluster's entries to ``want``: the patch made ([]: none was needed,
        the cache was behind); None: the RayCluster is gone."""
        def send(ops: Ops) -> None:
            self.api.patch_raycluster(key[0], key[1], ops)
            self._outcomes["written"].inc()

        return patch_guarded(lambda: self.api.raycluster_json(*key),
                             lambda cluster: gate_ops(cluster, field, want), send,
                             on_conflict=self._outcomes["conflict"].inc)

    def _said(self, key: ClusterKey, have: Gates, want: Gates,
              reasons: Mapping[str, Mapping[str, str]]) -> None:
        for group, gates in sorted(want.items()):
            before = have.get(group, frozenset())
            for gate in sorted(gates - before):
                log.info("scale gate %s added to worker group %s: %s", gate, group,
                         reasons.get(group, {}).get(gate, ""),
                         extra=about(namespace=key[0], raycluster=key[1]))
            for gate in sorted(before - gates):
                log.info("scale gate %s removed from worker group %s", gate, group,
                         extra=about(namespace=key[0], raycluster=key[1]))

    def _remember(self, key: ClusterKey, gates: Gates) -> None:
        self._gates[key] = gates

    def _forget(self, key: ClusterKey) -> None:
        self._gates.pop(key, None)

    def _count(self) -> None:
        counts: dict[str, int] = {}
        for groups in self._gates.values():
            for gates in groups.values():
                for gate in gates:
                    reason = gate.removeprefix(PREFIX)
                    counts[reason] = counts.get(reason, 0) + 1
        self._counts = counts  # replaced whole: a scrape reads it from another thread

    def subject(self, key: ClusterKey, snap: Snapshot) -> str:
        return f"writing the scale gates of RayCluster {key[0]}/{key[1]}"

    def fields(self, key: ClusterKey) -> dict[str, str]:
        return about(namespace=key[0], raycluster=key[1])
