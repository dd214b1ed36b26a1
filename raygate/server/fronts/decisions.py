"""One placement decision per pod per request, counted and logged the same way by every
protocol front (kube-scheduler's and Volcano's verbs), and the memo that lets
kube-scheduler's prioritize reuse what filter decided for the same pod."""

from __future__ import annotations

import logging

from raygate.policy.model import PodView
from raygate.policy.placement import Decision, decide
from raygate.process.logs import about
from raygate.server.cache.memo import Memo
from raygate.server.cache.snapshot import Snapshot
from raygate.server.metrics.registry import VerbMetrics

__all__ = ["DecisionMemo", "count_decision", "decide_counted"]


def decide_counted(pod: PodView, snap: Snapshot, now: float, *, verb: str,
                   metrics: VerbMetrics, log: logging.Logger) -> Decision:
    """The placement decision for ``pod``, counted in ``metrics`` and logged on the
    front's ``log`` at debug level (``verb pod: placement (rule): reason``)."""
    decision = decide(pod, snap, snap.config, now)
    count_decision(decision, pod, verb=verb, metrics=metrics, log=log)
    return decision


def count_decision(decision: Decision, pod: PodView, *, verb: str, metrics: VerbMetrics,
                   log: logging.Logger) -> None:
    """Count and log ``decision`` as ``decide_counted`` does: a reused decision is still one
    decision of its request."""
    metrics.count(decision)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s %s: %s (%s): %s", verb, pod.ref, decision.placement.value,
                  decision.rule.value, decision.reason,
                  extra=about(namespace=pod.namespace, pod=pod.name,
                              raycluster=pod.ray_cluster, verb=metrics.verb))


class DecisionMemo:
    """The decisions of the last ``limit`` pods, each for the snapshot it was made on.

    kube-scheduler sends a pod to filter, then the same pod to prioritize in the same
    cycle (and again on a retry): when the cache has published nothing in between, the
    second request reuses the first one's decision instead of deciding again.

    The key is what determines the decision. The pod is the view ``RequestPods`` found by
    the Pod's exact JSON text, compared by identity (the entry holds the view, so its id
    cannot be reused): a Pod whose text changed in any byte is a new view and a miss. The
    snapshot is its serial, unique in the process and new on every publish, policy
    changes included (the config is the snapshot's); only the number is kept, so the memo
    never holds an old snapshot alive. A decision that read the clock (a thrash guard) is
    never kept.

    Not locked: like ``RequestPods`` it is used only on the server's event loop, where
    every scheduler request is answered, one at a time.
    """

    def __init__(self, limit: int = 16) -> None:
        self._entries: Memo[int, tuple[PodView, int, Decision]] = Memo(limit)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def limit(self) -> int:
        return self._entries.limit

    def get(self, pod: PodView, snap: Snapshot) -> Decision | None:
        """The decision kept for ``pod`` on ``snap``, or None."""
        entry = self._entries.get(id(pod))
        if entry is None or entry[0] is not pod or entry[1] != snap.serial:
            return None
        return entry[2]

    def put(self, pod: PodView, snap: Snapshot, decision: Decision) -> None:
        """Keep ``decision`` for ``pod`` on ``snap`` (replacing the pod's earlier one); the
        oldest entry goes when full."""
        if not decision.clock_dependent:
            self._entries.put(id(pod), (pod, snap.serial, decision))
