"""``ExplainService``: the placement decision for one pod, from the cache's current
snapshot (``raygate.policy.explain``), as the explain API's reply."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from raygate.contract.errors import NotFound
from raygate.contract.explain import ExplainReply
from raygate.contract.messages import from_attributes
from raygate.policy.explain import Explanation, explain
from raygate.policy.model import PodView
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Snapshot

__all__ = ["ExplainService", "explain_pod", "find_pod", "to_wire"]


def to_wire(explanation: Explanation) -> ExplainReply:
    """The policy's explanation as the API's reply, by field name."""
    return from_attributes(explanation, ExplainReply)


def find_pod(snap: Snapshot, namespace: str, name: str) -> PodView | None:
    for pod in snap.objects.pods:
        if pod.namespace == namespace and pod.name == name:
            return pod
    return None


def explain_pod(snap: Snapshot, pod: PodView, now: float,
                node_names: Sequence[str] | None = None) -> ExplainReply:
    """Over ``node_names``, or every node raygate knows."""
    names = list(node_names) if node_names is not None else [n.name for n in snap.objects.nodes]
    return to_wire(explain(pod, snap, snap.config, now, names))


class ExplainService:
    def __init__(self, cache: ClusterCache, clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.clock = clock

    def explain(self, namespace: str, name: str,
                node_names: Sequence[str] | None = None) -> ExplainReply:
        """The pod ``namespace/name`` of the cache, over ``node_names`` (None or empty:
        every node)."""
        snap = self.cache.snapshot
        pod = find_pod(snap, namespace, name)
        if pod is None:
            synced = "" if self.cache.ready else " (its cache has not synced yet)"
            raise NotFound(f"raygate does not know pod {namespace}/{name}{synced}")
        return explain_pod(snap, pod, self.clock(), node_names or None)

    def explain_view(self, pod: PodView, node_names: Sequence[str] | None) -> ExplainReply:
        """A pod given whole (the cache may not hold it), over ``node_names`` (None:
        every node; empty: none)."""
        return explain_pod(self.cache.snapshot, pod, self.clock(), node_names)
