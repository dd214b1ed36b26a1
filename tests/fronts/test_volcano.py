"""Volcano's extender verbs over real HTTP on loopback: every trap of the wire format, and
malformed input; the placement rules themselves are tests/policy/test_placement.py's."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from raygate.policy.config import PolicyConfig
from testkit.builders import (
    T0,
    T0_EPOCH,
    Obj,
    PodBuilder,
    make_claim_template,
    make_device_class,
    make_node,
    make_pod,
    make_raycluster,
    make_resource_slice,
)
from testkit.volcano_objects import job_info, node_info, task_info
from tests.conftest import ServerThread, post_json

CPU = make_node("cpu-1").obj()
GPU = make_node("gpu-1").gpus(8).obj()
GPU_BY_LABEL = make_node("gpu-2").label("nvidia.com/gpu.present", "true").obj()
GPU_BY_DRA = make_node("gpu-dra").obj()  # its GPUs are a DRA driver's slice (below)
DRA = (make_resource_slice("gpu-dra", "gpu.nvidia.com", 4),
       make_resource_slice("gpu-dra-new", "gpu.nvidia.com", 4),  # a node not known yet
       make_device_class("gpu.nvidia.com", "gpu.nvidia.com"),
       make_claim_template("one-gpu", "gpu.nvidia.com"))
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=4, min=0, max=8).obj()


def base(name: str) -> PodBuilder:
    return make_pod(name).ray("rc", "base").requests(cpu="2")


def over(name: str) -> PodBuilder:
    return make_pod(name).ray("rc", "over").requests(cpu="2")


@pytest.fixture(autouse=True)
def _cluster(server: ServerThread) -> None:
    server.publish(CPU, GPU, GPU_BY_LABEL, GPU_BY_DRA, *DRA, CLUSTER)


def predicate(client: httpx.Client, pod: Obj, node: Obj, tasks: list[Obj] = ()) -> Any:  # type: ignore[assignment]
    reply = post_json(client, "/volcano/predicate",
                      {"task": task_info(pod), "node": node_info(node, tasks)})
    assert reply.status_code == 200
    return reply.json()


PASS = {"status": "", "code": 0}

# The protocol's own cases: a refusal (code 3, the message in ``status``) and a pass (the
# exact empty answer), for a node the cache knows and for one it classifies from the
# request's own Node object. Which rule refuses which pod is tests/policy/test_placement.py's.
PREDICATE_CASES = [
    ("floor worker on a gpu node", base("b1").obj(), GPU, 3, "raygate: floor-avoids-gpu"),
    ("floor worker on a cpu node", base("b1").obj(), CPU, 0, ""),
    ("non-ray pod on a gpu node", make_pod("web", "default").obj(), GPU, 0, ""),
    ("node unknown to the cache, gpu by its own object", base("b1").obj(),
     make_node("gpu-new").gpus(4).obj(), 3, "floor-avoids-gpu"),
    ("node unknown to the cache, cpu by its own object", base("b1").obj(),
     make_node("cpu-new").obj(), 0, ""),
    # GPUs through DRA (docs/dra.md): the node is a GPU node by its slice, the worker
    # whose claim asks for a GPU is a GPU pod.
    ("floor worker on a DRA gpu node", base("b1").obj(), GPU_BY_DRA, 3, "floor-avoids-gpu"),
    ("node unknown to the cache, gpu by the slice the cache holds", base("b1").obj(),
     make_node("gpu-dra-new").obj(), 3, "floor-avoids-gpu"),
    ("floor worker claiming a gpu on a DRA gpu node",
     base("b1").claim("gpu", template="one-gpu").obj(), GPU_BY_DRA, 0, ""),
]


@pytest.mark.parametrize(("pod", "node", "code", "message"), [c[1:] for c in PREDICATE_CASES],
                         ids=[c[0] for c in PREDICATE_CASES])
def test_predicate(pod: Obj, node: Obj, code: int, message: str, client: httpx.Client) -> None:
    result = predicate(client, pod, node)
    assert result["code"] == code
    assert isinstance(result["status"], str)  # the message, never a number
    if code:
        assert message in result["status"]
        assert result["status"].startswith("raygate: ")
    else:
        assert result == PASS


def test_predicate_thrash_guard_window(server: ServerThread, client: httpx.Client) -> None:
    victim = over("victim").on("gpu-1").preempted(T0).obj()
    server.publish(CPU, GPU, CLUSTER, victim)
    server.clock.now = T0_EPOCH + 299
    result = predicate(client, over("o1").obj(), GPU)
    assert result["code"] == 3 and "raygate: thrash-guard" in result["status"]
    server.clock.now = T0_EPOCH + 300
    assert predicate(client, over("o1").obj(), GPU) == PASS


def test_predicate_reads_a_node_with_100_tasks(client: httpx.Client) -> None:
    tasks = [task_info(make_pod(f"t{i}", "batch").requests(cpu="100m").on("gpu-1").obj())
             for i in range(100)]
    result = predicate(client, base("b1").obj(), GPU, tasks)
    assert result["code"] == 3


def test_predicate_uses_the_tasks_node_name_for_a_pod_bound_in_session(
    server: ServerThread, client: httpx.Client
) -> None:
    """A pod Volcano placed in this session has TaskInfo.NodeName but no spec.nodeName."""
    server.publish(CPU, GPU, CLUSTER, base("b1").on("cpu-1").obj(), base("b2").on("cpu-1").obj())
    pod = base("b3").obj()
    body = {"task": task_info(pod, node_name="gpu-1"), "node": node_info(GPU)}
    assert post_json(client, "/volcano/predicate", body).json() == PASS  # surplus


def prioritize(client: httpx.Client, pod: Obj, nodes: list[Obj]) -> Any:
    reply = post_json(client, "/volcano/prioritize",
                      {"task": task_info(pod), "nodes": [node_info(n) for n in nodes]})
    assert reply.status_code == 200
    return reply.json()


def test_prioritize_scores_floats_scaled(client: httpx.Client) -> None:
    result = prioritize(client, over("o1").obj(), [CPU, GPU, GPU_BY_LABEL])
    assert result == {"nodeScore": {"cpu-1": 500.0, "gpu-1": 0.0, "gpu-2": 0.0},
                      "errorMessage": ""}


def test_prioritize_scale_is_a_setting(server: ServerThread, client: httpx.Client) -> None:
    server.publish(CPU, GPU, CLUSTER, config=PolicyConfig(volcano_score_scale=2.5))
    result = prioritize(client, base("b1").obj(), [CPU, GPU])
    assert result["nodeScore"] == {"cpu-1": 25.0, "gpu-1": 0.0}


@pytest.mark.parametrize("pod", [make_pod("web", "default").obj(),
                                 make_pod("g").ray("rc", "gpu").limits(nvidia_com_gpu="2").obj()])
def test_prioritize_unmanaged_gets_an_empty_map_never_null(pod: Obj, client: httpx.Client) -> None:
    reply = post_json(client, "/volcano/prioritize",
                      {"task": task_info(pod), "nodes": [node_info(CPU), node_info(GPU)]})
    assert reply.content == b'{"nodeScore":{},"errorMessage":""}'


def test_prioritize_with_no_nodes(client: httpx.Client) -> None:
    nodes: list[Obj] | None
    for nodes in ([], None):
        reply = post_json(client, "/volcano/prioritize",
                          {"task": task_info(over("o1").obj()), "nodes": nodes})
        assert reply.json() == {"nodeScore": {}, "errorMessage": ""}


def victims(client: httpx.Client, verb: str, evictor: Obj, evictees: list[Obj]) -> httpx.Response:
    body = json.dumps({"evictor": task_info(evictor), "evictees": evictees})
    reply = client.post(f"/volcano/{verb}", content=body)
    assert reply.status_code == 200
    return reply


TRAINER = make_pod("trainer", "ml").requests(cpu="8", nvidia_com_gpu="4").priority(100).obj()


@pytest.mark.parametrize("verb", ["preemptable", "reclaimable"])
def test_victims_are_echoed_unchanged_floor_removed_gpu_surplus_first(
    verb: str, server: ServerThread, client: httpx.Client
) -> None:
    pods = [base("b1").on("gpu-1").obj(), base("b2").on("cpu-1").obj(),
            over("o-cpu").on("cpu-1").obj(), over("o-gpu").on("gpu-1").obj(),
            make_pod("h").head("rc").on("cpu-1").obj(),
            make_pod("web", "default").on("cpu-1").obj()]
    server.publish(CPU, GPU, CLUSTER, *pods)
    evictees = [task_info(p) for p in pods]
    evictees[2]["FutureVolcanoField"] = {"kept": [1, 2.5, None]}  # unknown keys survive
    reply = victims(client, verb, TRAINER, evictees)
    result = reply.json()
    assert result["status"] == 1
    assert [v["Name"] for v in result["victims"]] == ["o-gpu", "o-cpu", "web"]
    # Every key of each echoed victim, unchanged: Resreq, Pod, Job, NodeName, extras.
    assert result["victims"][1] == evictees[2]
    assert json.dumps(evictees[3]).encode() in reply.content  # byte for byte, as sent


@pytest.mark.parametrize("mark", ["annotate", "label"])  # Volcano reads both
def test_victims_preemptable_false_is_protected(client: httpx.Client, mark: str) -> None:
    keep = getattr(make_pod("keep", "default").on("cpu-1"), mark)("volcano.sh/preemptable",
                                                                   "false")
    reply = victims(client, "preemptable", TRAINER,
                    [task_info(keep.obj()), task_info(make_pod("web", "default").obj())])
    assert [v["Name"] for v in reply.json()["victims"]] == ["web"]


def test_victims_all_protected_is_a_veto(server: ServerThread, client: httpx.Client) -> None:
    floor = [base("b1").on("gpu-1").obj(), base("b2").on("gpu-1").obj()]
    server.publish(CPU, GPU, CLUSTER, *floor)
    reply = victims(client, "preemptable", TRAINER, [task_info(p) for p in floor])
    assert reply.json() == {"status": 1, "victims": []}


# The evictor's predicate agrees with its victims: an evictee on a node the predicate
# refuses the evictor never goes (Volcano's preempt and reclaim run the predicate first;
# this holds when another plugin fails the node before raygate's predicate is asked).
EVICTOR_CASES = [
    ("cpu-only floor worker: nothing on a GPU node", base("b9").priority(1000).obj(),
     ["job-gpu", "web-cpu"], ["web-cpu"]),
    ("cpu-only head: nothing on a GPU node",
     make_pod("h2").head("rc").priority(1000).obj(), ["job-gpu", "web-cpu"], ["web-cpu"]),
    ("surplus worker: GPU nodes allowed", over("o9").priority(1000).obj(),
     ["job-gpu", "web-cpu"], ["job-gpu", "web-cpu"]),
    ("GPU Ray worker: GPU nodes allowed",
     make_pod("g9").ray("rc", "gpu").requests(nvidia_com_gpu="1").priority(1000).obj(),
     ["job-gpu", "web-cpu"], ["job-gpu", "web-cpu"]),
]


@pytest.mark.parametrize("verb", ["preemptable", "reclaimable"])
@pytest.mark.parametrize("case", [c[1:] for c in EVICTOR_CASES],
                         ids=[c[0] for c in EVICTOR_CASES])
def test_victims_never_on_a_node_the_predicate_refuses_the_evictor(
    verb: str, case: tuple[Obj, list[str], list[str]], server: ServerThread,
    client: httpx.Client,
) -> None:
    evictor, offered, kept = case
    pods = {"job-gpu": make_pod("job-gpu", "ml").requests(nvidia_com_gpu="1").on("gpu-1").obj(),
            "web-cpu": make_pod("web-cpu", "ml").on("cpu-1").obj()}
    floor = [base("b1").on("cpu-1").obj()]  # base's floor is 2: one scheduled, b9 pending
    server.publish(CPU, GPU, CLUSTER, *floor, *pods.values(),
                   *[over(f"o{i}").on("cpu-1").obj() for i in range(2)])
    reply = victims(client, verb, evictor, [task_info(pods[name]) for name in offered])
    assert reply.json()["status"] == 1
    assert [v["Name"] for v in reply.json()["victims"]] == kept


def test_victims_never_on_a_node_raygate_does_not_know_for_an_evictor_kept_off_gpus(
    server: ServerThread, client: httpx.Client
) -> None:
    server.publish(CPU, GPU, CLUSTER)
    unknown = make_pod("web", "ml").on("node-x").obj()
    reply = victims(client, "preemptable", base("b9").priority(1000).obj(), [task_info(unknown)])
    assert reply.json() == {"status": 1, "victims": []}
    reply = victims(client, "preemptable", over("o9").priority(1000).obj(), [task_info(unknown)])
    assert [v["Name"] for v in reply.json()["victims"]] == ["web"]


def test_victims_abstain_when_nothing_concerns_raygate(client: httpx.Client) -> None:
    reply = victims(client, "reclaimable", TRAINER,
                    [task_info(make_pod("web", "default").on("cpu-1").obj())])
    assert reply.json() == {"status": 0}


def test_session_hooks_answer_without_parsing(server: ServerThread, client: httpx.Client) -> None:
    # Tens of MB of snapshot, larger than any other route accepts, not even valid JSON.
    body = b'{"Jobs": {' + b"x" * (80 * 1024 * 1024) + b"}"
    reply = client.post("/volcano/onSessionOpen", content=body)
    assert reply.status_code == 200 and reply.content == b"{}"
    reply = client.post("/volcano/onSessionClose", content=b"{}")
    assert reply.status_code == 200 and reply.content == b"{}"


def test_job_enqueueable_abstains(client: httpx.Client) -> None:
    tasks = [task_info(base(f"b{i}").obj()) for i in range(3)]
    reply = post_json(client, "/volcano/jobEnqueueable", {"job": job_info("ray", "ray-rc-pg",
                                                                          tasks=tasks)})
    assert reply.json() == {"status": 0}


GOOD_TASK = task_info(base("b1").obj())
MALFORMED = [
    ("empty", b""),
    ("truncated", json.dumps({"task": GOOD_TASK, "node": node_info(GPU)}).encode()[:-30]),
    ("not json", b"<html/>"),
    ("array", b"[]"),
    ("task missing", json.dumps({"node": node_info(GPU), "nodes": [node_info(GPU)],
                                 "evictees": []}).encode()),
    ("task null", json.dumps({"task": None, "node": node_info(GPU), "evictor": None}).encode()),
    ("task without pod", json.dumps({"task": {**GOOD_TASK, "Pod": None},
                                     "evictor": {**GOOD_TASK, "Pod": None},
                                     "node": node_info(GPU), "nodes": []}).encode()),
    ("wrong type", json.dumps({"task": {**GOOD_TASK, "Status": "Running"},
                               "evictor": {**GOOD_TASK, "Priority": "high"},
                               "node": node_info(GPU), "nodes": [], "evictees": []}).encode()),
]
EXPECTED_ERRORS = {
    "predicate": lambda r: r["code"] == 1 and r["status"].startswith("raygate: "),
    "prioritize": lambda r: r["nodeScore"] == {} and r["errorMessage"].startswith("raygate: "),
    "preemptable": lambda r: r == {"status": -1, "victims": []},
    "reclaimable": lambda r: r == {"status": -1, "victims": []},
}


@pytest.mark.parametrize("verb", list(EXPECTED_ERRORS))
@pytest.mark.parametrize(("name", "body"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_requests_answer_in_the_verbs_own_shape(
    verb: str, name: str, body: bytes, client: httpx.Client
) -> None:
    reply = client.post(f"/volcano/{verb}", content=body)
    assert reply.status_code == 200
    assert EXPECTED_ERRORS[verb](reply.json()), reply.text
    # ... and the server keeps serving.
    assert predicate(client, base("b1").obj(), GPU)["code"] == 3


def test_malformed_job_enqueueable_abstains(client: httpx.Client) -> None:
    assert client.post("/volcano/jobEnqueueable", content=b"{").json() == {"status": 0}
