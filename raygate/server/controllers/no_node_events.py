"""``NoNodeComing`` Events: a warning on each pending Ray pod its node autoscaler will
bring no node for (Karpenter: no NodePool fits; Cluster Autoscaler: no scale-up), or
counts on a node raygate refuses it — the evidence of the pod's ``NoNodeComing`` state in
the admission status (``policy.admission.no_node_coming``), where ``kubectl describe pod``
shows it beside the node autoscaler's own words.

After a publish (one look per ``delay_seconds`` however many came), on the server's loop,
while this replica leads: the pods of the RayClusters the publish touched
(``ClusterCache.changes_between``) are judged. A pod is told once per verdict, again only
when what the node autoscaler says of it changes; the recorder folds what repeats.
"""

from __future__ import annotations

from collections.abc import Callable

from raygate.policy.admission import no_node_coming
from raygate.server.cache.cluster import ClusterCache
from raygate.server.controllers.events import EventRecorder, Reason, Regarding
from raygate.server.controllers.follow import OnLoop

__all__ = ["NoNodeComingEvents"]


class NoNodeComingEvents(OnLoop):
    def __init__(self, cache: ClusterCache, clock: Callable[[], float],
                 events: EventRecorder, *, leading: Callable[[], bool] = lambda: True,
                 delay_seconds: float = 1.0) -> None:
        super().__init__(cache, delay_seconds=delay_seconds)
        self.clock = clock
        self.events = events
        self.leading = leading
        self._told: dict[str, str] = {}
        """Pod UID -> what it was told (the node autoscaler's verdict)."""

    def check(self) -> int:
        """Tell the pods whose node autoscaler newly says no node comes; returns how many."""
        if not self.cache.ready:
            return 0
        if not self.leading():
            self._told.clear()
            self.look_again()  # a new term starts from a full look
            return 0
        snap = self.cache.snapshot
        changes = self.changes(snap)
        keys = snap.pod_clusters() if changes is None else changes.clusters
        now = self.clock()
        told = 0
        for key in keys:
            for pod in snap.cluster_pods(*key):
                signal = no_node_coming(pod, snap, snap.config, now)
                if signal is None:
                    self._told.pop(pod.uid, None)
                elif self._told.get(pod.uid) != signal.reason:
                    self._told[pod.uid] = signal.reason
                    self.events.record(Regarding.of_pod(pod), Reason.NO_NODE_COMING,
                                       signal.reason)
                    told += 1
        for uid in [u for u in self._told if snap.pod(u) is None]:
            del self._told[uid]
        return told
