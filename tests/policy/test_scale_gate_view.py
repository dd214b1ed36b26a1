"""``raygate.policy.admission.gates.group_scale_gates``: what the admission status shows of
a worker group's scale gates. raygate's wanted gates with their reason and since (the
earliest of the pods behind each), marked present when on the RayCluster; then the
RayCluster's other entries: raygate's no longer wanted, and other writers'."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from raygate.policy.admission import PodAction, PodState, ScaleGate, ScaleUp
from raygate.policy.admission.gates import FOREIGN, STALE, group_scale_gates
from raygate.policy.admission.groups import GroupStatus
from raygate.policy.admission.pods import PodStatus
from raygate.policy.admission.states import Advice


def pod(state: PodState, since: int | None, rule: str = "", name: str = "p") -> PodStatus:
    return PodStatus(name, "uid-" + name, "g", "", state, "no NodePool fits", since,
                     Advice(PodAction.KEEP, ""), rule)


def group(name: str = "g", *, pending: int = 1, preempted: int = 0) -> GroupStatus:
    return GroupStatus(name, 0, 1, 0, 0, pending, preempted, Advice(ScaleUp.HOLD, ""))


NO_NODE = "raygate.io/no-node-coming"
THRASH = "raygate.io/thrash-guard"
KUEUE = "kueue.k8s.io/quota-exceeded"
TWO_NO_NODE = (pod(PodState.NO_NODE_COMING, 200, name="b"),
               pod(PodState.NO_NODE_COMING, 100, name="a"))


@dataclass(frozen=True)
class Case:
    id: str
    pods: tuple[PodStatus, ...]
    entries: tuple[Mapping[str, str], ...]
    shown: list[tuple[str, str, str, int | None, bool, bool]]
    """(name, writer, reason, since, wanted, present) of each, in order."""
    status: GroupStatus = field(default_factory=group)
    writing: bool = True


CASES = [
    Case("wanted, not written yet: since is the earliest pod's", TWO_NO_NODE, (),
         [(NO_NODE, "raygate", "pod b: no NodePool fits", 100, True, False)]),
    Case("wanted and on the RayCluster (keyed by type)", TWO_NO_NODE, ({"type": NO_NODE},),
         [(NO_NODE, "raygate", "pod b: no NodePool fits", 100, True, True)]),
    Case("entries keyed by name (earlier revisions of the field)", TWO_NO_NODE,
         ({"name": NO_NODE},),
         [(NO_NODE, "raygate", "pod b: no NodePool fits", 100, True, True)]),
    Case("a pod whose since is unknown: the others' earliest",
         (pod(PodState.NO_NODE_COMING, None, name="a"),
          pod(PodState.NO_NODE_COMING, 300, name="b")), (),
         [(NO_NODE, "raygate", "pod a: no NodePool fits", 300, True, False)]),
    Case("none known: since is null", (pod(PodState.NO_NODE_COMING, None),), (),
         [(NO_NODE, "raygate", "pod p: no NodePool fits", None, True, False)]),
    Case("the thrash guard: the earliest of the preempted and pending pods",
         (pod(PodState.PREEMPTED, 50, name="old"),
          pod(PodState.WAITING_FOR_CAPACITY, 80, name="new")), (),
         [(THRASH, "raygate",
           "1 pod(s) preempted inside the thrash-guard window and 1 pending", 50, True,
           False)], group(preempted=1)),
    Case("raygate's gate no reason holds for any more: shown as being removed", (),
         ({"type": NO_NODE},), [(NO_NODE, "raygate", STALE, None, False, True)]),
    Case("another writer's gate, after raygate's wanted ones", TWO_NO_NODE,
         ({"type": KUEUE}, {"type": NO_NODE}),
         [(NO_NODE, "raygate", "pod b: no NodePool fits", 100, True, True),
          (KUEUE, "other", FOREIGN, None, False, True)]),
    Case("policy.scaleGates off: raygate wants none, and its own show as being removed",
         TWO_NO_NODE, ({"type": NO_NODE}, {"type": KUEUE}),
         [(NO_NODE, "raygate", STALE, None, False, True),
          (KUEUE, "other", FOREIGN, None, False, True)], writing=False),
    Case("the head group wants none, shows what is there",
         TWO_NO_NODE, ({"type": KUEUE},), [(KUEUE, "other", FOREIGN, None, False, True)],
         group("headgroup")),
    Case("an entry without its key is no gate", (), ({"other": "x"},), []),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_groups_scale_gates(case: Case) -> None:
    shown = group_scale_gates(case.status, case.pods, case.entries, writing=case.writing)
    assert all(isinstance(g, ScaleGate) for g in shown)
    assert [(g.name, g.writer, g.reason, g.since, g.wanted, g.present)
            for g in shown] == case.shown
