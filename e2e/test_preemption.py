"""A high-priority GPU job arrives on a GPU node that Ray overflow workers are using:
the real kube-scheduler preempts through raygate's preempt verb.

Nodes: two CPU nodes of 8 CPU, a GPU node of 16 CPU and 4 GPUs. On the GPU node: two
overflow workers (4 CPU each) and a ``guard`` pod that is not a Ray pod, labelled
``volcano.sh/preemptable: "false"``, at a priority below the workers'. The GPU job needs
12 CPU and the 4 GPUs: kube-scheduler's own choice of victims is the guard (the lowest
priority) and one overflow worker; raygate keeps the guard and gives the other overflow
worker instead, which frees the same room. KubeRay replaces each victim once; raygate's
thrash guard keeps the replacements off GPU nodes, so they wait for CPU until a node is
added, and are bound to it.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e import report
from e2e.admission import RUNNING_OR_GONE, AdmissionRecorder
from e2e.objects import Group, gpu_job, node, raycluster, recipe_groups, tolerating_gpu_groups
from e2e.scenario import Scenario, wait_until
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e


def priority_class(name: str, value: int) -> dict[str, object]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority"}


def guard_pod(scenario: Scenario, node_name: str, priority: str,
              scheduler: str) -> dict[str, object]:
    resources = {"cpu": "4", "memory": "1Gi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "guard", "namespace": scenario.namespace,
                         "labels": {"app": "guard", "volcano.sh/preemptable": "false"}},
            "spec": {"schedulerName": scheduler, "priorityClassName": priority,
                     "nodeSelector": {"kubernetes.io/hostname": node_name},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "containers": [{"name": "guard", "image": "example.invalid/guard:1",
                                     "resources": {"requests": resources,
                                                   "limits": resources}}]}}


def bring_up(scenario: Scenario, scheduler: str, groups: list[Group],
             cluster_labels: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The nodes, the guard, the RayCluster with 3 overflow workers; then the GPU job
    until it is bound. Returns the overflow workers that were on the GPU node and the
    floor (head and baseline) before the job came."""
    name = scenario.name
    gpu_node = f"{name}-gpu-a"
    scenario.setup([node(f"{name}-cpu-a", name, cpu=8), node(f"{name}-cpu-b", name, cpu=8),
                    node(gpu_node, name, cpu=16, gpus=4)],
                   native_placement=scheduler != "default-scheduler")  # no raygate at all
    scenario.create(priority_class(f"{name}-low", -100))
    scenario.create(priority_class(f"{name}-gpu-job", 1000))
    scenario.create(guard_pod(scenario, gpu_node, f"{name}-low", scheduler))
    cluster = raycluster("work", scenario.namespace, name, groups, scheduler=scheduler)
    cluster["metadata"]["labels"] = dict(cluster_labels or {})
    scenario.create(cluster)
    wait_until("head, floor and guard running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("baseline")) == 2
               and scenario.live_pods("app=guard")[0]["status"].get("phase") == "Running",
               timeout=90)
    scenario.scale("work", "overflow", 3)
    wait_until("3 overflow workers running", lambda: len(scenario.running("overflow")) == 3,
               timeout=90)
    on_gpu = sorted(p["metadata"]["name"] for p in scenario.running("overflow")
                    if p["spec"]["nodeName"] == gpu_node)
    assert len(on_gpu) == 2, "two overflow workers on the GPU node before the job"
    floor = sorted(p["metadata"]["name"] for p in
                   scenario.running("baseline") + scenario.running("headgroup"))

    scenario.create(gpu_job("train", scenario.namespace, name, cpu="12", gpus=4,
                            priority_class=f"{name}-gpu-job", scheduler=scheduler))
    job = wait_until("the GPU job bound", lambda: next(
        (p for p in scenario.live_pods("app=train") if p["spec"].get("nodeName")), None),
        timeout=120)
    scenario.step(f"GPU job bound to {job['spec']['nodeName']}")
    assert job["spec"]["nodeName"] == gpu_node
    return on_gpu, floor


def victims(scenario: Scenario) -> list[str]:
    return sorted(h.name for h in scenario.history() if h.disruption == "PreemptionByScheduler")


def assert_untouched(scenario: Scenario, floor: list[str]) -> dict[str, Any]:
    """The guard (``volcano.sh/preemptable: "false"``) and the floor survived the job;
    returns the guard."""
    guard = scenario.live_pods("app=guard")[0]
    assert not guard["metadata"].get("deletionTimestamp")
    assert sorted(p["metadata"]["name"] for p in scenario.running("baseline")
                  + scenario.running("headgroup")) == floor, "the floor is untouched"
    return guard


def pending_replacements(scenario: Scenario, victims: list[str]) -> list[str]:
    """KubeRay's replacements of ``victims``, once it has made them (``bring_up``'s three
    overflow workers again), that are not bound yet."""
    wait_until(f"{len(victims)} replacements created", lambda: len(
        [p for p in scenario.group_pods("overflow")
         if p["metadata"]["name"] not in victims]) == 3, timeout=90)
    return sorted(p["metadata"]["name"] for p in scenario.group_pods("overflow")
                  if p["metadata"]["name"] not in victims and not p["spec"].get("nodeName"))


def test_gpu_job_preempts_overflow_workers_never_the_floor(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    name = scenario.name
    gpu_node = f"{name}-gpu-a"
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        on_gpu, floor = bring_up(scenario, "ray-scheduler",
                                 tolerating_gpu_groups(baseline=2, overflow=0))
        assert victims(scenario) == on_gpu, "raygate gave the other overflow worker, not the guard"
        assert assert_untouched(scenario, floor)["spec"]["nodeName"] == gpu_node

        # KubeRay replaces each victim once; the thrash guard keeps them off the GPU
        # node, and the CPU nodes have no room: they wait for capacity.
        replacements = pending_replacements(scenario, on_gpu)
        assert len(replacements) == 2
        for pod in replacements:
            admission.wait_for_state(pod, "WaitingForCapacity")
        for victim in on_gpu:
            admission.wait_for_state(victim, "Preempted")
        pending = scenario.live_pods("ray.io/group=overflow")
        assert all(p["spec"].get("nodeName") is None for p in pending
                   if p["metadata"]["name"] in replacements)

        scenario.add_node(node(f"{name}-cpu-c", name, cpu=8))
        scenario.step(f"added {name}-cpu-c")
        wait_until("the replacements running", lambda: len(scenario.running("overflow")) == 3,
                   timeout=90)
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"]
                  for p in scenario.running("overflow")}
        assert all(placed[pod] == f"{name}-cpu-c" for pod in replacements), placed
        assert not [h for h in scenario.history() if h.group == "overflow"
                    and h.name not in on_gpu and h.node == gpu_node], "no thrash"
        for pod in replacements:
            admission.wait_for_state(pod, RUNNING_OR_GONE, last=True)
        created = [h.name for h in scenario.history() if h.group == "overflow"]
        assert len(created) == 5, f"exactly one replacement per victim: {created}"
    finally:
        admission.close()
    report.add("preemption-1-raygate", scenario.timeline(
        "Preemption with raygate: a GPU job (priority 1000) needs the GPU node")
        + "\nAdmission API (gRPC Watch) transitions:\n\n" + admission.table()
        + "\nHow soon the admission API followed the API (no limit is asserted: a slow "
        "machine only makes it later):\n\n" + admission.lags(scenario.history()))


def test_without_raygate_the_stock_scheduler_takes_the_guard(scenario: Scenario) -> None:
    """The same cluster, the hand-written recipe, the stock scheduler: kube-scheduler
    knows nothing of ``volcano.sh/preemptable`` and takes the lowest priority first."""
    bring_up(scenario, "default-scheduler", recipe_groups(baseline=2, overflow=0))
    taken = victims(scenario)
    assert "guard" in taken, taken
    wait_until("KubeRay's replacements", lambda: len(scenario.group_pods("overflow")) == 3,
               timeout=90)
    report.add("preemption-2-stock", scenario.timeline(
        "Preemption without raygate (default-scheduler, the hand-written recipe): the same "
        "GPU job"))
