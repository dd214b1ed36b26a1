"""GPUs through Dynamic Resource Allocation, on the real kube-scheduler (whose
``DynamicResources`` plugin allocates the devices) and kube-controller-manager (whose
resource claim controller makes a pod's claims from its templates).

A DRA GPU driver publishes each GPU node's devices as a ResourceSlice; the node has no
``nvidia.com/gpu`` allocatable and, here, no GPU label (the driver alone, without GPU
feature discovery). The DeviceClass ``gpu.nvidia.com`` is the one NVIDIA's driver ships,
with ``extendedResourceName: nvidia.com/gpu`` so a pod may still ask for
``nvidia.com/gpu: 1`` (DRAExtendedResource, GA in 1.37). No kubelet plugin runs: kwok runs
the pods once the scheduler has allocated their claims.

1. The seed's placement on a DRA GPU node, with a floor GPU worker group whose GPU comes
   through a claim template: head and floor on CPU nodes, the GPU worker on the GPU node
   (never refused it), overflow there only once CPU is full.
2. The baseline: the same with raygate's DRA recognition off by policy (no GPU driver,
   ``nvidia.com/gpu`` no GPU resource, so the DeviceClass backing it is no GPU class):
   raygate sees only CPU nodes, as before it read slices, and the floor lands on the GPU
   node.
3. A GPU job asking for its 4 GPUs through a claim, and one through the mapped extended
   resource, preempting on the DRA GPU node: overflow workers only, the floor untouched.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e import report
from e2e.lagging import node_class
from e2e.objects import (
    TOLERATE_GPU,
    Group,
    dra_gpu_node,
    node,
    raycluster,
    tolerating_gpu_groups,
)
from e2e.policy import policy_changed
from e2e.scenario import Scenario, wait_until
from e2e.test_placement import kinds, overflow_to_four
from e2e.test_preemption import priority_class
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
             "extendedResourceName": "nvidia.com/gpu"}}


@pytest.fixture(scope="module", autouse=True)
def device_class(testbed: Testbed) -> Iterator[None]:
    """The driver's DeviceClass, for this module's scenarios only (the others keep
    testing GPUs from the device plugin)."""
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(DEVICE_CLASS))
    yield
    testbed.kubectl("delete", "deviceclass", DRIVER, "--ignore-not-found")


def claim_template(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": gpus}}]}}}}


def claiming(template: str) -> dict[str, Any]:
    """A pod spec's part that gets a GPU through a claim made from ``template``."""
    return {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}


def explain(testbed: Testbed, token: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{testbed.raygate_url}{path}",
                                     headers={"Authorization": f"Bearer {token}"})
    reply: dict[str, Any] = json.load(urllib.request.urlopen(request, timeout=10))
    return reply


def bring_up(scenario: Scenario, testbed: Testbed, token: str, expect_class: str) -> None:
    """Two CPU nodes (8 CPU), a DRA GPU node (32 CPU, 4 GPUs); a RayCluster of a head,
    ``baseline`` (2, the floor), ``gpu`` (1, a floor worker with a claimed GPU) and
    ``overflow`` scaled to 4 once they run: the CPU nodes hold head, floor and one
    overflow worker."""
    name = scenario.name
    gpu_node, slice_ = dra_gpu_node(f"{name}-gpu-a", name, cpu=32, gpus=4)
    scenario.setup([node(f"{name}-cpu-a", name, cpu=8), node(f"{name}-cpu-b", name, cpu=8),
                    gpu_node])
    scenario.create(slice_)
    wait_until(f"raygate classes the DRA node {expect_class}", lambda: node_class(
        testbed.raygate_url, gpu_node["metadata"]["name"], token) == expect_class, timeout=60)
    scenario.create(claim_template("one-gpu", scenario.namespace, 1))
    groups = [*tolerating_gpu_groups(baseline=2, overflow=0),
              Group("gpu", 1, "4", min=1, max=1,
                    pod_spec={"tolerations": [TOLERATE_GPU], **claiming("one-gpu")})]
    scenario.create(raycluster("mixed", scenario.namespace, name, groups))
    wait_until("the head, the floor and the GPU worker running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("baseline")) == 2
               and len(scenario.running("gpu")) == 1, timeout=120)
    scenario.step("head, floor and GPU worker running")
    overflow_to_four(scenario, "mixed")


def test_dra_floor_and_head_stay_on_cpu_nodes_and_the_claimed_gpu_worker_gets_the_gpu_node(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    bring_up(scenario, testbed, reader_token, "gpu")
    assert kinds(scenario, "headgroup") == ["CPU"]
    assert kinds(scenario, "baseline") == ["CPU", "CPU"]
    assert kinds(scenario, "gpu") == ["GPU"]
    assert kinds(scenario, "overflow") == ["CPU", "GPU", "GPU", "GPU"]
    worker = scenario.running("gpu")[0]
    explained = explain(testbed, reader_token, f"/v1/namespaces/{scenario.namespace}/pods/"
                        f"{worker['metadata']['name']}/explain")
    assert explained["verdict"] == "unmanaged", explained
    assert "asks for GPU device class gpu.nvidia.com" in explained["reason"], explained
    # Bound where its GPU is, and a GPU pod to raygate: no rule of raygate's refuses it a
    # GPU node, in any cycle.
    report.add("dra-1-raygate", scenario.timeline(
        "GPUs through DRA, with raygate: the GPU node's GPUs are a ResourceSlice (no "
        "allocatable, no GPU label); the gpu group's worker claims one"))


@pytest.fixture
def no_dra_recognition(testbed: Testbed) -> Iterator[None]:
    """raygate's policy without what makes DRA GPUs GPUs, for one scenario."""
    def change(policy: dict[str, Any]) -> None:
        policy["gpuDrivers"] = []
        policy["gpuResources"] = [r for r in policy.get("gpuResources", ["nvidia.com/gpu"])
                                  if r != "nvidia.com/gpu"] or ["amd.com/gpu"]

    with policy_changed(testbed, change):
        yield


def test_dra_baseline_without_raygates_dra_recognition_the_floor_lands_on_the_gpu_node(
        scenario: Scenario, testbed: Testbed, reader_token: str,
        no_dra_recognition: None) -> None:
    bring_up(scenario, testbed, reader_token, "cpu")
    floor = kinds(scenario, "headgroup") + kinds(scenario, "baseline")
    assert "GPU" in floor, f"expected the DRA GPU node to take floor pods: {floor}"
    report.add("dra-2-baseline", scenario.timeline(
        "The same, raygate's DRA recognition off by policy: raygate sees three CPU nodes, "
        "and the big empty GPU node takes floor pods"))


def gpu_job(scenario: Scenario, how: str, priority: str) -> dict[str, Any]:
    """A training pod (not a Ray pod) that needs the 4 GPUs and 12 CPU: its GPUs through a
    claim, or through ``nvidia.com/gpu`` that the DeviceClass maps to DRA."""
    resources: dict[str, str] = {"cpu": "12", "memory": "8Gi"}
    spec: dict[str, Any] = {}
    if how == "claim":
        spec = claiming("four-gpus")
        scenario.create(claim_template("four-gpus", scenario.namespace, 4))
    else:
        resources["nvidia.com/gpu"] = "4"
    container: dict[str, Any] = {"name": "train", "image": "example.invalid/train:1",
                                 "resources": {"requests": resources, "limits": resources}}
    if how == "claim":
        container["resources"]["claims"] = [{"name": "gpu"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train", "namespace": scenario.namespace,
                         "labels": {"app": "train"}},
            "spec": {"schedulerName": "ray-scheduler", "priorityClassName": priority,
                     "nodeSelector": {"testbed.raygate.dev/scenario": scenario.name},
                     "tolerations": [TOLERATE_GPU], "containers": [container], **spec}}


def test_dra_gpu_job_by_claim_preempts_overflow_only(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    gpu_job_preempts(scenario, testbed, reader_token, "claim")


def test_dra_gpu_job_by_extended_resource_preempts_overflow_only(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    gpu_job_preempts(scenario, testbed, reader_token, "extended-resource")


def gpu_job_preempts(scenario: Scenario, testbed: Testbed, token: str, how: str) -> None:
    """Two CPU nodes (8 CPU), a DRA GPU node (16 CPU, 4 GPUs); head and floor, then 3
    overflow workers (two on the GPU node); then the GPU job."""
    name = scenario.name
    gpu_node, slice_ = dra_gpu_node(f"{name}-gpu-a", name, cpu=16, gpus=4)
    scenario.setup([node(f"{name}-cpu-a", name, cpu=8), node(f"{name}-cpu-b", name, cpu=8),
                    gpu_node])
    scenario.create(slice_)
    scenario.create(priority_class(f"{name}-gpu-job", 1000))
    wait_until("raygate classes the DRA node gpu", lambda: node_class(
        testbed.raygate_url, f"{name}-gpu-a", token) == "gpu", timeout=60)
    scenario.create(raycluster("work", scenario.namespace, name,
                               tolerating_gpu_groups(baseline=2, overflow=0)))
    wait_until("head and floor running", lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("baseline")) == 2, timeout=90)
    floor = sorted(p["metadata"]["name"] for p in
                   scenario.running("baseline") + scenario.running("headgroup"))
    scenario.scale("work", "overflow", 3)
    wait_until("3 overflow workers running", lambda: len(scenario.running("overflow")) == 3,
               timeout=90)
    on_gpu = sorted(p["metadata"]["name"] for p in scenario.running("overflow")
                    if p["spec"]["nodeName"] == f"{name}-gpu-a")
    assert on_gpu, "overflow workers on the GPU node before the job"

    scenario.create(gpu_job(scenario, how, f"{name}-gpu-job"))
    job = wait_until("the GPU job bound", lambda: next(
        (p for p in scenario.live_pods("app=train") if p["spec"].get("nodeName")), None),
        timeout=120)
    scenario.step(f"GPU job bound to {job['spec']['nodeName']}")
    assert job["spec"]["nodeName"] == f"{name}-gpu-a"
    taken = sorted(h.name for h in scenario.history()
                   if h.disruption == "PreemptionByScheduler")
    assert taken and set(taken) <= set(on_gpu), (taken, on_gpu)
    assert sorted(p["metadata"]["name"] for p in scenario.running("baseline")
                  + scenario.running("headgroup")) == floor, "the floor is untouched"
    claims = testbed.api().items(
        f"/apis/resource.k8s.io/v1/namespaces/{scenario.namespace}/resourceclaims")
    allocated = [len(c["status"]["allocation"]["devices"]["results"]) for c in claims
                 if c.get("status", {}).get("allocation")]
    assert allocated == [4], claims
    report.add(f"dra-3-preemption-{how}", scenario.timeline(
        f"A GPU job (priority 1000) asking for 4 DRA GPUs through "
        f"{'a claim template' if how == 'claim' else 'nvidia.com/gpu, mapped by the DeviceClass'}"
        ": it preempts overflow workers on the GPU node, never the floor"))
