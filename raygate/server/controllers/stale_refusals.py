"""Refusals that went stale: kube-scheduler is asked to try the pod again.

raygate decides on a snapshot that lags kube-scheduler by the time a watch event takes to
arrive. A pending worker of a group whose floor pod was bound a few milliseconds ago is
still counted toward the floor, and is refused GPU nodes. kube-scheduler tries a pod an
extender rejected again on any later cluster event (it records the fake plugin
``Extender`` among the pod's unschedulable plugins, with a wildcard event:
``schedule_one.go`` of kube-scheduler 1.37). When the bind that made the difference
reached kube-scheduler before raygate, no event may be left: the pod waits for
kube-scheduler's periodic flush (five minutes), with room on a GPU node.

``StaleRefusals`` remembers the pending pods filter refused GPU nodes to. After each
publish that touched their RayCluster, and every second while a decision depends on the
clock (a thrash guard), it decides each one again on the current snapshot. A pod whose
decision no longer refuses GPU nodes gets one patch of the ``raygate.io/reconsidered``
annotation: an update of the pod itself, which puts it back in kube-scheduler's queue. A
pod the snapshot shows bound, deleted or finished is forgotten, as is one the cache never
saw after ``ttl_seconds``, and the oldest entry when ``limit`` is reached.

Everything but the patch runs on the server's event loop, as filter does: the table needs
no lock. The patch is a blocking API call, made in a thread of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from raygate.policy.model import PodView
from raygate.policy.placement import Decision, Rule, decide
from raygate.process.logs import about
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.memo import Memo
from raygate.server.controllers.follow import OnLoop
from raygate.server.metrics.registry import Metrics

__all__ = ["ANNOTATION", "Annotate", "StaleRefusals"]

log = logging.getLogger("raygate.requeue")

ANNOTATION = "raygate.io/reconsidered"
"""Set to the time raygate found a pod's refusal stale (RFC 3339, microseconds)."""

Annotate = Callable[[str, str, str, Mapping[str, str]], None]
"""``(namespace, name, uid, annotations)``: set them on that pod, or raise."""


@dataclass(slots=True)
class _Refused:
    pod: PodView
    rule: Rule
    noted_at: float
    clock_dependent: bool


class StaleRefusals(OnLoop):
    def __init__(self, cache: ClusterCache, clock: Callable[[], float], annotate: Annotate,
                 metrics: Metrics, *, limit: int = 4096, delay_seconds: float = 0.05,
                 clock_seconds: float = 1.0, ttl_seconds: float = 600.0) -> None:
        super().__init__(cache, delay_seconds=delay_seconds, workers=2,
                         name="raygate-requeue")
        self.clock = clock
        self.annotate = annotate
        self.metrics = metrics
        self.clock_seconds = clock_seconds
        self.ttl_seconds = ttl_seconds
        self._refused: Memo[str, _Refused] = Memo(limit)
        self.changes(cache.snapshot)  # nothing refused yet: no change before now matters

    def __len__(self) -> int:
        return len(self._refused)

    @property
    def limit(self) -> int:
        """How many pods it remembers; the oldest noted goes first."""
        return self._refused.limit

    @limit.setter
    def limit(self, limit: int) -> None:
        self._refused.limit = limit

    # --- the hot path -------------------------------------------------------------------
    def note(self, pod: PodView, decision: Decision) -> None:
        """filter refused ``pod`` GPU nodes on ``decision`` (a dict write: on the hot path)."""
        if pod.uid in self._refused:
            return
        self._refused.put(pod.uid, _Refused(pod, decision.rule, self.clock(),
                                            decision.clock_dependent))
        if decision.clock_dependent:
            self.wake(self.clock_seconds)

    def wanted(self) -> bool:
        return bool(self._refused)

    # --- the check ----------------------------------------------------------------------
    def check(self) -> list[PodView]:
        """Decide every remembered pod whose RayCluster changed (or whose decision read the
        clock) again; patch those no longer refused. Returns them."""
        snap = self.cache.snapshot
        changes = self.changes(snap)
        now = self.clock()
        stale: list[PodView] = []
        for uid, entry in list(self._refused.items()):
            pod = snap.pod(uid)
            if pod is None:
                if now - entry.noted_at > self.ttl_seconds:
                    del self._refused[uid]
                    continue
                pod = entry.pod  # bound or gone, raygate does not know yet: keep it
            elif pod.node_name or pod.deleted is not None or pod.terminal:
                del self._refused[uid]
                continue
            if (changes is not None and not entry.clock_dependent
                    and (pod.namespace, pod.ray_cluster) not in changes.clusters):
                continue
            decision = decide(pod, snap, snap.config, now)
            if decision.refuses_gpu_nodes:
                entry.clock_dependent = decision.clock_dependent
                continue
            del self._refused[uid]
            stale.append(pod)
            self._nudge(pod, entry.rule, decision, now)
        if any(e.clock_dependent for e in self._refused.values()):
            self.wake(self.clock_seconds)
        return stale

    def _nudge(self, pod: PodView, rule: Rule, decision: Decision, now: float) -> None:
        fields = about(namespace=pod.namespace, pod=pod.name, raycluster=pod.ray_cluster,
                       verb="scheduler/filter")
        log.info("%s: refused GPU nodes by %s, now %s (%s): asking kube-scheduler to try "
                 "it again", pod.ref, rule.value, decision.rule.value, decision.reason,
                 extra=fields)
        patched = self.metrics.requeue_nudges.labels(rule.value, "patched")
        failed = self.metrics.requeue_nudges.labels(rule.value, "failed")

        def done(error: BaseException | None) -> None:  # on the loop
            if error is None:
                patched.inc()
                return
            failed.inc()
            log.warning("%s: could not ask kube-scheduler to try it again: %s", pod.ref,
                        error, extra=fields)

        self.write(self.annotate, pod.namespace, pod.name, pod.uid,
                   # To the microsecond: a second ask within a second must still change
                   # the pod (an unchanged pod makes no event).
                   {ANNOTATION: datetime.fromtimestamp(now, UTC).isoformat(
                       timespec="microseconds")}, done=done)
