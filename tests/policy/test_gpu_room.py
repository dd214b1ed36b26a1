"""``raygate.io/only-gpu-room`` (``raygate.policy.room``): a waiting CPU-only pod that
raygate's rule keeps off GPU nodes, where a GPU node it would take but for that rule has
room and no other node it may use has. Decided the same way under native placement (the
rule in the pod's node affinity, kube-scheduler saying "didn't match Pod's node
affinity/selector") and under the scheduler extender (raygate refusing GPU nodes at each
attempt): every case runs in both modes, through the real loader and snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from raygate.policy.admission import Derivation
from raygate.policy.admission.status import ROOM_RECHECK_SECONDS
from raygate.policy.config import PolicyConfig, policy_config_from_mapping
from raygate.policy.constraints import NodeConstraints, NodeRequirement
from raygate.policy.native import LABEL_ROLE, LABEL_RULE, rule_requirements
from raygate.policy.placement import AVOIDS_GPU, Placement, decide
from testkit.builders import (
    T0_EPOCH,
    Obj,
    iso,
    make_node,
    make_pod,
    make_raycluster,
    uid_for,
)
from tests.conftest import snapshot_of
from tests.policy.derivation import derive

ONLY_GPU_ROOM = "raygate.io/only-gpu-room"
THRASH_GUARD = "raygate.io/thrash-guard"
GPU_LABEL = ("nvidia.com/gpu.present", "true")
NOT_GPU = [{"key": GPU_LABEL[0], "operator": "NotIn", "values": [GPU_LABEL[1]]}]
REQUIRED = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": NOT_GPU}]}}}
PREFERRED = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 100, "preference": {"matchExpressions": NOT_GPU}}]}}
NATIVE_SAID = ("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's "
               "node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption "
               "is not helpful for scheduling.")
EXTENDER_SAID = ("0/2 nodes are available: 1 Insufficient cpu, 1 raygate: floor-avoids-gpu: "
                 "GPU node refused to a CPU-only floor worker.")
NOW = T0_EPOCH + 60


def cpu_node(cpu: str, name: str = "cpu-a") -> Obj:
    return make_node(name).allocatable(cpu=cpu).obj()


def gpu_node(cpu: str, *, cordoned: bool = False) -> Obj:
    node = make_node("gpu-1").allocatable(cpu=cpu).gpus(8).label(*GPU_LABEL)
    node = node.taint("nvidia.com/gpu")  # as GPU operators and GKE's GPU pools add it
    return (node.unschedulable() if cordoned else node).obj()


FULL, ROOMY = cpu_node("2"), gpu_node("16")


@dataclass(frozen=True)
class Case:
    id: str
    nodes: tuple[Obj, ...]
    gates: set[str]
    floor: int = 1
    """The group's minReplicas: 1, the worker is floor; 0, surplus."""
    written: str = ""
    """The rule native placement wrote (default: floor-avoids-gpu or surplus-prefers-cpu)."""
    tolerates: bool = True
    selector: dict[str, str] = field(default_factory=dict)
    preempted: bool = False
    """The group lost a pod to preemption on the GPU node 10 s ago: the thrash guard."""
    gpu_pod: bool = False
    nominated: bool = False
    """Preemption made room for it on the CPU node: it goes there."""


ROOM = Case("CPU node full, GPU node with room", (FULL, ROOMY), {ONLY_GPU_ROOM})
GPU_FULL = Case("GPU node full too", (FULL, gpu_node("2")), set())
SURPLUS = Case("a surplus worker may use GPU nodes (scored low): not kept off",
               (FULL, ROOMY), set(), floor=0)
THRASH = Case("the thrash guard keeps it off: the thrash guard's gate, not this one",
              (FULL, ROOMY), {THRASH_GUARD}, floor=0, written="thrash-guard", preempted=True)
CASES = [
    ROOM, GPU_FULL,
    Case("a CPU node with room", (FULL, cpu_node("8", "cpu-b"), ROOMY), set()),
    Case("no CPU node at all, GPU node with room", (ROOMY,), {ONLY_GPU_ROOM}),
    Case("GPU node's taint not tolerated: no room for it there", (FULL, ROOMY), set(),
         tolerates=False),
    Case("its node selector rules the GPU node out", (FULL, ROOMY), set(),
         selector={"pool": "cpu"}),
    Case("GPU node cordoned", (FULL, gpu_node("16", cordoned=True)), set()),
    SURPLUS, THRASH,
    Case("nominated to the CPU node: room is being made there", (FULL, ROOMY), set(),
         nominated=True),
    Case("a GPU pod is not raygate's to keep off", (FULL, ROOMY), set(), written="gpu-pod",
         gpu_pod=True),
]
NATIVE_ONLY = [
    # The rule stays in the pod for its life: once the guard is over, only it keeps the
    # pod off GPU nodes. (The extender lets the pod onto them then: no wait to gate.)
    Case("a thrash-guard rule written, the guard over", (FULL, ROOMY), {ONLY_GPU_ROOM},
         floor=0, written="thrash-guard"),
    Case("released failed open: no rule in it", (FULL, ROOMY), set(), written="failed-open"),
]


def worker(case: Case, native: bool) -> Obj:
    pod = (make_pod("rc-g-w0").ray("rc", "g").requests(cpu="4").created(iso(T0_EPOCH))
           .condition("PodScheduled", "False", "Unschedulable",
                      NATIVE_SAID if native else EXTENDER_SAID, iso(T0_EPOCH + 1)))
    if case.gpu_pod:
        pod = pod.requests(nvidia_com_gpu="1")
    if case.tolerates:
        pod = pod.tolerate("nvidia.com/gpu")
    if native:
        rule = case.written or ("floor-avoids-gpu" if case.floor else "surplus-prefers-cpu")
        role = "floor" if case.floor else "surplus"
        pod = pod.label(LABEL_ROLE, role).label(LABEL_RULE, rule)
        if rule in {r.value for r in AVOIDS_GPU}:
            pod = pod.affinity(REQUIRED)
        elif rule == "surplus-prefers-cpu":
            pod = pod.affinity(PREFERRED)
    made = pod.obj()
    if case.selector:
        made["spec"]["nodeSelector"] = case.selector
    if case.nominated:
        made["status"]["nominatedNodeName"] = "cpu-a"
    return made


def objects(case: Case, native: bool) -> list[Obj]:
    cluster = make_raycluster("rc").autoscaling().group("g", replicas=1, min=case.floor,
                                                          max=4, cpu="4").obj()
    lost = (make_pod("rc-g-old").ray("rc", "g").on("gpu-1").preempted(iso(NOW - 10)).obj()
            if case.preempted else None)
    return [cluster, *case.nodes, worker(case, native), *([lost] if lost else [])]


def group_gates(derived: Derivation) -> set[str]:
    group = next(g for g in derived.status.groups if g.name == "g")
    return {gate.name for gate in group.scale_gates if gate.wanted}


@pytest.mark.parametrize("native", [True, False], ids=["native", "extender"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_only_gpu_room_in_both_modes(case: Case, native: bool) -> None:
    derived = derive(objects(case, native), "rc", now=NOW)
    assert group_gates(derived) == case.gates
    pod = next(p for p in derived.status.pods if p.name == "rc-g-w0")
    assert bool(pod.gpu_room) == (ONLY_GPU_ROOM in case.gates)


@pytest.mark.parametrize("case", NATIVE_ONLY, ids=[c.id for c in NATIVE_ONLY])
def test_only_gpu_room_under_native_placement(case: Case) -> None:
    assert group_gates(derive(objects(case, True), "rc", now=NOW)) == case.gates


def test_the_gate_says_which_gpu_node_and_which_rule() -> None:
    derived = derive(objects(ROOM, True), "rc", now=NOW)
    group = next(g for g in derived.status.groups if g.name == "g")
    assert [(g.name, g.reason) for g in group.scale_gates] == [(ONLY_GPU_ROOM, (
        "pod rc-g-w0: only GPU nodes have room for it (gpu-1 has; no other node it may use "
        "has), and raygate's rule floor-avoids-gpu keeps it off them"))]


@pytest.mark.parametrize(("case", "recheck"), [
    (ROOM, True), (GPU_FULL, True),  # the nodes read: they may change alone
    (SURPLUS, False),  # not kept off: no node read, nothing to look at again
])
def test_a_status_that_read_the_nodes_is_derived_again(case: Case, recheck: bool) -> None:
    derived = derive(objects(case, True), "rc", now=NOW)
    assert (derived.next_change == NOW + ROOM_RECHECK_SECONDS) is recheck


def test_no_room_read_while_raygate_writes_no_gates() -> None:
    derived = derive(objects(ROOM, True), "rc", now=NOW,
                     config=PolicyConfig(scale_gates=False))
    assert [p.gpu_room for p in derived.status.pods] == [""]
    assert derived.next_change is None


def test_a_native_pod_keeps_its_constraints_while_unbound() -> None:
    snap = snapshot_of(*objects(ROOM, True))
    waiting = next(p for p in snap.cluster_pods("ray", "rc") if p.name == "rc-g-w0")
    assert waiting.constraints is not None
    assert waiting.constraints.terms == ((NodeRequirement(GPU_LABEL[0], "NotIn",
                                                          (GPU_LABEL[1],)),),)
    others = snapshot_of(make_pod("bound").ray("rc", "g").on("cpu-a").obj(),
                         make_pod("not-ray").obj())
    assert [others.pod(uid_for("Pod", "ray", name)).constraints  # type: ignore[union-attr]
            for name in ("bound", "not-ray")] == [None, None]


ME = NodeRequirement("pool", "In", ("cpu",))
RAYGATE = next(iter(rule_requirements(PolicyConfig())))


@pytest.mark.parametrize(("terms", "before"), [
    (None, None),  # no required affinity
    (((RAYGATE,),), None),  # raygate's rule made the whole selector
    (((ME, RAYGATE),), ((ME,),)),  # added to the pod's own term
    (((ME, RAYGATE), (RAYGATE,)), ((ME,), ())),  # an empty term matched no node before
])
def test_constraints_without_raygates_rule(
        terms: tuple[tuple[NodeRequirement, ...], ...] | None,
        before: tuple[tuple[NodeRequirement, ...], ...] | None) -> None:
    assert NodeConstraints(terms=terms).without(rule_requirements(PolicyConfig())).terms == (
        before)


@pytest.mark.parametrize("mode", ["surplus", "never", "always"])
@pytest.mark.parametrize("case", [ROOM, SURPLUS, THRASH], ids=["floor", "surplus",
                                                               "thrash-guard"])
def test_avoids_gpu_names_the_rules_that_refuse_gpu_nodes(case: Case, mode: str) -> None:
    config = policy_config_from_mapping({"gpuNodesForSurplus": mode})
    snap = snapshot_of(*objects(case, False), make_pod("rc-head").head("rc").obj(),
                       config=config)
    for pod in snap.cluster_pods("ray", "rc"):
        decision = decide(pod, snap, config, NOW)
        assert (decision.placement is Placement.AVOID_GPU) == (decision.rule in AVOIDS_GPU)
