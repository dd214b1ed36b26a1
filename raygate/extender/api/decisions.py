"""One placement decision per pod per request, counted and logged the same way by every
protocol front (kube-scheduler's and Volcano's verbs)."""

from __future__ import annotations

import logging

from raygate.extender.logs import about
from raygate.extender.metrics.registry import VerbMetrics
from raygate.extender.state.snapshot import Snapshot
from raygate.plugin.model import PodView
from raygate.plugin.placement import Decision, decide

__all__ = ["decide_counted"]


def decide_counted(pod: PodView, snap: Snapshot, now: float, *, verb: str,
                   metrics: VerbMetrics, log: logging.Logger) -> Decision:
    """The placement decision for ``pod``, counted in ``metrics`` and logged on the
    front's ``log`` at debug level (``verb pod: placement (rule): reason``)."""
    decision = decide(pod, snap, snap.config, now)
    metrics.count(decision)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s %s: %s (%s): %s", verb, pod.ref, decision.placement.value,
                  decision.rule.value, decision.reason,
                  extra=about(namespace=pod.namespace, pod=pod.name,
                              raycluster=pod.ray_cluster, verb=metrics.verb))
    return decision
