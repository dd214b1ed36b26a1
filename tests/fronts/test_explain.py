"""`raygate explain` over HTTP, gRPC and the CLI, and a property: the explanation agrees
with what filter and prioritize really answer for the pod."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raygate.cli import main
from raygate.contract.proto.raygate.v1 import explain_pb2 as pb
from raygate.contract.proto.raygate.v1 import explain_pb2_grpc
from testkit.builders import T0, Obj, make_node, make_pod, make_raycluster, object_list
from tests.conftest import ServerThread, post_json

NODES = [make_node("cpu-1").obj(), make_node("gpu-1").gpus(8).obj(),
         make_node("gpu-2").label("nvidia.com/gpu.present", "true").obj()]
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=4, min=0, max=8).obj()
PENDING_FLOOR = make_pod("b1").ray("rc", "base").requests(cpu="2") \
    .condition("PodScheduled", "False", "Unschedulable", "0/3 nodes are available: "
               "3 Insufficient cpu.").obj()


def test_http_explain_of_a_floor_pod(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, CLUSTER, PENDING_FLOOR)
    reply = client.get("/v1/namespaces/ray/pods/b1/explain")
    assert reply.status_code == 200
    body = reply.json()
    assert body["kind"] == "Explanation"
    assert (body["verdict"], body["rule"], body["role"]) == ("avoid-gpu", "floor-avoids-gpu",
                                                              "floor")
    assert body["admissionState"] == "WaitingForCapacity"
    assert [(n["name"], n["nodeClass"], n["passes"], n["score"]) for n in body["nodes"]] == [
        ("cpu-1", "cpu", True, 10), ("gpu-1", "gpu", False, 0), ("gpu-2", "gpu", False, 0)]
    assert body["nodes"][1]["classReason"] == "allocatable nvidia.com/gpu=8"
    assert body["nodes"][2]["classReason"] == "label nvidia.com/gpu.present=true"
    only = client.get("/v1/namespaces/ray/pods/b1/explain", params={"nodes": "gpu-1,new"})
    assert [n["name"] for n in only.json()["nodes"]] == ["new", "gpu-1"]
    assert only.json()["nodes"][0]["nodeClass"] == "unknown"


def test_http_explain_thrash_guard_and_unknown_pod(server: ServerThread,
                                                   client: httpx.Client) -> None:
    victim = make_pod("v").ray("rc", "over").on("gpu-1").preempted(T0).obj()
    server.publish(*NODES, CLUSTER, victim, make_pod("o1").ray("rc", "over").obj())
    body = client.get("/v1/namespaces/ray/pods/o1/explain").json()
    assert body["thrashGuardActive"] is True
    assert body["thrashGuardUntil"] == "2026-11-30T04:05:00Z"
    assert body["rule"] == "thrash-guard"
    reply = client.get("/v1/namespaces/ray/pods/ghost/explain")
    assert reply.status_code == 404
    assert "does not know pod ray/ghost" in reply.json()["error"]["message"]


def test_explain_says_what_the_native_placement_did(server: ServerThread,
                                                   client: httpx.Client) -> None:
    released = make_pod("b2").ray("rc", "base").label("raygate.io/role", "floor") \
        .label("raygate.io/rule", "floor-avoids-gpu").obj()
    gated = make_pod("o2").ray("rc", "over").gated("raygate.io/placement").obj()
    server.publish(*NODES, CLUSTER, PENDING_FLOOR, released, gated)
    said = {name: client.get(f"/v1/namespaces/ray/pods/{name}/explain").json()
            .get("nativePlacement") for name in ("b1", "b2", "o2")}
    assert said["b1"] is None  # created without the gate
    assert said["b2"].startswith("released from raygate's gate as floor by rule "
                                 "floor-avoids-gpu, once for its life")
    assert said["o2"].startswith("held by raygate's scheduling gate raygate.io/placement")
    with grpc.insecure_channel(f"127.0.0.1:{server.server.grpc_port}") as channel:
        stub = explain_pb2_grpc.ExplainStub(channel)
        reply = stub.Explain(pb.ExplainRequest(namespace="ray", name="b2"), timeout=10)
        assert reply.native_placement == said["b2"]


def test_http_explain_of_a_posted_pod(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, CLUSTER)
    reply = post_json(client, "/v1/explain", {"pod": PENDING_FLOOR, "nodeNames": ["gpu-2"]})
    body = reply.json()
    assert body["pod"] == "ray/b1" and [n["passes"] for n in body["nodes"]] == [False]
    assert client.post("/v1/explain", content=b"{").status_code == 400
    assert post_json(client, "/v1/explain", {"nodeNames": []}).status_code == 400


def test_grpc_explain(server: ServerThread) -> None:
    server.publish(*NODES, CLUSTER, PENDING_FLOOR)
    with grpc.insecure_channel(f"127.0.0.1:{server.server.grpc_port}") as channel:
        stub = explain_pb2_grpc.ExplainStub(channel)
        reply = stub.Explain(pb.ExplainRequest(namespace="ray", name="b1"), timeout=10)
        assert reply.rule == "floor-avoids-gpu" and reply.admission_state == "WaitingForCapacity"
        assert [(n.name, n.passes, n.score) for n in reply.nodes] == [
            ("cpu-1", True, 10), ("gpu-1", False, 0), ("gpu-2", False, 0)]
        with pytest.raises(grpc.RpcError) as err:
            stub.Explain(pb.ExplainRequest(namespace="ray", name="ghost"), timeout=10)
        assert err.value.code() is grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as err:
            stub.Explain(pb.ExplainRequest(namespace="ray"), timeout=10)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_cli_explain_against_a_server_and_offline(
    server: ServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.publish(*NODES, CLUSTER, PENDING_FLOOR)
    assert main(["explain", "ray/b1", "--server", server.url]) == 0
    table = capsys.readouterr().out
    assert "pod ray/b1: avoid-gpu (floor-avoids-gpu), role floor" in table
    assert "admission: WaitingForCapacity" in table
    assert table.index("cpu-1") < table.index("gpu-1")  # the best node first
    grpc_url = f"grpc://127.0.0.1:{server.server.grpc_port}"
    assert main(["explain", "ray/b1", "--server", grpc_url, "--output", "json"]) == 0
    from_grpc = json.loads(capsys.readouterr().out)
    assert main(["explain", "ray/b1", "--server", server.url, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == from_grpc  # both transports agree
    for url in (server.url, grpc_url):
        assert main(["explain", "ray/b1", "--server", url, "--nodes", "gpu-2,cpu-1",
                     "--output", "json"]) == 0
        assert [n["name"] for n in json.loads(capsys.readouterr().out)["nodes"]] == [
            "cpu-1", "gpu-2"]
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(json.dumps(object_list(*NODES, CLUSTER, PENDING_FLOOR)))
    assert main(["explain", "ray/b1", "--snapshot", str(snapshot), "--output", "json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    assert offline["nodes"] == from_grpc["nodes"]
    assert main(["explain", "ray/ghost", "--server", server.url]) == 1
    assert "does not know pod ray/ghost" in capsys.readouterr().err
    assert main(["explain", "b1", "--demo"]) == 2


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Obj], Obj]:
    nodes = [make_node(f"n{i}").obj() if draw(st.booleans()) else
             make_node(f"n{i}").gpus(draw(st.integers(1, 8))).obj() for i in range(4)]
    autoscaling = draw(st.booleans())
    low = draw(st.integers(0, 2))
    cluster = make_raycluster("rc").autoscaling(autoscaling).group(
        "g", replicas=low + draw(st.integers(0, 2)), min=low, max=low + 3).obj()
    pods: list[Obj] = []
    for i in range(draw(st.integers(0, 5))):
        pod = make_pod(f"w{i}").ray("rc", "g").requests(cpu="1")
        if draw(st.booleans()):
            pod = pod.on(draw(st.sampled_from([n["metadata"]["name"] for n in nodes])))
        if draw(st.integers(0, 3)) == 0:
            pod = pod.on("n0").preempted(T0)
        pods.append(pod.obj())
    kind = draw(st.sampled_from(["worker", "head", "gpu", "other"]))
    subject = {
        "worker": make_pod("subject").ray("rc", "g").requests(cpu="1"),
        "head": make_pod("subject").head("rc"),
        "gpu": make_pod("subject").ray("rc", "g").requests(nvidia_com_gpu="1"),
        "other": make_pod("subject", "default"),
    }[kind].obj()
    return [*nodes, cluster, *pods, subject], subject


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=clusters())
def test_explain_agrees_with_filter_and_prioritize(
    case: tuple[list[Obj], Obj], server: ServerThread, client: httpx.Client
) -> None:
    objects, subject = case
    server.publish(*objects)
    names = ["n0", "n1", "n2", "n3", "unknown"]
    body = {"Pod": subject, "Nodes": None, "NodeNames": names}
    filtered = post_json(client, "/scheduler/filter", body).json()
    scores = {e["Host"]: e["Score"] for e in post_json(client, "/scheduler/prioritize",
                                                       body).json()}
    namespace, name = subject["metadata"]["namespace"], subject["metadata"]["name"]
    explained = client.get(f"/v1/namespaces/{namespace}/pods/{name}/explain",
                           params={"nodes": ",".join(names)}).json()
    nodes = {n["name"]: n for n in explained["nodes"]}
    assert {n for n in names if nodes[n]["passes"]} == set(filtered["NodeNames"])
    assert {n for n in names if not nodes[n]["passes"]} == set(
        filtered["FailedAndUnresolvableNodes"])
    assert {n: s["score"] for n, s in nodes.items() if s["score"] is not None} == scores
    # preempt keeps no node filter refuses (every node offered, each with a plain victim),
    # nor, for a pod kept off GPU nodes, one raygate does not know.
    victim = make_pod("victim", "default").obj()
    body = {"Pod": subject, "NodeNameToMetaVictims": None, "NodeNameToVictims": {
        n: {"Pods": [{**victim, "spec": {**victim["spec"], "nodeName": n}}],
            "NumPDBViolations": 0} for n in names}}
    preempted = post_json(client, "/scheduler/preempt", body).json()["NodeNameToMetaVictims"]
    refuses = explained["verdict"] == "avoid-gpu"
    assert set(preempted) == {n for n in names if nodes[n]["passes"]
                              and not (refuses and nodes[n]["nodeClass"] == "unknown")}
