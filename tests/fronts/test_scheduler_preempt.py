"""preempt: the floor is never breached, substitution and dropping, over real HTTP, plus a
Hypothesis property over random clusters and victim sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raygate.policy.classify import group_floor
from raygate.policy.model import ANNOTATION_PREEMPTABLE, GroupKey, PodView
from raygate.policy.placement import decide
from raygate.policy.victims import Candidate, select_victims
from raygate.server.cache import convert
from raygate.server.wire import kube
from testkit.builders import T0_EPOCH, Obj, iso, make_node, make_pod, make_raycluster, uid_for
from tests.conftest import ServerThread, post_json, snapshot_of

# gpu-1: 16 CPU, 8 GPUs. The preemptor wants 4 GPUs and 8 CPU at priority 100.
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=6, min=0, max=8).obj()
PREEMPTOR = make_pod("trainer", "ml").requests(cpu="8", nvidia_com_gpu="4").priority(100).obj()


def uid(name: str, namespace: str = "ray") -> str:
    return uid_for("Pod", namespace, name)


def base(name: str, node: str = "gpu-1", cpu: str = "4") -> Obj:
    return make_pod(name).ray("rc", "base").requests(cpu=cpu).on(node).obj()


def over(name: str, node: str = "gpu-1", cpu: str = "4", priority: int = 0,
         created: str = "2026-11-30T04:00:00Z") -> Obj:
    return make_pod(name).ray("rc", "over").requests(cpu=cpu).on(node) \
        .priority(priority).created(created).obj()


def other(name: str, node: str = "gpu-1", cpu: str = "4", priority: int = 0) -> Obj:
    return make_pod(name, "default").requests(cpu=cpu).on(node).priority(priority).obj()


def gpu_job(name: str, node: str) -> Obj:
    return make_pod(name, "ml").requests(cpu="4", nvidia_com_gpu="1").on(node) \
        .priority(-10).obj()


NODES = [make_node("gpu-1").gpus(8).obj(), make_node("gpu-2").gpus(8).obj(),
         make_node("gpu-l").label("nvidia.com/gpu.present", "true").obj(),
         make_node("cpu-1").obj()]
# rc2: floor 2 in `floor`, none scheduled; `extra` has floor 2, met on cpu-1 in the cases.
CLUSTER_2 = make_raycluster("rc2", "ml").autoscaling() \
    .group("floor", replicas=2, min=2, max=2).group("extra", replicas=2, min=2, max=4).obj()
FLOOR_PREEMPTOR = make_pod("floor-0", "ml").ray("rc2", "floor").requests(cpu="2") \
    .priority(1000).obj()


@dataclass
class Case:
    id: str
    objects: list[Obj]
    proposed: dict[str, list[str]]
    """node -> victim UIDs, as kube-scheduler proposes them."""
    expected: dict[str, list[str]]
    pdb: dict[str, int] = field(default_factory=dict)
    preemptor: Obj = field(default_factory=lambda: PREEMPTOR)


CASES = [
    Case("surplus victims pass, most important first",
         [over("o1", priority=1), over("o2", priority=5), over("o3", priority=1,
                                                                created="2026-11-30T03:00:00Z")],
         {"gpu-1": [uid("o1"), uid("o2"), uid("o3")]},
         {"gpu-1": [uid("o2"), uid("o3"), uid("o1")]}),
    Case("floor victim removed, the rest still make room",
         [base("b1"), base("b2", node="cpu-1"), over("o1", cpu="8")],
         {"gpu-1": [uid("b1"), uid("o1")]}, {"gpu-1": [uid("o1")]}),
    Case("floor victim replaced by a surplus pod on the node, lowest priority first",
         [base("b1", cpu="8"), base("b2", node="cpu-1"), over("o1", priority=7),
          over("o2", priority=3)],
         {"gpu-1": [uid("b1")]}, {"gpu-1": [uid("o1"), uid("o2")]}),
    Case("substitution takes only as many as needed",
         [base("b1", cpu="4"), base("b2", node="cpu-1"), over("o1", cpu="4", priority=7),
          over("o2", cpu="4", priority=3), over("o3", cpu="4", priority=5)],
         # 16 CPU all used, 8 needed: o2 (priority 3) and o3 (5), never o1 (7).
         {"gpu-1": [uid("b1")]}, {"gpu-1": [uid("o3"), uid("o2")]}),
    Case("no surplus to substitute: node dropped",
         [base("b1", cpu="12"), base("b2", node="cpu-1"), other("web")],
         {"gpu-1": [uid("b1")]}, {}),
    Case("substitutes never outrank the preemptor",
         [base("b1", cpu="8"), base("b2", node="cpu-1"), over("o1", priority=100),
          over("o2", priority=200)],
         {"gpu-1": [uid("b1")]}, {}),
    Case("the head is protected",
         [make_pod("h").head("rc").requests(cpu="12").on("gpu-1").obj(), over("o1")],
         {"gpu-1": [uid("h"), uid("o1")]}, {}),
    Case("preemptable=false is protected on any pod",
         [make_pod("keep", "default").requests(cpu="4").on("gpu-1")
          .annotate(ANNOTATION_PREEMPTABLE, "false").obj(), other("web", cpu="8")],
         {"gpu-1": [uid("keep", "default"), uid("web", "default")]},
         {"gpu-1": [uid("web", "default")]}),
    # Volcano's GetPodPreemptable: the label counts too (the seed's recipe puts it on the
    # pod template's labels; the real kube-scheduler preempted such a pod in the e2e
    # scenario while raygate read only the annotation), the annotation wins over it, and
    # a value strconv.ParseBool cannot read means "not preemptable".
    Case("preemptable=false as a label is protected too",
         [make_pod("keep", "default").requests(cpu="4").on("gpu-1")
          .label(ANNOTATION_PREEMPTABLE, "false").obj(), other("web", cpu="8")],
         {"gpu-1": [uid("keep", "default"), uid("web", "default")]},
         {"gpu-1": [uid("web", "default")]}),
    Case("the annotation wins over the label",
         [make_pod("go", "default").requests(cpu="4").on("gpu-1")
          .label(ANNOTATION_PREEMPTABLE, "false").annotate(ANNOTATION_PREEMPTABLE, "true")
          .obj(), other("web", cpu="8")],
         {"gpu-1": [uid("go", "default"), uid("web", "default")]},
         {"gpu-1": [uid("go", "default"), uid("web", "default")]}),
    Case("Go's spellings of false, and an unreadable value, protect",
         [make_pod("f", "default").requests(cpu="1").on("gpu-1")
          .annotate(ANNOTATION_PREEMPTABLE, "F").obj(),
          make_pod("zero", "default").requests(cpu="1").on("gpu-1")
          .label(ANNOTATION_PREEMPTABLE, "0").obj(),
          make_pod("typo", "default").requests(cpu="1").on("gpu-1")
          .annotate(ANNOTATION_PREEMPTABLE, "no").obj(), other("web", cpu="8")],
         {"gpu-1": [uid("f", "default"), uid("zero", "default"), uid("typo", "default"),
                    uid("web", "default")]},
         {"gpu-1": [uid("web", "default")]}),
    Case("terminating pods still hold their resources",
         [base("b1", cpu="4"), base("b2", node="cpu-1"),
          make_pod("dying", "default").requests(cpu="8").on("gpu-1").terminating().obj(),
          over("o1", cpu="4")],
         # Without the dying pod's 8 CPU, evicting o1 would make room.
         {"gpu-1": [uid("b1")]}, {}),
    Case("a candidate of surplus victims drops candidates that evict others",
         [over("o1"), over("o2", node="gpu-2"), other("web", node="gpu-2"), over("o3")],
         {"gpu-1": [uid("o1"), uid("o3")], "gpu-2": [uid("o2"), uid("web", "default")]},
         {"gpu-1": [uid("o1"), uid("o3")]}),
    Case("non-ray victims stand when no candidate is all surplus",
         [other("web"), other("db", node="gpu-2")],
         {"gpu-1": [uid("web", "default")], "gpu-2": [uid("db", "default")]},
         {"gpu-1": [uid("web", "default")], "gpu-2": [uid("db", "default")]},
         pdb={"gpu-1": 0, "gpu-2": 2}),
    Case("UIDs the cache has not seen pass through (fail open)",
         [other("web")], {"gpu-1": ["not-in-cache", uid("web", "default")]},
         {"gpu-1": [uid("web", "default"), "not-in-cache"]}),
    Case("unknown node without protected victims passes through",
         [], {"node-x": ["a", "b"]}, {"node-x": ["a", "b"]}),
    Case("unknown node with protected victims is dropped",
         [base("b1", node="node-x"), base("b2", node="cpu-1")],
         {"node-x": [uid("b1")]}, {}),
    Case("a victim the cache places on another node is treated as unknown",
         [over("o1", node="gpu-2")], {"gpu-1": [uid("o1")]}, {"gpu-1": [uid("o1")]}),
    # preempt agrees with filter: a node filter refuses the preemptor is dropped whatever
    # its victims (kube-scheduler's dry run never asks the extender's filter).
    Case("a CPU-only floor worker evicts nothing on a GPU node",
         [gpu_job("job", "gpu-1"), other("web", node="cpu-1")],
         {"gpu-1": [uid("job", "ml")], "cpu-1": [uid("web", "default")]},
         {"cpu-1": [uid("web", "default")]}, preemptor=FLOOR_PREEMPTOR),
    Case("a GPU node labelled as one is refused the same way",
         [gpu_job("job", "gpu-l")], {"gpu-l": [uid("job", "ml")]}, {},
         preemptor=FLOOR_PREEMPTOR),
    Case("a CPU-only head evicts nothing on a GPU node",
         [gpu_job("job", "gpu-1")], {"gpu-1": [uid("job", "ml")]}, {},
         preemptor=make_pod("head", "ml").head("rc2").requests(cpu="2").priority(1000).obj()),
    Case("a thrash-guarded surplus worker evicts nothing on a GPU node",
         [gpu_job("job", "gpu-1"), make_pod("was", "ml").ray("rc2", "extra").requests(cpu="2")
          .on("gpu-2").preempted(iso(T0_EPOCH - 10)).obj(),
          *[make_pod(f"f{i}", "ml").ray("rc2", "extra").requests(cpu="2").on("cpu-1").obj()
            for i in range(2)]],
         {"gpu-1": [uid("job", "ml")]}, {},
         preemptor=make_pod("extra", "ml").ray("rc2", "extra").requests(cpu="2")
         .priority(1000).obj()),
    Case("a surplus worker may still preempt on a GPU node (it is only scored low there)",
         [gpu_job("job", "gpu-1"),
          *[make_pod(f"f{i}", "ml").ray("rc2", "extra").requests(cpu="2").on("cpu-1").obj()
            for i in range(2)]],
         {"gpu-1": [uid("job", "ml")]}, {"gpu-1": [uid("job", "ml")]},
         preemptor=make_pod("extra", "ml").ray("rc2", "extra").requests(cpu="2")
         .priority(1000).obj()),
    Case("a preemptor kept off GPU nodes evicts nothing on a node raygate never saw",
         [], {"node-x": ["a"]}, {}, preemptor=FLOOR_PREEMPTOR),
]

def _meta_body(proposed: dict[str, list[str]], pdb: dict[str, int],
               preemptor: Obj = PREEMPTOR) -> dict[str, Any]:
    return {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb.get(node, 0)}
        for node, uids in proposed.items()}}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_preempt_meta_victims(case: Case, server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, CLUSTER, CLUSTER_2, *case.objects)
    reply = post_json(client, "/scheduler/preempt",
                      _meta_body(case.proposed, case.pdb, case.preemptor))
    assert reply.status_code == 200
    result = reply.json()["NodeNameToMetaVictims"]
    assert {n: [p["UID"] for p in v["Pods"]] for n, v in result.items()} == case.expected
    for node, victims in result.items():
        assert victims["Pods"], "every returned node needs at least one victim"
        assert victims["NumPDBViolations"] == case.pdb.get(node, 0)


def test_preempt_with_full_victims_answers_with_uids(
    server: ServerThread, client: httpx.Client
) -> None:
    """nodeCacheCapable: false sends full Pods; the reply is always the Meta form."""
    objects = [base("b1", cpu="8"), base("b2", node="cpu-1"), over("o1")]
    server.publish(*NODES, CLUSTER, *objects)
    body = {"Pod": PREEMPTOR, "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {"gpu-1": {"Pods": [objects[0]], "NumPDBViolations": 0}}}
    reply = post_json(client, "/scheduler/preempt", body)
    assert reply.json() == {"NodeNameToMetaVictims": {
        "gpu-1": {"Pods": [{"UID": uid("o1")}], "NumPDBViolations": 0}}}


def test_preempt_accepts_null_victims_and_empty_maps(
    server: ServerThread, client: httpx.Client
) -> None:
    server.publish(*NODES, CLUSTER)
    body = {"Pod": PREEMPTOR, "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"gpu-1": None, "gpu-2": {"Pods": [], "NumPDBViolations": 0}}}
    assert post_json(client, "/scheduler/preempt", body).json() == {"NodeNameToMetaVictims": {}}


# ------------------------------------------------------------------- the floor property
def _view(obj: Obj) -> PodView:
    return convert.pod_view(msgspec.convert(obj, kube.Pod))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Obj], dict[str, list[str]], Obj]:
    nodes = ["gpu-1", "gpu-2", "cpu-1"]
    builder = make_raycluster("rc").autoscaling(draw(st.booleans()))
    groups = []
    for g in range(draw(st.integers(1, 3))):
        minimum = draw(st.integers(0, 3))
        replicas = draw(st.integers(minimum, minimum + 3))
        builder = builder.group(f"g{g}", replicas=replicas, min=minimum, max=minimum + 3,
                                hosts=draw(st.sampled_from([None, 1, 2])))
        groups.append(f"g{g}")
    objects: list[Obj] = [builder.obj()]
    if draw(st.booleans()):
        objects.append(make_pod("head").head("rc").requests(cpu="1").on(draw(
            st.sampled_from(nodes))).obj())
    for i in range(draw(st.integers(0, 14))):
        pod = make_pod(f"w{i}").ray("rc", draw(st.sampled_from(groups))).requests(
            cpu=draw(st.sampled_from(["1", "2", "4"]))).priority(draw(st.integers(0, 3)))
        if draw(st.booleans()):
            pod = pod.on(draw(st.sampled_from(nodes)))
        if draw(st.integers(0, 9)) == 0:
            pod = pod.annotate(ANNOTATION_PREEMPTABLE, "false")
        objects.append(pod.obj())
    for i in range(draw(st.integers(0, 3))):
        objects.append(other(f"x{i}", node=draw(st.sampled_from(nodes)), cpu="1"))
    on_node: dict[str, list[str]] = {}
    for obj in objects[1:]:
        node = obj["spec"].get("nodeName")
        if node:
            on_node.setdefault(node, []).append(obj["metadata"]["uid"])
    proposed = {n: draw(st.lists(st.sampled_from(uids), min_size=1, unique=True))
                for n, uids in on_node.items() if draw(st.booleans())}
    # The preemptor: the GPU job, or a pending CPU-only Ray pod of any group (floor or
    # surplus, as the cluster drawn makes it) or the head.
    preemptor = draw(st.one_of(
        st.just(PREEMPTOR),
        st.sampled_from(groups).map(lambda g: make_pod("p").ray("rc", g).requests(cpu="1")
                                    .priority(100).obj()),
        st.just(make_pod("p").head("rc").requests(cpu="1").priority(100).obj())))
    return objects, proposed, preemptor


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_victims_never_take_a_group_below_its_floor(
    case: tuple[list[Obj], dict[str, list[str]], Obj]
) -> None:
    """...and never on a node filter would refuse the preemptor."""
    objects, proposed, preemptor_obj = case
    snap = snapshot_of(*NODES, *objects)
    preemptor = _view(preemptor_obj)
    candidates = []
    for node, uids in proposed.items():
        known = tuple(p for u in uids if (p := snap.pod(u)) is not None)
        candidates.append(Candidate(node, known))
    decision = decide(preemptor, snap, snap.config, T0_EPOCH)
    outcomes = select_victims(preemptor, candidates, snap, decision)
    cluster = snap.raycluster("ray", "rc")
    assert cluster is not None
    evicted: set[str] = set()
    for outcome in outcomes:
        assert outcome.refused == (decision.refusal(bool(snap.is_gpu_node(
            outcome.node_name))) is not None)
        if outcome.dropped:
            assert outcome.victims == []
            continue
        assert outcome.victims, "a kept node has at least one victim"
        pods = [snap.pod(u) for u in outcome.victims]
        for pod in pods:
            assert pod is not None and pod.node_name == outcome.node_name
            assert pod.annotations.get(ANNOTATION_PREEMPTABLE) != "false"
            assert pod.ray_node_type != "head"
        priorities = [p.priority for p in pods if p is not None]
        assert priorities == sorted(priorities, reverse=True)
        evicted.update(outcome.victims)
    # Even if the scheduler evicted every victim of every node, no group goes below its floor.
    for spec in cluster.worker_groups:
        live = [p for p in snap.group_pods(GroupKey("ray", "rc", spec.name))
                if p.deleted is None and not p.terminal]
        remaining = [p for p in live if p.uid not in evicted]
        assert len(remaining) >= min(group_floor(cluster, spec.name), len(live))
