"""raygate's scale gates (docs/scale-gates.md) on the real API server, KubeRay 1.6.1 with the
testbed's stand-in ``scaleGate`` (``testbed.kuberay_standin``, keyed by ``type``) and
kube-scheduler, with no node autoscaler: an all-or-nothing scale-up of four 2-CPU workers on
a node with room for one is held at raygate's gate, and raygate writes
``raygate.io/scale-up-cannot-fit`` into the group by JSON Patch; a Kueue-style gate the
test wrote first (under field manager ``kueue``) stays through every write and removal. A
node with room comes: the scale-up is released and raygate removes its gate. raygate
stopped: a gate of its prefix added behind its back and its own removed stay as they are;
raygate started again (the next leader) corrects both.

The cause is the simplest verdict of raygate's this testbed triggers without a node
autoscaler (``NoNodeComing`` needs Karpenter's or Cluster Autoscaler's word).

Second, ``raygate.io/only-gpu-room`` under native placement, as raygate is installed: a
floor worker tolerating the GPU taint is created with raygate's required not-GPU term, the
CPU node is full, a GPU node has room; kube-scheduler says the GPU node "didn't match Pod's
node affinity/selector" (never asking the extender), and raygate gates the group from its
own fit of the pod on the nodes. A CPU node with room comes: the pod runs there, the gate
goes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.lagging import metric
from e2e.objects import HEAD_NODE, SCENARIO_LABEL, TOLERATE_GPU, Group, node, raycluster
from e2e.policy import policy_changed
from e2e.scenario import Scenario, wait_until
from raygate.policy.scale_up import ALL_OR_NOTHING, ANNOTATION
from testbed.cluster import Testbed
from testbed.kuberay_standin import GATE_KEY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLUSTER = "gated"
CANNOT_FIT = "raygate.io/scale-up-cannot-fit"
KUEUE = "kueue.k8s.io/quota-exceeded"
STALE = "raygate.io/no-node-coming"
ONLY_GPU_ROOM = "raygate.io/only-gpu-room"
NOT_GPU = [{"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]


@pytest.fixture
def no_node_autoscaler(testbed: Testbed) -> Iterator[None]:
    """``absent``: a suite that ran the Karpenter scenarios first leaves its CRDs served."""
    with policy_changed(testbed, no_autoscaler):
        yield


def no_autoscaler(policy: dict[str, object]) -> None:
    policy.update(nodeAutoscaler="absent")


def path(scenario: Scenario) -> str:
    return f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{CLUSTER}"


def gates(scenario: Scenario) -> list[str]:
    group = scenario.api.get(path(scenario))["spec"]["workerGroupSpecs"][0]
    return [e[GATE_KEY] for e in group.get("scaleStrategy", {}).get("scaleGate", [])]


def gated_as(scenario: Scenario, want: set[str], timeout: float = 30) -> float:
    """Wait until the group's gates are ``want``; the seconds it took."""
    start = scenario.now()
    wait_until(f"scale gates {sorted(want)}", lambda: set(gates(scenario)) == want or None,
               timeout=timeout)
    return scenario.now() - start


def kueue_gate(scenario: Scenario) -> None:
    """Kueue's gate, as Kueue would write it: server-side apply is refused on the atomic
    list, so a JSON Patch under its own field manager."""
    scenario.api.request("PATCH", path(scenario), [
        {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "overflow"},
        {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
         "value": {"scaleGate": [{GATE_KEY: KUEUE}]}}],
        "application/json-patch+json", query=[("fieldManager", "kueue")])


def behind_its_back(scenario: Scenario) -> None:
    """While raygate is down: its own gate removed, another of its prefix added."""
    index = gates(scenario).index(CANNOT_FIT)
    scenario.api.json_patch(path(scenario), [
        {"op": "remove", "path": f"/spec/workerGroupSpecs/0/scaleStrategy/scaleGate/{index}"},
        {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy/scaleGate/-",
         "value": {GATE_KEY: STALE}}])


def bring_up(scenario: Scenario) -> None:
    scenario.setup([node(f"{scenario.name}-a", scenario.name, cpu=3)])
    body = raycluster(CLUSTER, scenario.namespace, scenario.name,
                      [Group("overflow", 0, "2", max=4)], head_cpu="1")
    body["metadata"]["annotations"] = {ANNOTATION: ALL_OR_NOTHING}
    scenario.create(body)
    wait_until("the head running", lambda: scenario.running("headgroup") or None, timeout=90)
    kueue_gate(scenario)


def test_raygate_gates_a_group_that_cannot_fit_and_keeps_others_gates(
        testbed: Testbed, scenario: Scenario, no_node_autoscaler: None) -> None:
    bring_up(scenario)
    writes = metric(testbed.raygate_url, "raygate_scale_gate_writes_total", outcome="written")
    scenario.scale(CLUSTER, "overflow", 4)
    added = gated_as(scenario, {KUEUE, CANNOT_FIT}, timeout=60)
    assert metric(testbed.raygate_url, "raygate_scale_gates",
                  reason="scale-up-cannot-fit") == 1
    testbed.kill_raygate()
    scenario.step("raygate killed")
    behind_its_back(scenario)
    assert set(gates(scenario)) == {KUEUE, STALE}
    testbed.start_raygate()  # with the shipped config again: the policy set anew
    restarted = scenario.now()
    with policy_changed(testbed, no_autoscaler):
        scenario.step("raygate started again")
        gated_as(scenario, {KUEUE, CANNOT_FIT}, timeout=60)
        corrected = scenario.now() - restarted
        scenario.add_node(node(f"{scenario.name}-b", scenario.name, cpu=16))
        scenario.step("a node with room")
        removed = gated_as(scenario, {KUEUE}, timeout=60)
        wait_until("the four workers running", lambda: len(scenario.running("overflow")) == 4
                   or None, timeout=90)
        written = metric(testbed.raygate_url, "raygate_scale_gate_writes_total",
                         outcome="written")
    report.add("scale-gates-writer", (
        "### Scale gates: raygate's beside Kueue's\n\n"
        f"An all-or-nothing scale-up of four 2-CPU workers on a node with room for one, no "
        f"node autoscaler: raygate wrote `{CANNOT_FIT}` into the group {added:.1f} s after "
        f"the scale-up (JSON Patch, field manager raygate), beside `{KUEUE}` written first "
        f"under manager kueue. raygate killed; its gate removed and `{STALE}` added behind "
        f"its back; started again, it put both right in {corrected:.1f} s. A 16-CPU node "
        f"came: the scale-up was released and raygate removed its gate in {removed:.1f} s. "
        f"Kueue's gate stayed throughout. Writes since the restart: {written:g} "
        f"(before it: {writes:g}).\n"))


def scheduler_said(pod: dict[str, Any]) -> str:
    return next((str(c.get("message", "")) for c in pod["status"].get("conditions") or []
                 if c["type"] == "PodScheduled"), "")


def test_raygate_gates_a_cpu_group_whose_only_room_is_on_a_gpu_node(
        testbed: Testbed, scenario: Scenario, no_node_autoscaler: None) -> None:
    name = scenario.name
    # The head alone on a 1-CPU node of its own; the GPU node (8 CPU, the GPU taint) is
    # the only room for the 2-CPU floor worker, which tolerates the taint.
    scenario.setup([node(f"{name}-head", name, cpu=1, labels=HEAD_NODE),
                    node(f"{name}-gpu", name, cpu=8, gpus=1)])
    body = raycluster(CLUSTER, scenario.namespace, name, [Group(
        "floor", 1, "2", min=1, max=1, pod_spec={"tolerations": [TOLERATE_GPU]})],
        head_cpu="1", head_pod_spec={"nodeSelector": {SCENARIO_LABEL: name, **HEAD_NODE}},
        autoscaling=False)
    scenario.create(body)
    added = gated_as(scenario, {ONLY_GPU_ROOM}, timeout=60)
    [pod] = scenario.group_pods("floor")
    required = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    said = scheduler_said(pod)
    assert required == [{"matchExpressions": NOT_GPU}] and not pod["spec"].get("nodeName")
    assert "didn't match Pod's node affinity/selector" in said, said
    assert "raygate:" not in said, said  # kube-scheduler never asked the extender of it
    scenario.add_node(node(f"{name}-cpu", name, cpu=4))
    scenario.step("a CPU node with room")
    removed = gated_as(scenario, set(), timeout=60)
    wait_until("the floor worker running on the CPU node", lambda: [
        p for p in scenario.running("floor") if p["spec"]["nodeName"] == f"{name}-cpu"]
        or None, timeout=60)
    report.add("scale-gates-only-gpu-room", (
        "### Scale gates: only GPU nodes have room (native placement)\n\n"
        f"A floor worker tolerating the GPU taint, created with raygate's required not-GPU "
        f"term; the CPU node full, a GPU node with room. kube-scheduler said: \"{said}\" "
        f"(no word of raygate's: it never asked the extender of the GPU node). raygate "
        f"wrote `{ONLY_GPU_ROOM}` {added:.1f} s after the RayCluster was created, from its "
        f"own fit of the pod on the nodes. A 4-CPU node came: the worker ran there and "
        f"raygate removed its gate in {removed:.1f} s.\n"))
