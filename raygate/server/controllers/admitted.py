"""The pods raygate decided at admission that its watch has not brought yet.

raygate's webhook gives a group's floor places to the first pods created
(``plugin.native.admission_role``), counting the group's pods in the cache's snapshot. A
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
from dataclasses import dataclass

from raygate.plugin.model import ClusterView, GroupKey, Role
from raygate.plugin.native import ANNOTATION_ADMITTED

__all__ = ["HOLD_SECONDS", "AdmittedPods"]

HOLD_SECONDS = 5.0
"""How long an admitted pod holds its place unseen: the API server's write and the watch
take well under a second even in a 1,000-pod burst on two cores; a pod not seen in five
was most likely never created."""


@dataclass(frozen=True, slots=True)
class _Admitted:
    token: str
    role: Role
    at: float


class AdmittedPods:
    def __init__(self, hold_seconds: float = HOLD_SECONDS) -> None:
        self.hold_seconds = hold_seconds
        self._lock = threading.Lock()
        self._groups: dict[GroupKey, list[_Admitted]] = {}
        self._swept = 0.0

    def pending(self, key: GroupKey, view: ClusterView, now: float) -> list[Role]:
        """The roles of ``key``'s pods admitted that ``view`` does not show yet (and are
        not past their hold); forgets the others."""
        with self._lock:
            entries = self._groups.get(key)
            if not entries:
                return []
            seen = {p.annotations.get(ANNOTATION_ADMITTED) for p in view.group_pods(key)}
            kept = [e for e in entries
                    if e.token not in seen and now - e.at < self.hold_seconds]
            if kept:
                self._groups[key] = kept
            else:
                del self._groups[key]
            return [e.role for e in kept]

    def admit(self, key: GroupKey, token: str, role: Role, now: float) -> None:
        """``token``'s pod was admitted in ``key`` with ``role`` (once: again, nothing)."""
        with self._lock:
            entries = self._groups.setdefault(key, [])
            if all(e.token != token for e in entries):
                entries.append(_Admitted(token, role, now))
            if now - self._swept >= self.hold_seconds:  # groups no admission asks again
                self._swept = now
                for group in list(self._groups):
                    kept = [e for e in self._groups[group] if now - e.at < self.hold_seconds]
                    if kept:
                        self._groups[group] = kept
                    else:
                        del self._groups[group]

    def __len__(self) -> int:
        with self._lock:
            return sum(map(len, self._groups.values()))
