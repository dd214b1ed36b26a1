"""filter and prioritize over real HTTP on loopback: the protocol's cases (names or Node
objects, the reply's fields, unknown nodes, bad pods), both nodeCacheCapable modes; the
rules themselves are tests/policy/test_placement.py's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import pytest

from raygate.contract.errors import BadRequest, MissingField
from raygate.policy.config import GpuNodesForSurplus, PolicyConfig
from raygate.server.fronts.scheduler import RequestPods
from testkit.builders import (
    T0,
    T0_EPOCH,
    Obj,
    PodBuilder,
    make_node,
    make_pod,
    make_raycluster,
    make_resource_slice,
)
from tests.conftest import ServerThread, post_json

NODES = [
    make_node("cpu-1").obj(),
    make_node("cpu-2").obj(),
    make_node("gpu-1").gpus(8).obj(),
    make_node("gpu-2").label("nvidia.com/gpu.present", "true").obj(),
]
NAMES = ["cpu-1", "gpu-1", "cpu-2", "gpu-2", "never-seen"]
GPU = ["gpu-1", "gpu-2"]

# A cluster with a floor group (min 2) and an overflow group (min 0).
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=4, min=0, max=8).obj()


def base(name: str) -> PodBuilder:
    return make_pod(name).ray("rc", "base").requests(cpu="2")


def over(name: str) -> PodBuilder:
    return make_pod(name).ray("rc", "over").requests(cpu="2")


@dataclass
class Case:
    id: str
    pod: Obj
    objects: list[Obj] = field(default_factory=list)
    rejects_gpu: bool = False
    managed: bool = True
    reason: str = ""
    now: float = T0_EPOCH
    config: PolicyConfig | None = None


def preempted_over(at: str, node: str = "gpu-1", reason: str = "PreemptionByScheduler") -> Obj:
    return over("victim").on(node).preempted(at, reason).obj()


# The protocol's own cases, one per kind of answer (unmanaged: every node back, no score;
# refused: the GPU nodes in FailedAndUnresolvableNodes, a node never seen passing; managed
# and passing: integer scores). Which rule gives which answer is tests/policy/test_placement.py's.
CASES = [
    Case("non-ray pod passes everything", make_pod("web", "default").requests(cpu="1").obj(),
         managed=False),
    Case("pending floor worker refuses gpu nodes", base("b1").obj(), [CLUSTER],
         rejects_gpu=True, reason="raygate: floor-avoids-gpu"),
    Case("overflow worker is surplus", over("o1").obj(), [CLUSTER]),
    # The front decides with the policy published with the cluster view.
    Case("policy never", over("o1").obj(), [CLUSTER], rejects_gpu=True,
         config=PolicyConfig(gpu_nodes_for_surplus=GpuNodesForSurplus.NEVER),
         reason="raygate: policy-never"),
    # The front decides at its clock's time (the guard's window ends at T0 + 300 s).
    Case("thrash guard 1s before the end", over("o1").obj(), [CLUSTER, preempted_over(T0)],
         rejects_gpu=True, now=T0_EPOCH + 299, reason="raygate: thrash-guard"),
    Case("thrash guard over at the window's end", over("o1").obj(),
         [CLUSTER, preempted_over(T0)], now=T0_EPOCH + 300),
]


def _filter_body(pod: Obj, names: list[str]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_filter_rules(case: Case, server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, *case.objects, config=case.config)
    server.clock.now = case.now
    reply = post_json(client, "/scheduler/filter", _filter_body(case.pod, NAMES))
    assert reply.status_code == 200
    result = reply.json()
    assert result["Error"] == ""
    assert result["FailedNodes"] == {}
    assert result["Nodes"] is None
    if case.rejects_gpu:
        assert result["NodeNames"] == ["cpu-1", "cpu-2", "never-seen"]
        assert sorted(result["FailedAndUnresolvableNodes"]) == GPU
        for message in result["FailedAndUnresolvableNodes"].values():
            assert message.startswith("raygate: ")
            assert case.reason in message
    else:
        assert result["NodeNames"] == NAMES
        assert result["FailedAndUnresolvableNodes"] == {}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_prioritize_rules(case: Case, server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, *case.objects, config=case.config)
    server.clock.now = case.now
    reply = post_json(client, "/scheduler/prioritize", _filter_body(case.pod, NAMES))
    assert reply.status_code == 200
    if not case.managed:
        assert reply.content == b"[]"
        return
    # Integer scores, in input order, unknown nodes left out (no opinion).
    assert reply.json() == [
        {"Host": "cpu-1", "Score": 10}, {"Host": "gpu-1", "Score": 0},
        {"Host": "cpu-2", "Score": 10}, {"Host": "gpu-2", "Score": 0},
    ]
    assert b'"Score":10' in reply.content and b"10.0" not in reply.content


def test_filter_with_a_nodelist_echoes_passing_nodes_unchanged(
    server: ServerThread, client: httpx.Client
) -> None:
    """nodeCacheCapable: false — Node objects in, the passing ones back byte for byte,
    classified from the request's own Node objects (the cache does not know gpu-9) and the
    DRA devices the cache knows on them (gpu-dra's slice: no Node object says)."""
    server.publish(CLUSTER, make_resource_slice("gpu-dra", "gpu.nvidia.com", 2))
    nodes = [*NODES, make_node("gpu-9").gpus(1).obj(), make_node("gpu-dra").obj()]
    nodes[0]["metadata"]["annotations"] = {"extra": "kept as sent", "nested": '{"a": 1}'}
    body = {"Pod": base("b1").obj(), "Nodes": {"metadata": {}, "items": nodes},
            "NodeNames": None}
    reply = post_json(client, "/scheduler/filter", body)
    result = reply.json()
    assert result["NodeNames"] is None
    assert result["Nodes"]["items"] == [nodes[0], nodes[1]]
    assert sorted(result["FailedAndUnresolvableNodes"]) == ["gpu-1", "gpu-2", "gpu-9",
                                                            "gpu-dra"]
    reply = post_json(client, "/scheduler/prioritize", body)
    assert reply.json() == [
        {"Host": "cpu-1", "Score": 10}, {"Host": "cpu-2", "Score": 10},
        {"Host": "gpu-1", "Score": 0}, {"Host": "gpu-2", "Score": 0},
        {"Host": "gpu-9", "Score": 0}, {"Host": "gpu-dra", "Score": 0},
    ]


def test_filter_with_a_nodelist_for_an_unmanaged_pod_returns_every_node(
    server: ServerThread, client: httpx.Client
) -> None:
    server.publish(CLUSTER)
    body = {"Pod": make_pod("web", "default").obj(),
            "Nodes": {"metadata": {}, "items": NODES}, "NodeNames": None}
    assert post_json(client, "/scheduler/filter", body).json()["Nodes"]["items"] == NODES


def test_neither_names_nor_nodes(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, CLUSTER)
    body = {"Pod": base("b1").obj(), "Nodes": None, "NodeNames": None}
    assert post_json(client, "/scheduler/filter", body).json()["NodeNames"] == []
    assert post_json(client, "/scheduler/prioritize", body).json() == []


def test_keys_match_case_insensitively_like_go(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, CLUSTER)
    body = {"pod": base("b1").obj(), "nodenames": NAMES}  # lower case, "Nodes" absent
    result = post_json(client, "/scheduler/filter", body).json()
    assert sorted(result["FailedAndUnresolvableNodes"]) == GPU
    # Go: a later duplicate in another case wins.
    body = {"NodeNames": ["gpu-1"], "Pod": base("b1").obj(), "nodeNAMES": ["cpu-1"]}
    assert post_json(client, "/scheduler/filter", body).json()["NodeNames"] == ["cpu-1"]


def test_pod_unknown_to_the_cache_is_classified_from_the_request(
    server: ServerThread, client: httpx.Client
) -> None:
    """kube-scheduler sends pods our watch has not delivered yet."""
    server.publish(*NODES, CLUSTER, base("b1").on("cpu-1").obj(), base("b2").on("cpu-2").obj())
    fresh = base("brand-new").uid("00000000-0000-0000-0000-00000000f00d").obj()
    result = post_json(client, "/scheduler/filter", _filter_body(fresh, NAMES)).json()
    assert result["NodeNames"] == NAMES  # the floor is full: surplus, GPU nodes pass


# --- the request's Pod: converted once per distinct text --------------------------------


def pod_text(pod: Obj) -> msgspec.Raw:
    return msgspec.Raw(json.dumps(pod, separators=(",", ":")).encode())


def test_the_same_pod_text_is_converted_once() -> None:
    pods = RequestPods()
    first = pods.view(pod_text(base("w1").obj()))
    assert pods.view(pod_text(base("w1").obj())) is first


def test_a_changed_pod_is_converted_again_whatever_its_uid_and_version() -> None:
    # Equal text, equal view: a pod relabelled under the same uid and resourceVersion (as
    # a careless client might send) is not answered from the first one's view.
    pods = RequestPods()
    first = pods.view(pod_text(base("w1").obj()))
    moved = base("w1").obj()
    moved["metadata"]["labels"]["ray.io/group"] = "over"
    second = pods.view(pod_text(moved))
    assert first.group_key.group == "base"
    assert second.group_key.group == "over"


def test_the_oldest_pod_goes_first_when_full() -> None:
    pods = RequestPods(limit=2)
    a, b, c = (pod_text(base(name).obj()) for name in ("a", "b", "c"))
    view_a = pods.view(a)
    view_b = pods.view(b)
    pods.view(c)
    assert pods.view(b) is view_b
    assert pods.view(a) is not view_a  # converted again: it had been dropped


@pytest.mark.parametrize(("raw", "error", "says"), [
    (msgspec.UNSET, MissingField, "Pod"),
    (msgspec.Raw(b"null"), MissingField, "Pod"),
    (msgspec.Raw(b'"a pod"'), BadRequest, "Expected `object`, got `str` - at `$.Pod`"),
    (msgspec.Raw(b'{"metadata":{"name":7}}'), BadRequest, "at `$.Pod.metadata.name`"),
    (msgspec.Raw(b'{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}'),
     BadRequest, "$.Pod.spec.containers[0].resources.requests.cpu"),
])
def test_a_bad_pod_is_refused_with_its_place_in_the_request(
    raw: msgspec.Raw | msgspec.UnsetType, error: type[Exception], says: str,
) -> None:
    pods = RequestPods()
    with pytest.raises(error) as raised:
        pods.view(raw)
    assert says in str(raised.value)
    assert not pods._views  # nothing kept from a refusal
