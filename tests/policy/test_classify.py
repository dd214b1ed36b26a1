from __future__ import annotations

import msgspec
import pytest

from raygate.policy.classify import (
    LABEL_ROLE,
    gpu_node_reason,
    gpu_pod_resources,
    group_floor,
    group_roles,
    pod_requests,
    pod_role,
)
from raygate.policy.config import PolicyConfig
from raygate.policy.model import NodeView, PodView, Role
from raygate.server.cache import convert
from raygate.server.wire import kube
from testkit.builders import Obj, make_node, make_pod, make_raycluster
from tests.conftest import snapshot_of

CONFIG = PolicyConfig()


def node(obj: Obj) -> NodeView:
    return convert.node_view(msgspec.convert(obj, kube.Node))


def pod(obj: Obj) -> PodView:
    return convert.pod_view(msgspec.convert(obj, kube.Pod))


NODES = [
    ("cpu node", make_node("n").obj(), None),
    ("nvidia allocatable", make_node("n").gpus(8).obj(), "allocatable nvidia.com/gpu=8"),
    ("zero gpus is a CPU node", make_node("n").gpus(0).obj(), None),
    ("amd allocatable", make_node("n").gpus(2, "amd.com/gpu").obj(), "allocatable amd.com/gpu=2"),
    ("tpu allocatable", make_node("n").gpus(4, "google.com/tpu").obj(),
     "allocatable google.com/tpu=4"),
    ("gpu operator label", make_node("n").label("nvidia.com/gpu.present", "true").obj(),
     "label nvidia.com/gpu.present=true"),
    ("label false", make_node("n").label("nvidia.com/gpu.present", "false").obj(), None),
]


@pytest.mark.parametrize(("obj", "reason"), [c[1:] for c in NODES], ids=[c[0] for c in NODES])
def test_gpu_node(obj: Obj, reason: str | None) -> None:
    assert gpu_node_reason(node(obj), CONFIG) == reason


def test_gpu_node_resources_and_labels_are_configurable() -> None:
    config = PolicyConfig(gpu_resources=("example.com/accel",), gpu_node_labels={"accel": "yes"})
    assert gpu_node_reason(node(make_node("n").gpus(8).obj()), config) is None
    assert gpu_node_reason(node(make_node("n").gpus(1, "example.com/accel").obj()), config)
    assert gpu_node_reason(node(make_node("n").label("accel", "yes").obj()), config)


PODS = [
    ("cpu only", make_pod("p").requests(cpu="2").obj(), ()),
    ("gpu request", make_pod("p").requests(nvidia_com_gpu="1").obj(), ("nvidia.com/gpu",)),
    ("gpu limit only", make_pod("p").limits(nvidia_com_gpu="1").obj(), ("nvidia.com/gpu",)),
    ("gpu init container", make_pod("p").init_requests(nvidia_com_gpu="1").obj(),
     ("nvidia.com/gpu",)),
    ("zero gpus", make_pod("p").requests(nvidia_com_gpu="0").obj(), ()),
]


@pytest.mark.parametrize(("obj", "found"), [c[1:] for c in PODS], ids=[c[0] for c in PODS])
def test_gpu_pod(obj: Obj, found: tuple[str, ...]) -> None:
    assert gpu_pod_resources(pod(obj), CONFIG.gpu_resources) == found


def test_pod_requests_follow_the_scheduler() -> None:
    p = pod(make_pod("p").requests(cpu="2", memory="1Gi")
            .init_requests(cpu="3").init_requests(sidecar=True, cpu="500m").obj())
    # app 2 + sidecar 0.5 = 2.5 vs the plain init container's 3: 3 wins; pods counts 1.
    assert pod_requests(p) == {"cpu": 3000, "memory": 2**30 * 1000, "pods": 1000}


FLOORS = [
    ("autoscaling uses minReplicas", make_raycluster("c").autoscaling().group(
        "g", replicas=5, min=2, max=8), "g", 2),
    ("autoscaling with hosts", make_raycluster("c").autoscaling().group(
        "g", replicas=5, min=2, max=8, hosts=4), "g", 8),
    ("no autoscaling uses replicas", make_raycluster("c").group("g", replicas=5, min=2, max=8),
     "g", 5),
    ("replicas clamped to max", make_raycluster("c").group("g", replicas=9, min=0, max=3), "g", 3),
    ("replicas clamped to min", make_raycluster("c").group("g", replicas=1, min=2, max=3), "g", 2),
    ("replicas unset is min", make_raycluster("c").group("g", min=2, max=3), "g", 2),
    ("overflow group has no floor", make_raycluster("c").autoscaling().group(
        "g", replicas=3, min=0, max=8), "g", 0),
    ("unknown group", make_raycluster("c").group("g", replicas=1), "other", 0),
    ("head", make_raycluster("c"), "headgroup", 1),
]


@pytest.mark.parametrize(("builder", "group", "floor"), [c[1:] for c in FLOORS],
                         ids=[c[0] for c in FLOORS])
def test_group_floor(builder: object, group: str, floor: int) -> None:
    obj = builder.obj()  # type: ignore[attr-defined]
    cluster = convert.raycluster_view(msgspec.convert(obj, kube.RayCluster))
    assert group_floor(cluster, group) == floor


def test_suspended_group_has_no_floor() -> None:
    obj = make_raycluster("c").group("g", replicas=2, min=2).obj()
    obj["spec"]["workerGroupSpecs"][0]["suspend"] = True
    cluster = convert.raycluster_view(msgspec.convert(obj, kube.RayCluster))
    assert group_floor(cluster, "g") == 0


def test_surplus_is_on_gpu_nodes_first_then_pending_then_youngest() -> None:
    pods = [
        pod(make_pod("old-cpu").ray("c", "g").on("cpu").created("2026-11-30T01:00:00Z").obj()),
        pod(make_pod("young-cpu").ray("c", "g").on("cpu").created("2026-11-30T03:00:00Z").obj()),
        pod(make_pod("old-gpu").ray("c", "g").on("gpu").created("2026-11-30T00:00:00Z").obj()),
        pod(make_pod("pending").ray("c", "g").created("2026-11-30T00:30:00Z").obj()),
        pod(make_pod("gone").ray("c", "g").on("cpu").terminating().obj()),
    ]
    roles = group_roles(pods, floor=1, is_gpu_node={"gpu": True, "cpu": False})
    by_name = {p.name: roles.get(p.uid) for p in pods}
    assert by_name == {"old-gpu": Role.SURPLUS, "pending": Role.SURPLUS,
                       "young-cpu": Role.SURPLUS, "old-cpu": Role.FLOOR, "gone": None}
    roles = group_roles(pods, floor=3, is_gpu_node={"gpu": True, "cpu": False})
    assert [p.name for p in pods if roles.get(p.uid) is Role.SURPLUS] == ["old-gpu"]


WRITTEN = [  # (name, on node, written role) -> role, group floor 2
    ("floors written, all kept", [("a", "gpu", "floor"), ("b", "cpu", "floor"),
                                  ("c", "cpu", None)],
     {"a": "floor", "b": "floor", "c": "surplus"}),
    ("surplus written, kept on a CPU node", [("a", "cpu", "surplus"), ("b", "cpu", "floor"),
                                             ("c", "", None)],
     {"a": "surplus", "b": "floor", "c": "floor"}),
    ("a floor gone: the written surplus that hurts most to lose tops the count up",
     [("old", "cpu", "surplus"), ("young", "cpu", "surplus"), ("f", "cpu", "floor")],
     {"young": "surplus", "old": "floor", "f": "floor"}),
    ("a value raygate does not write is derived", [("a", "cpu", "boss"), ("b", "cpu", None),
                                                   ("c", "gpu", None)],
     {"a": "floor", "b": "floor", "c": "surplus"}),
]


@pytest.mark.parametrize(("pods", "expected"), [c[1:] for c in WRITTEN],
                         ids=[c[0] for c in WRITTEN])
def test_group_roles_keep_the_role_written_into_each_pod(
        pods: list[tuple[str, str, str | None]], expected: dict[str, str]) -> None:
    views = []
    for i, (name, node, role) in enumerate(pods):
        builder = make_pod(name).ray("c", "g").created(f"2026-11-30T0{i}:00:00Z")
        builder = builder.on(node) if node else builder
        views.append(pod((builder.label(LABEL_ROLE, role) if role else builder).obj()))
    roles = group_roles(views, floor=2, is_gpu_node={"gpu": True, "cpu": False})
    assert {p.name: roles[p.uid].value for p in views} == expected


def test_a_pending_pod_reads_its_written_role_not_the_count() -> None:
    cluster = make_raycluster("c").group("g", replicas=3, min=2, max=3).obj()
    surplus = make_pod("s").ray("c", "g").label(LABEL_ROLE, "surplus").obj()
    view = snapshot_of(cluster, surplus)  # nothing scheduled: the count would say floor
    verdict = pod_role(view.pod(surplus["metadata"]["uid"]), view)  # type: ignore[arg-type]
    assert verdict.role is Role.SURPLUS and LABEL_ROLE in verdict.reason


def test_snapshot_counts_only_live_bound_pods_as_scheduled() -> None:
    snap = snapshot_of(
        make_raycluster("c").group("g", replicas=3, min=3).obj(),
        make_pod("a").ray("c", "g").on("n1").obj(),
        make_pod("b").ray("c", "g").on("n1").terminating().obj(),
        make_pod("d").ray("c", "g").on("n1").phase("Failed").obj(),
        make_pod("e").ray("c", "g").obj(),
    )
    assert snap.scheduled_count(pod(make_pod("a").ray("c", "g").obj()).group_key) == 1


def test_snapshot_indexes_for_the_admission_status() -> None:
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "raycluster-c", "namespace": "ray", "ownerReferences": [
                    {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "c", "uid": "u",
                     "controller": True}]}}
    podgroup = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "ray-c-pg", "namespace": "ray"},
                "status": {"phase": "Inqueue"}}
    snap = snapshot_of(
        make_raycluster("c").group("g", replicas=1).obj(), workload, podgroup,
        make_pod("h").head("c").obj(), make_pod("w").ray("c", "g").obj(),
        make_pod("x").ray("other", "g").obj(),
    )
    assert [r.name for r in snap.rayclusters()] == ["c"]
    assert sorted(p.name for p in snap.cluster_pods("ray", "c")) == ["h", "w"]
    assert [w.name for w in snap.workloads_of("ray", "c")] == ["raycluster-c"]
    pg = snap.podgroup("ray", "ray-c-pg")
    assert pg is not None
    assert pg.phase == "Inqueue"
    assert snap.podgroup("ray", "nope") is None
