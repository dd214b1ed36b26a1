"""The placement rules, directly: one table row per rule of ``decide`` (and the ways a pod
reaches it), each checked through ``filter_names``, ``Decision.refusal``, ``score`` and
``volcano_score`` as the fronts apply them. The fronts' tests keep only their protocol's
own cases (tests/fronts/test_scheduler_filter.py, test_volcano.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import pytest

from raygate.policy.classify import RoleVerdict
from raygate.policy.config import GpuNodesForSurplus, PolicyConfig
from raygate.policy.model import PodView, Role
from raygate.policy.placement import (
    MAX_SCORE,
    Decision,
    Placement,
    Rule,
    decide,
    filter_names,
    score,
    thrash_guard_until,
    volcano_score,
)
from raygate.server.cache import convert
from raygate.server.cache.snapshot import Snapshot
from raygate.server.wire import kube
from testkit.builders import (
    T0,
    T0_EPOCH,
    Obj,
    PodBuilder,
    iso,
    make_node,
    make_pod,
    make_raycluster,
)
from tests.conftest import snapshot_of

NODES = [
    make_node("cpu-1").obj(),
    make_node("cpu-2").obj(),
    make_node("gpu-1").gpus(8).obj(),  # a GPU node by its allocatable
    make_node("gpu-2").label("nvidia.com/gpu.present", "true").obj(),  # by its label
]
NAMES = ["cpu-1", "gpu-1", "cpu-2", "gpu-2", "never-seen"]
PASSING = ["cpu-1", "cpu-2", "never-seen"]  # a node the cache never saw passes: fail open
GPU = ["gpu-1", "gpu-2"]
# A cluster with a floor group (min 2) and an overflow group (min 0).
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=4, min=0, max=8).obj()
NEVER = PolicyConfig(gpu_nodes_for_surplus=GpuNodesForSurplus.NEVER)
ALWAYS = PolicyConfig(gpu_nodes_for_surplus=GpuNodesForSurplus.ALWAYS)


def base(name: str) -> PodBuilder:
    return make_pod(name).ray("rc", "base").requests(cpu="2")


def over(name: str) -> PodBuilder:
    return make_pod(name).ray("rc", "over").requests(cpu="2")


def preempted_over(at: str, node: str = "gpu-1", reason: str = "PreemptionByScheduler") -> Obj:
    return over("victim").on(node).preempted(at, reason).obj()


def view_of(obj: Obj) -> PodView:
    return convert.pod_view(msgspec.convert(obj, kube.Pod))


@dataclass
class Case:
    id: str
    pod: Obj
    rule: Rule
    role: Role | None
    objects: list[Obj] = field(default_factory=list)
    reason: str = ""
    """A fragment of ``Decision.reason``."""
    now: float = T0_EPOCH
    config: PolicyConfig = field(default_factory=PolicyConfig)
    known_role: RoleVerdict | None = None
    cluster_unknown: bool = False
    clock_dependent: bool = False

    @property
    def placement(self) -> Placement:
        if self.rule in (Rule.NOT_RAY, Rule.GPU_POD):
            return Placement.UNMANAGED
        if self.rule in (Rule.SURPLUS_PREFERS_CPU, Rule.POLICY_ALWAYS):
            return Placement.PREFER_CPU
        return Placement.AVOID_GPU


def guarded(id: str, objects: list[Obj], *, now: float = T0_EPOCH,
            config: PolicyConfig | None = None, reason: str = "") -> Case:
    """The overflow worker ``o1`` while its group lost a pod to preemption."""
    return Case(id, over("o1").obj(), Rule.THRASH_GUARD, Role.SURPLUS, [CLUSTER, *objects],
                reason, now, config or PolicyConfig(), clock_dependent=True)


def unguarded(id: str, objects: list[Obj], *, now: float = T0_EPOCH,
              config: PolicyConfig | None = None, clock_dependent: bool = True) -> Case:
    return Case(id, over("o1").obj(), Rule.SURPLUS_PREFERS_CPU, Role.SURPLUS,
                [CLUSTER, *objects], "CPU-only surplus worker", now,
                config or PolicyConfig(), clock_dependent=clock_dependent)


CASES = [
    # Not raygate's business: every node passes, no score.
    Case("non-ray pod", make_pod("web", "default").requests(cpu="1").obj(), Rule.NOT_RAY,
         None, [CLUSTER], "not a Ray pod"),
    Case("gpu ray worker (request)", make_pod("g").ray("rc", "gpu")
         .requests(nvidia_com_gpu="1").obj(), Rule.GPU_POD, None, [CLUSTER],
         "requests GPU resources (nvidia.com/gpu)"),
    Case("gpu ray worker (limit only)", make_pod("g").ray("rc", "gpu")
         .limits(nvidia_com_gpu="2").obj(), Rule.GPU_POD, None, [CLUSTER], "nvidia.com/gpu"),
    Case("gpu head is a gpu pod, whatever the policy", make_pod("h").head("rc")
         .requests(nvidia_com_gpu="1").obj(), Rule.GPU_POD, None, [CLUSTER], config=NEVER),
    # The head and the floor refuse GPU nodes.
    Case("head", make_pod("h").head("rc").requests(cpu="1").obj(), Rule.HEAD_AVOIDS_GPU,
         Role.HEAD, [CLUSTER], "CPU-only Ray head; the head pod is always part"),
    Case("head of an unknown raycluster is still the head",
         make_pod("h").head("nope").requests(cpu="1").obj(), Rule.HEAD_AVOIDS_GPU, Role.HEAD),
    Case("pending floor worker", base("b1").obj(), Rule.FLOOR_AVOIDS_GPU, Role.FLOOR,
         [CLUSTER], "CPU-only floor worker; group base has 0 of floor 2 pods scheduled"),
    Case("floor worker while one floor pod runs", base("b2").obj(), Rule.FLOOR_AVOIDS_GPU,
         Role.FLOOR, [CLUSTER, base("b1").on("cpu-1").obj()], "has 1 of floor 2"),
    Case("a terminating floor pod does not count", base("b3").obj(), Rule.FLOOR_AVOIDS_GPU,
         Role.FLOOR, [CLUSTER, base("b1").on("cpu-1").obj(),
                      base("b2").on("cpu-2").terminating().obj()], "has 1 of floor 2"),
    Case("bound floor pod", base("b1").on("cpu-1").obj(), Rule.FLOOR_AVOIDS_GPU, Role.FLOOR,
         [CLUSTER, base("b1").on("cpu-1").obj(), base("b2").on("cpu-2").obj()],
         "one of the 2 floor pods of group base"),
    Case("unknown raycluster is floor (fail safe)", over("o1").obj(), Rule.FLOOR_AVOIDS_GPU,
         Role.FLOOR, [], "RayCluster ray/rc is unknown to raygate", cluster_unknown=True),
    Case("the caller's role wins (a gated pod's release role)", over("o1").obj(),
         Rule.FLOOR_AVOIDS_GPU, Role.FLOOR, [CLUSTER], "released as floor",
         known_role=RoleVerdict(Role.FLOOR, "released as floor")),
    # Surplus: GPU nodes pass, scored low.
    Case("worker beyond a full floor is surplus", base("b3").obj(), Rule.SURPLUS_PREFERS_CPU,
         Role.SURPLUS, [CLUSTER, base("b1").on("cpu-1").obj(), base("b2").on("cpu-2").obj()],
         "group base already has 2 scheduled pods for a floor of 2"),
    Case("bound pod above the floor, on a gpu node, is surplus", base("b3").on("gpu-1").obj(),
         Rule.SURPLUS_PREFERS_CPU, Role.SURPLUS,
         [CLUSTER, base("b1").on("cpu-1").obj(), base("b2").on("cpu-2").obj(),
          base("b3").on("gpu-1").obj()], "one of the pods above floor 2 in group base"),
    Case("a terminating bound pod is surplus", base("b1").on("cpu-1").terminating().obj(),
         Rule.SURPLUS_PREFERS_CPU, Role.SURPLUS, [CLUSTER], "no longer part of the floor"),
    Case("overflow worker is surplus", over("o1").obj(), Rule.SURPLUS_PREFERS_CPU,
         Role.SURPLUS, [CLUSTER], "CPU-only surplus worker; group over already has 0"),
    # The policy.
    Case("policy never keeps surplus off gpu nodes", over("o1").obj(), Rule.POLICY_NEVER,
         Role.SURPLUS, [CLUSTER], "policy keeps it off GPU nodes", config=NEVER),
    Case("policy never: the floor keeps its own rule", base("b1").obj(),
         Rule.FLOOR_AVOIDS_GPU, Role.FLOOR, [CLUSTER], config=NEVER),
    Case("policy never: the head keeps its own rule", make_pod("h").head("rc").obj(),
         Rule.HEAD_AVOIDS_GPU, Role.HEAD, [CLUSTER], config=NEVER),
    Case("policy never wins over the thrash guard", over("o1").obj(), Rule.POLICY_NEVER,
         Role.SURPLUS, [CLUSTER, preempted_over(T0)], config=NEVER),
    Case("policy always lets the floor use gpu nodes", base("b1").obj(), Rule.POLICY_ALWAYS,
         Role.FLOOR, [CLUSTER], "policy lets every CPU-only Ray pod use GPU nodes",
         config=ALWAYS),
    Case("policy always lets the head use gpu nodes", make_pod("h").head("rc").obj(),
         Rule.POLICY_ALWAYS, Role.HEAD, [CLUSTER], config=ALWAYS),
    Case("policy always: an unknown raycluster still says so", over("o1").obj(),
         Rule.POLICY_ALWAYS, Role.FLOOR, [], config=ALWAYS, cluster_unknown=True),
    Case("policy always: a gpu pod is still unmanaged", make_pod("g").ray("rc", "gpu")
         .requests(nvidia_com_gpu="1").obj(), Rule.GPU_POD, None, [CLUSTER], config=ALWAYS),
    # The thrash guard: the group lost a pod to preemption on a GPU node at T0 (300 s).
    guarded("thrash guard at once", [preempted_over(T0)],
            reason="group over lost a pod to scheduler preemption on a GPU node 0s ago; "
            "the guard lasts 300s"),
    guarded("thrash guard 1s before the end", [preempted_over(T0)], now=T0_EPOCH + 299,
            reason="299s ago"),
    unguarded("thrash guard over at the window's end", [preempted_over(T0)],
              now=T0_EPOCH + 300),
    guarded("thrash guard from a clock-skewed future stamp",
            [preempted_over(iso(T0_EPOCH + 30))], reason="30s in the future (clock skew)"),
    guarded("thrash guard uses the latest preemption",
            [preempted_over(T0), over("v2").on("gpu-2").preempted(iso(T0_EPOCH + 200)).obj()],
            now=T0_EPOCH + 400, reason="200s ago"),
    guarded("thrash guard window is configurable", [preempted_over(T0)], now=T0_EPOCH + 59,
            config=PolicyConfig(thrash_guard_seconds=60), reason="the guard lasts 60s"),
    unguarded("thrash guard window is configurable, over", [preempted_over(T0)],
              now=T0_EPOCH + 100, config=PolicyConfig(thrash_guard_seconds=60)),
    unguarded("thrash guard off at 0", [preempted_over(T0)],
              config=PolicyConfig(thrash_guard_seconds=0), clock_dependent=False),
    unguarded("no thrash guard for a preemption on a cpu node",
              [preempted_over(T0, node="cpu-1")], clock_dependent=False),
    unguarded("no thrash guard for other disruptions",
              [preempted_over(T0, reason="EvictionByEvictionAPI")], clock_dependent=False),
    unguarded("no thrash guard from another group",
              [base("victim").on("gpu-1").preempted(T0).obj()], clock_dependent=False),
]


def _snapshot(case: Case) -> Snapshot:
    return snapshot_of(*NODES, *case.objects, config=case.config)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    view = _snapshot(case)
    decision = decide(view_of(case.pod), view, case.config, case.now, case.known_role)
    assert (decision.placement, decision.rule, decision.role) == (
        case.placement, case.rule, case.role)
    assert case.reason in decision.reason
    assert decision.cluster_unknown is case.cluster_unknown
    assert decision.clock_dependent is case.clock_dependent
    if decision.refuses_gpu_nodes:
        assert decision.gpu_node_message == (
            f"raygate: {case.rule.value}: GPU node refused to a {decision.reason}")
    else:
        assert decision.gpu_node_message == ""


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_filter_and_score_apply_the_decision(case: Case) -> None:
    """As the fronts apply it: the GPU nodes the cache knows refused (or not), every other
    node passing; the scores of a managed pod, none for an unmanaged one."""
    view = _snapshot(case)
    decision = decide(view_of(case.pod), view, case.config, case.now, case.known_role)
    gpu_nodes = frozenset(name for name in NAMES if view.is_gpu_node(name))
    assert sorted(gpu_nodes) == GPU
    passed, failed = filter_names(decision, NAMES, gpu_nodes)
    if case.placement is Placement.AVOID_GPU:
        message = decision.gpu_node_message
        assert message.startswith(f"raygate: {case.rule.value}: ")
        assert (passed, failed) == (PASSING, dict.fromkeys(GPU, message))
        assert list(failed) == GPU  # in input order
        assert (decision.refusal(True), decision.refusal(False)) == (message, None)
    else:
        assert passed is NAMES
        assert failed == {}
        assert (decision.refusal(True), decision.refusal(False)) == (None, None)
    if case.placement is not Placement.UNMANAGED:
        assert [score(bool(view.is_gpu_node(n))) for n in NAMES[:4]] == [10, 0, 10, 0]
        assert volcano_score(False, case.config) == 10 * case.config.volcano_score_scale
        assert volcano_score(True, case.config) == 0.0


def test_every_rule_placement_and_policy_has_a_row() -> None:
    assert {case.rule for case in CASES} == set(Rule)
    assert {case.placement for case in CASES} == set(Placement)
    assert {case.config.gpu_nodes_for_surplus for case in CASES} == set(GpuNodesForSurplus)


# --- the per-node functions ----------------------------------------------------------


def _decision(placement: Placement, message: str = "") -> Decision:
    return Decision(placement, Rule.FLOOR_AVOIDS_GPU, Role.FLOOR, "r", gpu_node_message=message)


def test_scores_are_kube_schedulers_0_to_10() -> None:
    assert (score(False), score(True)) == (MAX_SCORE, 0) == (10, 0)
    assert isinstance(score(False), int)


@pytest.mark.parametrize(("scale", "cpu"), [(50.0, 500.0), (2.5, 25.0), (1.0, 10.0)])
def test_volcano_score_is_scaled(scale: float, cpu: float) -> None:
    config = PolicyConfig(volcano_score_scale=scale)
    assert volcano_score(False, config) == cpu
    assert volcano_score(True, config) == 0.0
    assert isinstance(volcano_score(False, config), float)


def test_filter_names_returns_the_names_themselves_when_no_gpu_node_is_among_them() -> None:
    names = ["cpu-1", "never-seen", "cpu-2"]
    passed, failed = filter_names(_decision(Placement.AVOID_GPU, "m"), names,
                                  frozenset(GPU))
    assert passed is names
    assert failed == {}


def test_filter_names_keeps_input_order_and_duplicates() -> None:
    names = ["gpu-2", "cpu-2", "gpu-1", "cpu-1", "cpu-2"]
    passed, failed = filter_names(_decision(Placement.AVOID_GPU, "m"), names,
                                  frozenset(GPU))
    assert passed == ["cpu-2", "cpu-1", "cpu-2"]
    assert list(failed.items()) == [("gpu-2", "m"), ("gpu-1", "m")]


def test_filter_names_of_no_names() -> None:
    assert filter_names(_decision(Placement.AVOID_GPU, "m"), [], frozenset(GPU)) == ([], {})


def test_an_unknown_node_passes_even_a_refusing_decision() -> None:
    """A node the cache has never seen is in no GPU set: it passes (fail open)."""
    passed, failed = filter_names(_decision(Placement.AVOID_GPU, "m"), ["gpu-new"],
                                  frozenset(GPU))
    assert (passed, failed) == (["gpu-new"], {})


@pytest.mark.parametrize("placement", [Placement.UNMANAGED, Placement.PREFER_CPU])
def test_a_decision_that_does_not_refuse_passes_every_name(placement: Placement) -> None:
    names = list(NAMES)
    assert filter_names(_decision(placement), names, frozenset(GPU)) == (names, {})
    assert filter_names(_decision(placement), names, frozenset(GPU))[0] is names


# --- the thrash guard's end ----------------------------------------------------------


@pytest.mark.parametrize(("objects", "config", "until"), [
    ([], PolicyConfig(), None),
    ([preempted_over(T0)], PolicyConfig(), T0_EPOCH + 300),
    ([preempted_over(T0)], PolicyConfig(thrash_guard_seconds=60), T0_EPOCH + 60),
    ([preempted_over(T0)], PolicyConfig(thrash_guard_seconds=0), None),
    ([preempted_over(T0, node="cpu-1")], PolicyConfig(), None),
    ([preempted_over(T0), over("v2").on("gpu-2").preempted(iso(T0_EPOCH + 200)).obj()],
     PolicyConfig(), T0_EPOCH + 500),
], ids=["never preempted", "window after the preemption", "configured window", "off",
        "on a cpu node", "the latest preemption"])
def test_thrash_guard_until(objects: list[Obj], config: PolicyConfig,
                            until: float | None) -> None:
    view = snapshot_of(*NODES, CLUSTER, *objects, config=config)
    assert thrash_guard_until(view_of(over("o1").obj()), view, config) == until
