"""The all-or-nothing scale-up (``raygate.policy.scale_up``): which gated pods form the
batch, whether they fit the cluster as it is, and when the batch goes whole."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.admission import admission_status
from raygate.policy.admission.states import PodState, ScaleUp
from raygate.policy.config import NodeAutoscaler, PolicyConfig, policy_config_from_mapping
from raygate.policy.constraints import NodeConstraints, NodeRequirement, Taint, Toleration
from raygate.policy.model import NodeClaimView
from raygate.policy.native import GATE
from raygate.policy.scale_up import ALL_OR_NOTHING, ANNOTATION, scale_up_batch
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.cache.keys import NODECLAIM
from testkit.builders import T0_EPOCH, Obj, iso, make_node, make_pod, make_raycluster
from tests.conftest import snapshot_of

GPU_LABEL = {"nvidia.com/gpu.present": "true"}


def cluster(*, opted_in: bool = True, floor: int = 0) -> Obj:
    rc = make_raycluster("rc").autoscaling().group("g", replicas=4, min=floor, max=8, cpu="2")
    return (rc.annotate(ANNOTATION, ALL_OR_NOTHING) if opted_in else rc).obj()


def workers(count: int, *, cpu: str = "2", tolerate: str = "") -> list[Obj]:
    pods = []
    for i in range(count):
        pod = (make_pod(f"w{i}").ray("rc", "g").gated(GATE).requests(cpu=cpu)
               .created(iso(T0_EPOCH + i)))
        pods.append((pod.tolerate(tolerate) if tolerate else pod).obj())
    return pods


def head_on(node: str) -> Obj:
    return make_pod("rc-head").head("rc").requests(cpu="2").on(node).obj()


def cpu_node(name: str, cpu: str) -> Obj:
    return make_node(name).allocatable(cpu=cpu).obj()


def gpu_node(name: str, cpu: str, *, taint: bool = True) -> Obj:
    node = make_node(name).allocatable(cpu=cpu).gpus(8).label(*next(iter(GPU_LABEL.items())))
    return (node.taint("nvidia.com/gpu") if taint else node).obj()


@dataclass
class Case:
    name: str
    objects: list[Obj]
    size: int
    fit: int
    release: bool
    policy: dict[str, object] = field(default_factory=dict)


CASES = [
    Case("all four fit beside the head", [cluster(), cpu_node("a", "10"), head_on("a"),
                                           *workers(4)], 4, 4, True),
    Case("three of four fit: held", [cluster(), cpu_node("a", "8"), head_on("a"),
                                     *workers(4)], 4, 3, False),
    Case("two nodes together hold them", [cluster(), cpu_node("a", "6"), cpu_node("b", "4"),
                                          head_on("a"), *workers(4)], 4, 4, True),
    Case("room split across nodes that no pod fits", [
        cluster(), cpu_node("a", "3"), cpu_node("b", "3"), *workers(2, cpu="4")], 2, 0, False),
    Case("a cordoned node holds none", [
        cluster(), make_node("a").allocatable(cpu="16").unschedulable().obj(),
        *workers(2)], 2, 0, False),
    Case("a tainted GPU node holds none that do not tolerate it", [
        cluster(), gpu_node("g", "16"), *workers(2)], 2, 0, False),
    Case("a tainted GPU node holds those that tolerate it", [
        cluster(), gpu_node("g", "16"), *workers(2, tolerate="nvidia.com/gpu")], 2, 2, True),
    Case("policy never: no GPU node counts", [
        cluster(), gpu_node("g", "16", taint=False), *workers(2)], 2, 0, False,
         {"gpuNodesForSurplus": "never"}),
    Case("the floor is released as ever, not held", [
        cluster(floor=1), cpu_node("a", "4"), head_on("a"), *workers(3)], 2, 0, False),
    Case("a node autoscaler: released whatever fits", [
        cluster(), cpu_node("a", "2"), *workers(4)], 4, 4, True,
         {"nodeAutoscaler": "present"}),
    Case("released pods not bound yet take their room first", [
        cluster(floor=1), cpu_node("a", "4"),
        make_pod("f0").ray("rc", "g").requests(cpu="2").created(iso(T0_EPOCH - 1)).obj(),
        *workers(2)], 2, 1, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_batch_and_its_fit(case: Case) -> None:
    config = policy_config_from_mapping(case.policy)
    snap = snapshot_of(*case.objects, config=config)
    rc = snap.raycluster("ray", "rc")
    assert rc is not None and rc.all_or_nothing
    batch = scale_up_batch(rc, snap, config, T0_EPOCH + 10)
    assert batch is not None
    assert (len(batch.pods), batch.fit, batch.release) == (case.size, case.fit, case.release)
    assert (batch.lacking == "") == (case.fit == case.size)


def test_a_cluster_that_did_not_opt_in_has_no_batch() -> None:
    snap = snapshot_of(cluster(opted_in=False), cpu_node("a", "2"), *workers(3))
    rc = snap.raycluster("ray", "rc")
    assert rc is not None and not rc.all_or_nothing
    assert scale_up_batch(rc, snap, PolicyConfig(), T0_EPOCH) is None


def test_karpenter_counts_as_a_node_autoscaler_where_its_nodeclaims_are_served() -> None:
    snap = snapshot_of(cluster(), cpu_node("a", "2"), *workers(3))
    editor = SnapshotEditor(snap)
    editor.replace(NODECLAIM, [("1", NodeClaimView("default-x7k2p"))])
    served = editor.finish()
    rc = served.raycluster("ray", "rc")
    assert rc is not None
    batch = scale_up_batch(rc, served, PolicyConfig(), T0_EPOCH)
    assert batch is not None and batch.release and "Karpenter" in batch.node_autoscaler
    absent = PolicyConfig(node_autoscaler=NodeAutoscaler.ABSENT)
    held = scale_up_batch(rc, served, absent, T0_EPOCH)
    assert held is not None and not held.release and held.fit == 1


def test_the_admission_status_reports_a_held_scale_up_as_one() -> None:
    snap = snapshot_of(cluster(), cpu_node("a", "6"), head_on("a"), *workers(4))
    rc = snap.raycluster("ray", "rc")
    assert rc is not None
    derived = admission_status(rc, snap, PolicyConfig(), T0_EPOCH + 30)
    held = [p for p in derived.status.pods if p.group == "g"]
    assert [(p.state, p.rule) for p in held] == [
        (PodState.WAITING_FOR_CAPACITY, "scale-up-held")] * 4
    assert {p.since for p in held} == {T0_EPOCH}  # the batch's, for every pod
    assert held[0].advice.reason.startswith("raygate releases the whole scale-up")
    assert held[0].reason == ("a scale-up of 4 surplus workers held together until all fit: "
                              "2 of 4 fit the cluster as it is; the next asks for cpu 2")
    group = next(g for g in derived.status.groups if g.name == "g")
    assert group.scale_up.action is ScaleUp.HOLD and held[0].reason in group.scale_up.reason
    assert derived.next_change is not None and derived.next_change <= T0_EPOCH + 31


@pytest.mark.parametrize(("toleration", "taint", "tolerated"), [
    (Toleration("k", "Exists"), Taint("k", "v"), True),
    (Toleration("", "Exists"), Taint("k", "v", "NoExecute"), True),
    (Toleration("k", "Equal", "v"), Taint("k", "v"), True),
    (Toleration("k", "Equal", "w"), Taint("k", "v"), False),
    (Toleration("k", "Exists", effect="NoExecute"), Taint("k", "v", "NoSchedule"), False),
    (Toleration("j", "Exists"), Taint("k"), False),
    (Toleration("k", "Lt", "5"), Taint("k", "3"), False),  # an operator raygate does not know
])
def test_tolerations_as_core_v1_reads_them(toleration: Toleration, taint: Taint,
                                            tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated


def test_only_nodes_the_pods_may_use_count() -> None:
    """Nodes of another pool (the node selector), another zone (the required affinity)."""
    zone = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    pods = []
    for i in range(2):
        pod = (make_pod(f"w{i}").ray("rc", "g").gated(GATE).requests(cpu="2").affinity(zone)
               .created(iso(T0_EPOCH + i)).obj())
        pod["spec"]["nodeSelector"] = {"pool": "ray"}
        pods.append(pod)
    nodes = [make_node("other-pool").allocatable(cpu="16").label("zone", "a").obj(),
             make_node("other-zone").allocatable(cpu="16").label("pool", "ray")
             .label("zone", "b").obj(),
             make_node("ours").allocatable(cpu="2").label("pool", "ray").label("zone", "a")
             .obj()]
    snap = snapshot_of(cluster(), *nodes, *pods)
    rc = snap.raycluster("ray", "rc")
    assert rc is not None
    batch = scale_up_batch(rc, snap, PolicyConfig(), T0_EPOCH)
    assert batch is not None and (batch.fit, batch.release) == (1, False)


@pytest.mark.parametrize(("requirement", "labels", "matched"), [
    (NodeRequirement("k", "In", ("a", "b")), {"k": "b"}, True),
    (NodeRequirement("k", "In", ("a",)), {}, False),
    (NodeRequirement("k", "NotIn", ("a",)), {}, True),
    (NodeRequirement("k", "NotIn", ("a",)), {"k": "a"}, False),
    (NodeRequirement("k", "Exists"), {"k": ""}, True),
    (NodeRequirement("k", "DoesNotExist"), {"k": ""}, False),
    (NodeRequirement("k", "Gt", ("3",)), {"k": "4"}, True),
    (NodeRequirement("k", "Lt", ("3",)), {"k": "x"}, False),
    (NodeRequirement("metadata.name", "In", ("n",)), {}, True),
    (NodeRequirement("k", "Near", ("a",)), {"k": "a"}, False),
])
def test_node_requirements_as_a_node_selector_reads_them(
        requirement: NodeRequirement, labels: dict[str, str], matched: bool) -> None:
    assert requirement.matches("n", labels) is matched
    assert NodeConstraints(terms=((requirement,), ())).admits("n", labels, ()) is matched


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(st.integers(0, 12), max_size=4),
       asks=st.lists(st.integers(1, 4), min_size=1, max_size=6))
def test_the_fit_never_overfills_a_node_and_more_room_never_fits_fewer(
        nodes: list[int], asks: list[int]) -> None:
    def fit_with(cpus: list[int]) -> int:
        objects = [cluster(), *(cpu_node(f"n{i}", str(c)) for i, c in enumerate(cpus))]
        for i, cpu in enumerate(asks):
            objects.append(make_pod(f"w{i}").ray("rc", "g").gated(GATE)
                           .requests(cpu=str(cpu)).created(iso(T0_EPOCH + i)).obj())
        snap = snapshot_of(*objects)
        rc = snap.raycluster("ray", "rc")
        assert rc is not None
        batch = scale_up_batch(rc, snap, PolicyConfig(), T0_EPOCH)
        assert batch is not None and 0 <= batch.fit <= len(asks)
        assert batch.release == (batch.fit == len(asks))
        # First fit in order: the pods that fit are a prefix, and they fit the room.
        assert sum(asks[:batch.fit]) <= sum(cpus)
        return batch.fit

    assert fit_with([*nodes, max(asks)]) >= fit_with(nodes)
