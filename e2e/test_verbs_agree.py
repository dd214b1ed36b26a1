"""raygate's verbs agree with each other, on the real kube-scheduler.

1. A CPU-only floor worker of priority 1000 finds its CPU node full with pods of its own
   priority; the only lower-priority pod is a GPU pod filling the GPU node.
   kube-scheduler's preemption dry run runs its own plugins only, so the GPU node is a
   candidate. With raygate, preempt drops it (filter would refuse the worker that node):
   the GPU pod stays. Without raygate, the stock scheduler evicts the GPU pod and binds
   the worker on the GPU node.
2. The race: surplus workers filtered while raygate has not yet seen their group's floor
   pods bound are refused GPU nodes as floor workers. Forced with a raygate whose view
   lags by seconds (``e2e.lagging``); with the stale-refusal requeue, every surplus pod is
   bound within seconds of raygate catching up, run after run; without it, they are
   left pending with room on the GPU node.

Both run without raygate's native placement (no gate in their namespaces): they test the
extender's verbs, the per-cycle layer, on their own.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest

from e2e import report
from e2e.lagging import SCHEDULER_NAME, LaggingRaygate, explain, metric, node_class
from e2e.objects import TOLERATE_GPU, Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from e2e.test_preemption import priority_class
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

RACE_RUNS = 20
SURPLUS = 10
LAG = 8.0
"""How far behind the lagging raygate's view is: the runs go side by side on 2 cores, and a
run's scale-up must reach kube-scheduler before raygate sees its floor bound."""


def plain_pod(scenario: Scenario, name: str, node_name: str, *, priority: str, scheduler: str,
              resources: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": scenario.namespace,
                         "labels": {"app": name}},
            "spec": {"schedulerName": scheduler, "priorityClassName": priority,
                     "nodeSelector": {"kubernetes.io/hostname": node_name},
                     "tolerations": [TOLERATE_GPU],
                     "containers": [{"name": name, "image": "example.invalid/work:1",
                                     "resources": {"requests": resources,
                                                   "limits": resources}}]}}


def tried(pod: dict[str, Any]) -> bool:
    """kube-scheduler found no room (and so ran preemption), or has bound the pod."""
    return bool(pod["spec"].get("nodeName")) or any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod["status"].get("conditions") or [])


HOLD = "testbed.raygate.dev/hold"
"""The floor worker's scheduling gate, removed once the scenario lets it be scheduled."""


def floor_preempts(scenario: Scenario, scheduler: str,
                   raygate: tuple[str, str] | None = None) -> dict[str, Any]:
    """Nodes cpu-a (4 CPU) and gpu-a (8 CPU, 1 GPU); the GPU pod (priority -10) on gpu-a;
    a RayCluster at priority 1000 whose head (2 CPU) and floor worker (2 CPU, tolerating
    the GPU taint) come after a 2-CPU pod of priority 1000 took cpu-a's other half. The
    floor worker has no room; returns it once kube-scheduler has tried to preempt for it.
    ``raygate``: the (URL, token) of a raygate to wait for until it knows the GPU node."""
    name = scenario.name
    scenario.setup([node(f"{name}-cpu-a", name, cpu=4),
                    node(f"{name}-gpu-a", name, cpu=8, gpus=1)], native_placement=False)
    scenario.create(priority_class(f"{name}-low", -10))
    scenario.create(priority_class(f"{name}-ray", 1000))
    scenario.create(plain_pod(scenario, "gpu-work", f"{name}-gpu-a", priority=f"{name}-low",
                              scheduler=scheduler,
                              resources={"cpu": "8", "memory": "1Gi", "nvidia.com/gpu": "1"}))
    scenario.create(plain_pod(scenario, "cpu-work", f"{name}-cpu-a", priority=f"{name}-ray",
                              scheduler=scheduler, resources={"cpu": "2", "memory": "1Gi"}))
    wait_until("the GPU and CPU pods running", lambda: len([
        p for p in scenario.live_pods() if p["status"].get("phase") == "Running"]) == 2)
    if raygate is not None:
        # A node raygate has not seen yet is dropped for such a preemptor too, and a pod
        # whose preemption found nothing waits for a cluster event to be tried again:
        # the lagging view has its own scenario (the race, below).
        url, token = raygate
        wait_until("raygate knows the GPU node", lambda: node_class(
            url, f"{name}-gpu-a", token) == "gpu")
    high = {"priorityClassName": f"{name}-ray"}
    held = {**high, "tolerations": [TOLERATE_GPU], "schedulingGates": [{"name": HOLD}]}
    cluster = raycluster("work", scenario.namespace, name, [
        Group("floor", 0, "2", min=0, max=1, pod_spec=held)],
        scheduler=scheduler, head_pod_spec=high, autoscaling=False)
    scenario.create(cluster)
    wait_until("the head running", lambda: len(scenario.running("headgroup")) == 1, timeout=90)
    scenario.scale("work", "floor", 1)  # min 0 → the floor is replicas, 1: a floor worker
    worker = wait_until("the floor worker", lambda: next(iter(scenario.group_pods("floor")),
                                                         None))
    if raygate is not None:
        # The new replicas and the pod reach raygate by two watches; a preemption judged
        # with the pod but not yet the replicas would judge a surplus worker.
        wait_until("raygate seeing the floor worker as floor", lambda: explain(
            url, worker, token)["role"] == "floor")
    scenario.api.json_patch(f"{scenario.pods_path}/{worker['metadata']['name']}",
                            [{"op": "remove", "path": "/spec/schedulingGates"}])
    return wait_until("the floor worker tried by the scheduler", lambda: next(
        (p for p in scenario.group_pods("floor") if tried(p)), None), timeout=90)


def test_a_cpu_floor_worker_never_evicts_a_gpu_pod(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    refused = {"verb": "scheduler/preempt", "rule": "floor-avoids-gpu"}
    before = metric(testbed.raygate_url, "raygate_gpu_nodes_refused_total", **refused)
    worker = floor_preempts(scenario, "ray-scheduler", (testbed.raygate_url, reader_token))
    wait_until("raygate's preempt dropped the GPU node", lambda: metric(
        testbed.raygate_url, "raygate_gpu_nodes_refused_total", **refused) > before)
    time.sleep(10)  # kube-scheduler retries with backoff: give a wrong eviction its chance
    gpu = scenario.live_pods("app=gpu-work")
    assert gpu and gpu[0]["status"].get("phase") == "Running", "the GPU pod stays"
    assert not gpu[0]["metadata"].get("deletionTimestamp")
    assert not [h for h in scenario.history() if h.disruption], "nothing preempted"
    pending = [p for p in scenario.group_pods("floor") if not p["spec"].get("nodeName")]
    assert [p["metadata"]["name"] for p in pending] == [worker["metadata"]["name"]]
    scenario.step("10 s later: the GPU pod runs, the floor worker waits for a CPU node")
    path = f"/v1/namespaces/{scenario.namespace}/pods/{worker['metadata']['name']}/explain"
    request = urllib.request.Request(f"{testbed.raygate_url}{path}",
                                     headers={"Authorization": f"Bearer {reader_token}"})
    explained = json.load(urllib.request.urlopen(request, timeout=10))
    gpu_node = next(n for n in explained["nodes"] if n["name"] == f"{scenario.name}-gpu-a")
    assert gpu_node["rule"] == "floor-avoids-gpu"
    assert gpu_node["reason"].endswith("preempt drops it too")
    report.add("verbs-agree-1-raygate", scenario.timeline(
        "A CPU-only floor worker (priority 1000) and a GPU pod (priority -10) on the only "
        "node with lower-priority pods: raygate's preempt drops the GPU node"))


def test_without_raygate_the_stock_scheduler_evicts_the_gpu_pod(scenario: Scenario) -> None:
    floor_preempts(scenario, "default-scheduler")
    bound = wait_until("the floor worker bound", lambda: next(
        (p for p in scenario.group_pods("floor") if p["spec"].get("nodeName")), None),
        timeout=90)
    assert bound["spec"]["nodeName"] == f"{scenario.name}-gpu-a"
    assert [h.name for h in scenario.history() if h.disruption] == ["gpu-work"]
    report.add("verbs-agree-2-stock", scenario.timeline(
        "The same shape on the stock scheduler: the GPU pod is evicted and the CPU-only "
        "floor worker takes the GPU node"))


# --- the race --------------------------------------------------------------------------

def race(lagging: LaggingRaygate, name: str) -> tuple[Scenario, float]:
    """One run: head and floor 2 on a CPU node with room for just them, a GPU node with
    room for the surplus (known to the lagging raygate before anything else starts: an
    unknown node passes its filter); once the floor is bound (as the API says, before the
    lagging raygate knows), the group is scaled to 2 + ``SURPLUS``. Returns the scenario
    and the time of the scale-up."""
    scenario = Scenario(lagging.testbed, name)
    # 7 CPU: the head (2, and 0.5 for its autoscaler sidecar) and the floor (2 x 2), no more.
    scenario.setup([node(f"{name}-cpu", name, cpu=7),
                    node(f"{name}-gpu", name, cpu=2 * SURPLUS, gpus=1)], native_placement=False)
    wait_until("the lagging raygate knows the GPU node",
               lambda: lagging.node_class(f"{name}-gpu") == "gpu", timeout=60)
    tolerate = {"tolerations": [TOLERATE_GPU]}
    # Autoscaled: the floor is minReplicas (2) whatever replicas the scale-up sets.
    scenario.create(raycluster("race", scenario.namespace, name, [
        Group("w", 2, "2", min=2, max=2 + SURPLUS, pod_spec=tolerate)],
        scheduler=SCHEDULER_NAME))
    # Bound, not Running: on a loaded machine kwok can take longer than the lag to run a
    # bound pod, and the lagging raygate would then see the binds before the scale-up.
    wait_until("head and floor bound", lambda: len(bound(scenario, "headgroup")) == 1
               and len(bound(scenario, "w")) == 2, timeout=90)
    scenario.scale("race", "w", 2 + SURPLUS)
    return scenario, scenario.now()


def bound(scenario: Scenario, group: str) -> list[dict[str, Any]]:
    return [p for p in scenario.group_pods(group) if p["spec"].get("nodeName")]


def surplus_on_gpu(scenario: Scenario) -> int:
    return sum(1 for p in scenario.group_pods("w")
               if p["spec"].get("nodeName") == f"{scenario.name}-gpu")


def one_race(lagging: LaggingRaygate, run: int) -> tuple[int, float]:
    """One run of ``race``: how many surplus workers raygate refused the GPU node as floor
    workers (the race, forced), and seconds from the scale-up to every one bound."""
    scenario, scaled = race(lagging, f"race-{run:02d}")
    try:
        wait_until(f"run {run}: {SURPLUS} surplus workers bound on the GPU node",
                   lambda: surplus_on_gpu(scenario) == SURPLUS, timeout=180)
        bound = scenario.now() - scaled
        surplus = {p["metadata"]["name"] for p in scenario.group_pods("w")
                   if p["spec"].get("nodeName") == f"{scenario.name}-gpu"}
        # kube-scheduler's FailedScheduling events carry raygate's refusal.
        events = scenario.api.items(f"/api/v1/namespaces/{scenario.namespace}/events")
        refused = {e["involvedObject"]["name"] for e in events
                   if e.get("reason") == "FailedScheduling"
                   and "floor-avoids-gpu" in e.get("message", "")} & surplus
    finally:
        scenario.close()
    return len(refused), bound


def test_surplus_refused_on_a_lagging_snapshot_is_bound_once_raygate_catches_up(
        testbed: Testbed) -> None:
    """``RACE_RUNS`` runs side by side, each on nodes and in a namespace of its own."""
    lagging = LaggingRaygate(testbed, delay=LAG).start()
    try:
        with ThreadPoolExecutor(max_workers=RACE_RUNS) as pool:
            rows = list(pool.map(partial(one_race, lagging), range(RACE_RUNS)))
        nudged = lagging.metric("raygate_requeue_nudges_total", result="patched")
    finally:
        lagging.stop()
    report.add("verbs-agree-3-race", (
        f"### The race, forced: {RACE_RUNS} runs side by side, raygate's view {LAG:.0f} s "
        "behind\n\n"
        f"Each run: the floor (2) runs, then {SURPLUS} surplus workers are created at once, "
        "and kube-scheduler tries them while raygate has not seen the floor bound. raygate "
        f"asked kube-scheduler to try a pod again {nudged:.0f} times once it had.\n\n"
        "| run | surplus refused the GPU node as floor | every surplus worker bound after "
        "the scale-up (s) |\n|---|---:|---:|\n"
        + "".join(f"| {run} | {refused} | {bound:.1f} |\n"
                  for run, (refused, bound) in enumerate(rows))))
    # Every run's surplus was bound (one_race waits for it); the race was forced (surplus
    # refused as floor) in at least one run, or this test showed nothing.
    assert any(refused for refused, _ in rows), f"the race was never forced: {rows}"
    assert nudged > 0


def test_without_the_requeue_the_surplus_waits_beside_a_free_gpu_node(
        testbed: Testbed) -> None:
    """The same race once with ``--requeue=off`` and raygate 10 s behind, so that every
    event of the scale-up reaches kube-scheduler's queue before raygate catches up."""
    lagging = LaggingRaygate(testbed, delay=10.0, args=("--requeue=off",)).start()
    try:
        scenario, scaled = race(lagging, "race-off")
        try:
            # raygate catches up 10 s after the scale-up; 20 s more with nothing to retry
            # (twice kube-scheduler's longest backoff, 10 s).
            time.sleep(30)
            stranded = SURPLUS - surplus_on_gpu(scenario)
            scenario.step(f"{scenario.now() - scaled:.0f} s after the scale-up: "
                          f"{stranded} surplus workers still pending")
        finally:
            scenario.close()
    finally:
        lagging.stop()
    assert stranded > 0, "the race left nothing pending: the scenario did not force it"
    report.add("verbs-agree-4-race-off", scenario.timeline(
        "The race without the requeue (raygate 10 s behind): surplus workers wait "
        "beside a free GPU node"))
