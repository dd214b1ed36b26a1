"""The thrash guard's preemption records as an edit changes them: pruned once their
window is over and their pods gone, corrected once their node is known."""

from __future__ import annotations

from collections.abc import Callable, Container

from raygate.policy.model import GroupKey, PreemptionRecord
from raygate.server.cache.maps import _Flat

Records = _Flat[GroupKey, tuple[PreemptionRecord, ...]]


def forget_before(preemptions: Records, pods: Container[str], cutoff: float) -> int:
    """Drop records older than ``cutoff`` (seconds since the epoch) whose pods are gone;
    returns how many. Records are few (recent preemptions only), so this scans them all."""
    dropped = 0
    changes: list[tuple[GroupKey, tuple[PreemptionRecord, ...]]] = []
    for key, records in preemptions.finish().items():
        kept = tuple(r for r in records if r.at >= cutoff or r.pod_uid in pods)
        if len(kept) != len(records):
            dropped += len(records) - len(kept)
            changes.append((key, kept))
    for key, kept in changes:
        if kept:
            preemptions.set(key, kept)
        else:
            preemptions.pop(key)
    return dropped


def fix_on(preemptions: Records, node_names: list[str], is_gpu: Callable[[str], bool]) -> None:
    """Records made before their node was known say "not a GPU node": correct them now
    that it is (a pod can be listed before its node)."""
    names = set(node_names)
    changes = []
    for key, records in preemptions.finish().items():
        fixed = tuple(
            PreemptionRecord(r.group, r.pod_uid, r.node_name, is_gpu(r.node_name), r.at)
            if r.node_name in names and not r.on_gpu_node else r
            for r in records)
        if fixed != records:
            changes.append((key, fixed))
    for key, fixed in changes:
        preemptions.set(key, fixed)
