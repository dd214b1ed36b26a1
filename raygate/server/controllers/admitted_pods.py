"""The pods raygate decided at admission that its watch has not brought yet.

raygate's webhook gives a group's floor places to the first pods created
(``policy.native.admission_role``), counting the group's pods in the cache's snapshot. A
pod it has just admitted is not there yet: the API server writes it after the admission,
then the watch brings it, tens to hundreds of milliseconds later. ``AdmittedPods`` keeps
each such pod's role until the snapshot shows it (found by the ``raygate.io/admitted``
annotation the webhook wrote into it, the AdmissionReview's UID), so that a burst of a
group's creates is counted whole and each floor place is given once.

A pod admitted but never created (a later admission plugin refused it: a ResourceQuota, a
validating policy; the API server went down first) would hold its place for good: each
entry is kept at most ``HOLD_SECONDS``. Past that, an entry still unseen is let go, and
the count errs toward floor: a pod created that late, or seen that late, makes at most one
floor place too many, never one too few. While a refused pod's entry lasts, the place it
holds is the one a replacement would have taken: that replacement is created surplus.

The webhook's thread and the server's loop (a gated pod's release) both read it: a lock.
"""

from __future__ import annotations

import threading

from raygate.policy.cluster_view import ClusterView
from raygate.policy.model import GroupKey, Role
from raygate.policy.native import ANNOTATION_ADMITTED

__all__ = ["HOLD_SECONDS", "AdmittedPods"]

HOLD_SECONDS = 5.0
"""How long an admitted pod holds its place unseen: the API server's write and the watch
take well under a second even in a 1,000-pod burst on two cores; a pod not seen in five
was most likely never created."""


class _Group:
    """One group's admitted pods, oldest first, and the floor places they hold."""

    __slots__ = ("entries", "floor", "pruned")

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Role, float]] = {}
        """By token, in admission order (a dict keeps it): the oldest expire first."""
        self.floor = 0
        self.pruned: object = None
        """The view whose pods were last taken off: a view is looked at once."""

    def add(self, token: str, role: Role, now: float) -> None:
        if token not in self.entries:
            self.entries[token] = (role, now)
            self.floor += role is not Role.SURPLUS

    def forget(self, token: str) -> None:
        entry = self.entries.pop(token, None)
        if entry is not None:
            self.floor -= entry[0] is not Role.SURPLUS

    def expire(self, before: float) -> None:
        while self.entries:
            token, (_, at) = next(iter(self.entries.items()))
            if at > before:
                return
            self.forget(token)


class AdmittedPods:
    def __init__(self, hold_seconds: float = HOLD_SECONDS) -> None:
        self.hold_seconds = hold_seconds
        self._lock = threading.Lock()
        self._groups: dict[GroupKey, _Group] = {}
        self._swept = 0.0

    def held(self, key: GroupKey, view: ClusterView, now: float) -> int:
        """The floor places of ``key``'s pods admitted that ``view`` does not show yet (and
        not past their hold); forgets the others. O(1) but once per view and group, when
        the group's pods in it are looked at."""
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                return 0
            if group.pruned is not view:
                group.pruned = view
                for pod in view.group_pods(key):
                    token = pod.annotations.get(ANNOTATION_ADMITTED)
                    if token is not None:
                        group.forget(token)
            group.expire(now - self.hold_seconds)
            if not group.entries:
                del self._groups[key]
            return group.floor

    def admit(self, key: GroupKey, token: str, role: Role, now: float) -> None:
        """``token``'s pod was admitted in ``key`` with ``role`` (once: again, nothing)."""
        with self._lock:
            self._groups.setdefault(key, _Group()).add(token, role, now)
            if now - self._swept >= self.hold_seconds:  # groups no admission asks again
                self._swept = now
                for k, group in list(self._groups.items()):
                    group.expire(now - self.hold_seconds)
                    if not group.entries:
                        del self._groups[k]

    def __len__(self) -> int:
        with self._lock:
            return sum(len(g.entries) for g in self._groups.values())
