"""What the node autoscalers said and brought, as the snapshot holds it: the pod Events
``raygate.policy.admission.autoscalers`` reads (by Event and by pod UID) and Karpenter's
NodeClaims; ``AutoscalerTables`` edits their indexes for ``SnapshotEditor``.

Memory follows the pending Ray pods, not the cluster's events: an event about a pod the
cache holds and that is not a Ray pod is not kept; ``forget`` drops the events of pods
that are bound, and of pods the cache does not hold once the event is ``ORPHAN_SECONDS``
old (its pod is gone, or not a Ray pod: an event can reach raygate before its pod does).
"""

from __future__ import annotations

from typing import cast

from raygate.policy.model import NodeClaimView, PodEventView, PodView
from raygate.server.cache.indexes import Editing
from raygate.server.cache.keys import EVENT, NODECLAIM, ClusterKey, ObjectKey
from raygate.server.cache.maps import Entry, _Flat

AUTOSCALER_KINDS = frozenset({EVENT, NODECLAIM})

ORPHAN_SECONDS = 60.0
"""How long an event about a pod the cache does not hold is kept for the pod to arrive."""

EventKey = tuple[str, str]


def latest(events: tuple[PodEventView, ...]) -> PodEventView | None:
    """The latest of one pod's events: by time, then by name (client-go names an event
    ``<object>.<creation time in hex nanoseconds>``)."""
    return max(events, key=lambda e: (e.at or 0.0, e.name), default=None)


class AutoscalerTables:
    """The events and NodeClaims of the snapshot being edited (one per editor), in the
    editor's ``indexes``. ``follows_claims``: whether the snapshot holds every NodeClaim
    (Karpenter's CRD is served), or none because it does not look."""

    def __init__(self, indexes: Editing, follows_claims: bool) -> None:
        self.events = indexes.events
        self.events_of = indexes.events_of
        self.claims = indexes.nodeclaims
        self.follows_claims = follows_claims

    def upsert(self, view: PodEventView | NodeClaimView, resource_version: str,
               pods: _Flat[str, Entry[PodView]]) -> None:
        if isinstance(view, NodeClaimView):
            self.claims.set(view.name, (resource_version, view))
            return
        key = (view.namespace, view.name)
        held = pods.get(view.pod_uid)
        if held is not None and not held[1].is_ray:
            self.delete(EVENT, key)  # not about a Ray pod: not kept
            return
        old = self.events.get(key)
        if old is not None and old[1].pod_uid != view.pod_uid:
            self.events_of.remove(old[1].pod_uid, key)
        self.events.set(key, (resource_version, view))
        self.events_of.add(view.pod_uid, key, view)

    def delete(self, kind: str, key: ObjectKey) -> bool:
        if kind == NODECLAIM:
            return self.claims.pop(cast(str, key)) is not None
        event_key = cast(EventKey, key)
        old = self.events.pop(event_key)
        if old is None:
            return False
        self.events_of.remove(old[1].pod_uid, event_key)
        return True

    def forget(self, pods: _Flat[str, Entry[PodView]], cutoff: float) -> int:
        """Drop the events of bound pods, and of pods not held seen before ``cutoff``
        (seconds since the epoch); returns how many."""
        stale = [key for key, (_, event) in self.events.finish().items()
                 if _stale(pods.get(event.pod_uid), event, cutoff)]
        for key in stale:
            self.delete(EVENT, key)
        return len(stale)

    def clusters(self, pods: _Flat[str, Entry[PodView]], nodes_changed: bool) -> set[ClusterKey]:
        """The RayClusters whose pods' node outlook this edit may have changed: those of
        pods whose events changed; of every pod with an event when a NodeClaim or the
        class of a node changed (a claim's node is read through both)."""
        uids: set[str] = set(self.events_of.touched)
        if self.claims.touched or nodes_changed:
            uids.update(self.events_of.outer.finish().keys())
        found: set[ClusterKey] = set()
        for uid in uids:
            held = pods.get(uid)
            if held is not None and held[1].is_ray:
                found.add((held[1].namespace, held[1].ray_cluster))
        return found


def _stale(held: Entry[PodView] | None, event: PodEventView, cutoff: float) -> bool:
    if held is None:
        return (event.at or 0.0) < cutoff
    return bool(held[1].node_name)
