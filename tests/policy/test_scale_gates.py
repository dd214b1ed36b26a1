"""``raygate.policy.admission.gates`` and ``raygate.policy.scale_gates``: the gates a worker
group's status gives, one per reason; never for a wait another controller decides (Kueue's
quota, a gang's admission)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import pytest

from raygate.policy.admission import PodAction, PodState, ScaleUp
from raygate.policy.admission.gates import group_scale_gates
from raygate.policy.admission.groups import GroupStatus
from raygate.policy.admission.pods import PodStatus
from raygate.policy.admission.states import Advice
from raygate.policy.admission.status import AdmissionStatus
from raygate.policy.scale_gates import cluster_gates

GPU_REFUSED = ("no node has room: Insufficient cpu (the scheduler says: 0/3 nodes are "
               "available: 1 raygate: surplus-prefers-cpu: GPU node refused to a CPU-only "
               "floor worker; 2 Insufficient cpu.)")
THRASH = GPU_REFUSED.replace("surplus-prefers-cpu", "thrash-guard")
ROOM = ("only GPU nodes have room for it (gpu-1 has; no other node it may use has), and "
        "raygate's rule floor-avoids-gpu keeps it off them")


def pod(state: PodState, rule: str = "", reason: str = "", name: str = "p", *,
        gpu_room: str = "") -> PodStatus:
    return PodStatus(name, "uid-" + name, "g", "", state, reason, None,
                     Advice(PodAction.KEEP, ""), rule, gpu_room)


def group(name: str = "g", *, pending: int = 1, preempted: int = 0) -> GroupStatus:
    return GroupStatus(name, 0, 1, 0, 0, pending, preempted, Advice(ScaleUp.HOLD, ""))


PENDING = group()


@dataclass(frozen=True)
class Case:
    id: str
    pods: tuple[PodStatus, ...]
    gates: set[str]
    status: GroupStatus = PENDING


CASES = [
    Case("the node autoscaler says no node comes",
         (pod(PodState.NO_NODE_COMING, "no-node-coming", "no NodePool fits"),),
         {"raygate.io/no-node-coming"}),
    # Whether only GPU nodes have room is decided with the nodes (tests/policy/
    # test_gpu_room.py); the rule reads the pod status' word on it, not the message.
    Case("only GPU nodes have room, and raygate keeps them",
         (pod(PodState.WAITING_FOR_CAPACITY, "insufficient-resources", GPU_REFUSED,
              gpu_room=ROOM),), {"raygate.io/only-gpu-room"}),
    Case("the extender's refusal alone is no GPU room",
         (pod(PodState.WAITING_FOR_CAPACITY, "insufficient-resources", GPU_REFUSED),),
         set()),
    Case("the thrash guard's refusal is the thrash guard's gate",
         (pod(PodState.WAITING_FOR_CAPACITY, "insufficient-resources", THRASH),),
         {"raygate.io/thrash-guard"}, group(preempted=1)),
    Case("preempted inside the window with pods pending",
         (pod(PodState.WAITING_FOR_CAPACITY, "insufficient-resources"),),
         {"raygate.io/thrash-guard"}, group(preempted=2)),
    Case("preempted inside the window, nothing pending: nothing to move",
         (), set(), group(pending=0, preempted=1)),
    Case("an all-or-nothing scale-up that cannot fit",
         (pod(PodState.WAITING_FOR_CAPACITY, "scale-up-held", "held: 3 of 4 fit"),),
         {"raygate.io/scale-up-cannot-fit"}),
    Case("one gate per reason",
         (pod(PodState.NO_NODE_COMING, "no-node-coming", name="a"),
          pod(PodState.WAITING_FOR_CAPACITY, "scale-up-held", name="b")),
         {"raygate.io/no-node-coming", "raygate.io/scale-up-cannot-fit",
          "raygate.io/thrash-guard"}, group(pending=2, preempted=1)),
    # Waits another controller decides: Kueue writes its own gates for its quota.
    Case("Kueue's elastic slice not admitted",
         (pod(PodState.WAITING_FOR_GANG_ADMISSION, "kueue-slice-gated"),), set()),
    Case("a gang not admitted", (pod(PodState.WAITING_FOR_GANG_ADMISSION,
                                     "gang-not-admitted"),), set()),
    Case("waiting for capacity, nothing more said", (pod(
        PodState.WAITING_FOR_CAPACITY, "insufficient-resources", "Insufficient cpu"),), set()),
    Case("starting", (pod(PodState.STARTING, "bound-starting"),), set()),
]


def group_gates(status: GroupStatus, pods: Iterable[PodStatus]) -> dict[str, str]:
    """The gates the group should carry, with their reasons, as the status shows them."""
    return {g.name: g.reason for g in group_scale_gates(status, pods, ()) if g.wanted}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_groups_gates(case: Case) -> None:
    assert set(group_gates(case.status, case.pods)) == case.gates


def test_each_gate_says_why() -> None:
    gates = group_gates(group(), [pod(PodState.NO_NODE_COMING, "no-node-coming",
                                      "Karpenter: no NodePool fits", name="w1"),
                                  pod(PodState.WAITING_FOR_CAPACITY, "insufficient-resources",
                                      GPU_REFUSED, name="w2", gpu_room=ROOM)])
    assert gates == {"raygate.io/no-node-coming": "pod w1: Karpenter: no NodePool fits",
                     "raygate.io/only-gpu-room": f"pod w2: {ROOM}"}


def test_the_head_group_has_none_and_every_worker_group_is_said() -> None:
    stranded = pod(PodState.NO_NODE_COMING, "no-node-coming", name="h")
    pods = (PodStatus("w", "u", "a", "", PodState.NO_NODE_COMING, "", None,
                      Advice(PodAction.KEEP, ""), "no-node-coming"),)
    # Each group's gates as admission_status decides them, which cluster_gates reads.
    groups = tuple(replace(g, scale_gates=group_scale_gates(
        g, [p for p in pods if p.group == g.name], ()))
        for g in (group("headgroup"), group("a"), group("b")))
    status = AdmissionStatus("ray", "rc", None,  # type: ignore[arg-type] # unread here
                             groups, pods)
    assert group_gates(group("headgroup"), [stranded]) == {}
    assert {g: set(v) for g, v in cluster_gates(status).items()} == {
        "a": {"raygate.io/no-node-coming"}, "b": set()}
