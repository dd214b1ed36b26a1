"""The seed's scenario end to end on the real Karpenter (v1.15, kwok provider): CPU-only
overflow workers spill onto an idle GPU node, a GPU job takes it back, raygate's thrash
guard keeps the replacements off it, Karpenter buys a CPU node for them and, once the job
is over, consolidates the GPU node away; the floor and the head are never evicted.

The scenario's NodePools (scoped by its label, as in ``test_karpenter.py``), both
``consolidationPolicy: WhenEmptyOrUnderutilized`` with ``consolidateAfter`` short:

- ``cpu-<scenario>``: ``cpu-4x`` (4 CPU, $0.2/h) and ``cpu-8x`` (8 CPU, $0.4/h);
- ``gpu-<scenario>``: ``gpu-8x`` (8 CPU, one GPU, $3.0/h), the GPU taint and label.

Karpenter's kwok types keep 100m CPU back, so a ``cpu-4x`` offers 3.9 CPU, a ``gpu-8x``
7.9. The RayCluster (in-tree autoscaling, so ``overflow`` is surplus): a 1-CPU head (1.5
with KubeRay's autoscaler sidecar), ``baseline`` two 1-CPU floor workers, ``overflow``
0..8 workers of 2 CPU; both groups tolerate the GPU taint, none has affinity. raygate
writes the rest.

How the overflow gets onto a GPU node, with Karpenter's real behaviour: a GPU pod (an
earlier job, priority 0) makes Karpenter buy the GPU node, while the head and floor get a
``cpu-4x`` (0.4 CPU left). Overflow scaled to 3 while that job runs: the CPU node is
full and the GPU node has room, so kube-scheduler binds them there at once (released with
raygate's *preferred* not-GPU term, which is only a preference); Karpenter is not asked.
(A NodePool CPU limit would make Karpenter buy the GPU node for them, relaxing the
preference, but the same limit would then refuse the CPU node the replacements need.)
Then the earlier job ends and a priority-1000 job asking the GPU and 5 CPU comes: with
1.9 CPU free it needs two of the three overflow workers, which kube-scheduler preempts.
KubeRay's two replacements are released with the thrash guard's *required* not-GPU term;
Karpenter buys a CPU node for them (a ``cpu-8x``: they need 4 CPU), no GPU node. The job
ends: the GPU node holds one surplus worker, underutilized; ``consolidateAfter`` later
(and Karpenter's 15 s validation) Karpenter consolidates it, evicting that worker through
the Eviction API (seen: ``Underutilized``, no new node, as the worker fits beside the
replacements; 28 to 47 s after the job ended, the slower once Karpenter had first weighed
and rejected a replacement node); KubeRay's new worker, still under the thrash guard,
runs on a CPU node.

The head and the floor are never evicted: raygate's budgets for them allow no disruption
(asserted), and nothing evicts them. Karpenter never picked their node to disrupt (it
saves nothing), so here the budgets are not put to the test by Karpenter itself;
``test_disruption.py``'s drain shows the Eviction API refusing them.

The report has every NodeClaim (pool, type, when, what Karpenter launched it for and
why it went) and the GPU node-seconds spent on CPU-only Ray pods.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.admission import AdmissionRecorder
from e2e.lagging import metric
from e2e.nodeclaims import ClaimHistory, NodeClaims, clear_scenario
from e2e.objects import SCENARIO_LABEL, TOLERATE_GPU, Group, gpu_job, raycluster
from e2e.ray import ray_cluster
from e2e.scenario import Scenario, wait_until
from e2e.test_autoscaler import overflow
from e2e.test_scale_up import (
    WORKERS,
    Releases,
    all_or_nothing_raycluster,
    bound,
    released_whole,
    scale_up_pods,
)
from raygate.policy.budgets import budget_name
from testbed.cluster import Testbed
from testbed.karpenter import Karpenter, node_pool

pytestmark = pytest.mark.e2e

CLUSTER = "seed"
CONSOLIDATE_AFTER = "10s"
RAY_GROUPS = ("headgroup", "baseline", "overflow")
# The pools' nodes are on-demand, as their instance types' only offerings are. Left open,
# Karpenter 1.15's replace consolidation narrows the replacement to spot (so that it never
# costs more), which the kwok provider cannot launch: it panics on the missing offering
# (``addInstanceLabels``) and the consolidation waits for a node that never comes.
ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
# Deleted pods go within their grace period (kwok, as a kubelet). The GPU job's victims
# must go before kube-scheduler tries the job again: with the default 30 s it once did
# not, kube-scheduler 1.37 dropped the job's nomination on that try ("preemption is not
# helpful" while its victims were terminating) and Karpenter, seeing a provisionable pod,
# bought a second GPU node for the job.
QUICK = {"terminationGracePeriodSeconds": 1}
NOT_GPU_TERMS = [{"matchExpressions": [
    {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]}]


def budgets_status(scenario: Scenario) -> dict[str, tuple[int, int | None]]:
    """Each budget's (minAvailable, disruptionsAllowed) as the disruption controller says."""
    path = f"/apis/policy/v1/namespaces/{scenario.namespace}/poddisruptionbudgets"
    return {b["metadata"]["name"]: (b["spec"]["minAvailable"],
                                    b.get("status", {}).get("disruptionsAllowed"))
            for b in scenario.api.items(path)}


@pytest.fixture
def claims(scenario: Scenario, karpenter: Karpenter) -> Iterator[NodeClaims]:
    """The scenario's NodePools and a recorder of its NodeClaims; afterwards its pods and
    pools go (Karpenter deletes their nodes)."""
    scenario.setup([])
    recorder = NodeClaims(scenario, karpenter)
    scope = {SCENARIO_LABEL: scenario.name}
    pools = [node_pool(f"cpu-{scenario.name}", scope, ["cpu-4x", "cpu-8x"],
                       consolidate_after=CONSOLIDATE_AFTER),
             node_pool(f"gpu-{scenario.name}", scope, ["gpu-8x"], gpu=True,
                       consolidate_after=CONSOLIDATE_AFTER)]
    for pool in pools:
        pool["spec"]["template"]["spec"]["requirements"].append(ON_DEMAND)
    karpenter.create_pools(pools)
    scenario.step(f"NodePools cpu and gpu Ready (consolidateAfter {CONSOLIDATE_AFTER}), "
                  "no node")
    yield recorder
    recorder.close()
    scenario.testbed.kubectl("delete", "priorityclass", f"{scenario.name}-gpu-job",
                             "--ignore-not-found")
    clear_scenario(scenario, karpenter)


def gpu_pod(scenario: Scenario, name: str, cpu: str, priority: str | None) -> dict[str, Any]:
    body = gpu_job(name, scenario.namespace, scenario.name, cpu=cpu, gpus=1,
                   priority_class=priority or "")
    body["metadata"]["labels"] = {"app": name}
    body["spec"].update(QUICK)
    if priority is None:
        del body["spec"]["priorityClassName"]
    return body


def pod_named(scenario: Scenario, name: str) -> dict[str, Any] | None:
    return next(iter(scenario.live_pods(f"app={name}")), None)


def labels(pod: dict[str, Any]) -> tuple[str, str]:
    """raygate's release labels: (role, rule)."""
    meta = pod["metadata"].get("labels") or {}
    return meta.get("raygate.io/role", ""), meta.get("raygate.io/rule", "")


def required_terms(pod: dict[str, Any]) -> Any:
    return (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")


def bring_up(scenario: Scenario, claims: NodeClaims) -> tuple[list[str], ClaimHistory]:
    """Head and floor on a CPU node, an earlier GPU job on a GPU node, both bought by
    Karpenter; returns the floor (head included) and the GPU node's claim."""
    tolerate = {"tolerations": [TOLERATE_GPU]}
    scenario.create(raycluster(CLUSTER, scenario.namespace, scenario.name, [
        Group("baseline", 2, "1", min=2, max=2, pod_spec=tolerate),
        Group("overflow", 0, "2", min=0, max=8, pod_spec={**tolerate, **QUICK})],
        head_cpu="1", head_pod_spec=tolerate))
    scenario.create(gpu_pod(scenario, "earlier", "1", None))
    wait_until("head, 2 floor workers and the earlier GPU job running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("baseline")) == 2
               and (pod_named(scenario, "earlier") or {}).get("status", {}).get("phase")
               == "Running", timeout=120)
    earlier = pod_named(scenario, "earlier")
    assert earlier is not None
    gpu = wait_until("the GPU NodeClaim's node", lambda: next(
        (h for h in claims.history() if h.gpu and h.node == earlier["spec"]["nodeName"]),
        None), timeout=60)
    floor = scenario.running("headgroup") + scenario.running("baseline")
    for pod in floor:
        assert scenario.node_kind(pod) == "CPU" and required_terms(pod) == NOT_GPU_TERMS
    # raygate's budgets: neither the head nor the floor may be evicted.
    wait_until("the head's and the floor's budgets, none allowing a disruption",
               lambda: budgets_status(scenario) == {budget_name(CLUSTER, "headgroup"): (1, 0),
                                             budget_name(CLUSTER, "baseline"): (2, 0)},
               timeout=60)
    scenario.step(f"Karpenter: head and floor on a CPU node, the earlier GPU job on "
                  f"{gpu.name} ({gpu.instance_type})")
    return sorted(p["metadata"]["name"] for p in floor), gpu


def spill(scenario: Scenario, gpu_node: str) -> list[str]:
    """Three overflow workers while the CPU node is full: onto the GPU node."""
    scenario.scale(CLUSTER, "overflow", 3)
    wait_until("3 overflow workers running", lambda: len(scenario.running("overflow")) == 3,
               timeout=90)
    overflow = scenario.running("overflow")
    assert [p["spec"]["nodeName"] for p in overflow] == [gpu_node] * 3, overflow
    assert {labels(p) for p in overflow} == {("surplus", "surplus-prefers-cpu")}
    scenario.step("3 overflow workers on the GPU node (the CPU node full)")
    return sorted(p["metadata"]["name"] for p in overflow)


def preempt(scenario: Scenario, gpu_node: str, overflow: list[str]) -> list[str]:
    """The earlier job ends, the priority-1000 job takes the GPU node: returns the
    overflow workers kube-scheduler preempted."""
    scenario.testbed.kubectl("delete", "pod", "earlier", "-n", scenario.namespace)
    scenario.step("the earlier GPU job ended")
    scenario.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": f"{scenario.name}-gpu-job"}, "value": 1000})
    scenario.create(gpu_pod(scenario, "train", "5", f"{scenario.name}-gpu-job"))
    job = wait_until("the GPU job bound", lambda: (
        pod if (pod := pod_named(scenario, "train")) and pod["spec"].get("nodeName")
        else None), timeout=120)
    assert job["spec"]["nodeName"] == gpu_node
    victims = sorted(h.name for h in scenario.history()
                     if h.disruption == "PreemptionByScheduler")
    scenario.step(f"GPU job bound to the GPU node; preempted: {', '.join(victims)}")
    assert len(victims) == 2 and set(victims) <= set(overflow), victims
    return victims


def replacements(scenario: Scenario, claims: NodeClaims, overflow: list[str]) -> list[str]:
    """KubeRay's replacements of the victims, released with the thrash guard, running on
    a CPU node Karpenter bought for them."""
    wait_until("the replacements running", lambda: len([
        p for p in scenario.running("overflow")
        if p["metadata"]["name"] not in overflow]) == 2, timeout=120)
    new = [p for p in scenario.running("overflow") if p["metadata"]["name"] not in overflow]
    for pod in new:
        assert labels(pod) == ("surplus", "thrash-guard"), pod["metadata"]
        assert required_terms(pod) == NOT_GPU_TERMS, pod["spec"].get("affinity")
    wait_until("their nodes known", lambda: all(scenario.node_kind(p) for p in new),
               timeout=60)
    assert [scenario.node_kind(p) for p in new] == ["CPU", "CPU"], new
    names = sorted(p["metadata"]["name"] for p in new)
    scenario.step(f"replacements {', '.join(names)} (thrash-guard) running on a new CPU node")
    return names


def consolidate(scenario: Scenario, gpu: ClaimHistory) -> float:
    """The GPU job ends; Karpenter consolidates the GPU node and KubeRay recreates what
    it evicted on a CPU node. Returns when the job ended."""
    scenario.testbed.kubectl("delete", "pod", "train", "-n", scenario.namespace)
    ended = scenario.now()
    scenario.step("the GPU job ended")
    wait_until(f"Karpenter consolidating {gpu.name} away", lambda: gpu.deleted is not None,
               timeout=180)
    scenario.step(f"NodeClaim {gpu.name} gone")
    wait_until("3 overflow workers running on CPU nodes", lambda: [
        scenario.node_kind(p) for p in scenario.running("overflow")] == ["CPU"] * 3,
        timeout=120)
    scenario.step("3 overflow workers running on CPU nodes")
    return ended


def gpu_seconds(scenario: Scenario) -> dict[str, float]:
    """Seconds each CPU-only Ray pod spent bound to a GPU node, until it was gone."""
    until = scenario.now()
    return {h.name: (h.deleted if h.deleted is not None else until) - h.bound
            for h in scenario.history() if h.group in RAY_GROUPS and h.bound is not None
            and scenario.node_kinds.get(h.node or "") == "GPU"}


def karpenter_events(scenario: Scenario, names: list[str]) -> list[tuple[str, str, str]]:
    """What Karpenter wrote on the NodeClaims and Nodes ``names``: (object, reason,
    message), in time order (cluster-scoped objects' events live in ``default``)."""
    said = []
    for name in names:
        for event in scenario.api.items("/api/v1/namespaces/default/events",
                                        fieldSelector=f"involvedObject.name={name}"):
            source = ((event.get("source") or {}).get("component")
                      or event.get("reportingComponent") or "")
            if source == "karpenter":
                said.append((event.get("lastTimestamp") or event.get("eventTime") or "",
                             name, event.get("reason", ""), event.get("message", "")))
    return [(name, reason, message) for _, name, reason, message in sorted(said)]


def why(scenario: Scenario, claims: NodeClaims) -> str:
    """Each NodeClaim: the pods Karpenter launched it for, and what its disruption
    controller said of the claim and its node (each once; no condition transitions)."""
    lines = ["", "| NodeClaim | launched for (Karpenter's Nominated) | Karpenter's disruption "
             "words on the claim and its node |", "|---|---|---|"]
    for h in claims.history():
        pods = sorted({pod for _, pod, reason, said in claims.pod_events()
                       if reason == "Nominated" and h.name in said})
        words = dict.fromkeys(f"{reason}: {message}" for _, reason, message in
                              karpenter_events(scenario, [h.name, h.node])
                              if not message.startswith("Status condition transitioned"))
        lines.append(f"| {h.name} | {', '.join(pods)} | "
                     f"{'; '.join(words).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def waste(spent: dict[str, float], gpu: ClaimHistory) -> str:
    lines = ["", "GPU node-seconds spent on CPU-only Ray pods (bound to a GPU node, until "
             "gone):", "", "| pod | seconds on a GPU node |", "|---|---:|"]
    lines += [f"| {pod} | {seconds:.1f} |" for pod, seconds in sorted(spent.items())]
    lines.append(f"| **total** | **{sum(spent.values()):.1f}** |")
    life = (gpu.deleted or 0.0) - (gpu.at("Initialized") or gpu.created)
    lines.append(f"\nThe GPU node {gpu.name} lived {life:.1f} s (initialized to gone).")
    return "\n".join(lines) + "\n"


def test_seed_on_karpenter(scenario: Scenario, claims: NodeClaims) -> None:
    floor, gpu = bring_up(scenario, claims)
    overflow = spill(scenario, gpu.node)
    before = len(claims.history())
    victims = preempt(scenario, gpu.node, overflow)
    new = replacements(scenario, claims, overflow)
    # Karpenter bought a CPU node for the replacements, and no GPU node.
    bought = claims.history()[before:]
    assert bought and all(not h.gpu for h in bought), bought
    assert {p["spec"]["nodeName"] for p in scenario.running("overflow")
            if p["metadata"]["name"] in new} <= {h.node for h in bought}
    ended = consolidate(scenario, gpu)

    history = claims.history()
    # One GPU node in all: the earlier job's, consolidated; every other claim is CPU.
    assert [h.name for h in history if h.gpu] == [gpu.name], history
    assert gpu.deleting is not None and gpu.deleting > ended, gpu
    # The floor and the head were never evicted, preempted or replaced.
    assert sorted(p["metadata"]["name"] for p in scenario.running("headgroup")
                  + scenario.running("baseline")) == floor
    assert not [h for h in scenario.history() if h.name in floor
                and (h.disrupted is not None or h.deleting is not None)]
    # Karpenter evicted surplus only: the overflow worker left on the GPU node.
    [survivor] = sorted(set(overflow) - set(victims))
    evicted = sorted(h.name for h in scenario.history()
                     if h.disruption == "EvictionByEvictionAPI")
    assert survivor in evicted and set(evicted) <= {
        h.name for h in scenario.history() if h.group == "overflow"}, evicted
    # Whatever KubeRay created after the preemption ran on CPU, under the thrash guard.
    later = [p for p in scenario.running("overflow") if p["metadata"]["name"] not in overflow]
    assert len(later) == 3 and set(new) <= {p["metadata"]["name"] for p in later}
    assert {labels(p) for p in later} == {("surplus", "thrash-guard")}, later
    spent = gpu_seconds(scenario)
    assert sorted(spent) == overflow and all(s > 0 for s in spent.values()), spent
    report.add("karpenter-6-seed", scenario.timeline(
        f"Karpenter, the seed end to end: overflow on an idle GPU node, a GPU job preempts "
        f"it, the thrash guard's replacements get a CPU node, the GPU node is consolidated "
        f"({sum(spent.values()):.0f} GPU node-seconds on CPU-only Ray pods)")
        + claims.timeline() + why(scenario, claims) + waste(spent, gpu))


def test_all_or_nothing_scale_up_on_karpenter(
        scenario: Scenario, testbed: Testbed, reader_token: str, claims: NodeClaims) -> None:
    """The seed's first option on the real Karpenter: the Ray autoscaler (2.60, v2, under
    ``raygate-autoscaler``) asks for four 2-CPU workers of a RayCluster annotated
    ``raygate.io/scale-up: all-or-nothing``. Where Karpenter runs (its NodeClaims are
    served), raygate releases the whole scale-up in one pass once it is complete, so that
    Karpenter sees it in one provisioning batch; the report shows what Karpenter bought."""
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    releases = Releases(scenario)
    batches = metric(testbed.raygate_url, "raygate_scale_up_releases_total",
                     trigger="node-autoscaler")
    try:
        with ray_cluster(scenario, testbed, raygate=True, set_up=False,
                         body=all_or_nothing_raycluster(scenario),
                         demand=[{"CPU": 2}] * WORKERS) as ray:
            head_claims = len(claims.history())
            pods = scale_up_pods(scenario)
            bound(scenario, pods, timeout=120)
            decisions = ray.decisions(scenario)
            batches = metric(testbed.raygate_url, "raygate_scale_up_releases_total",
                             trigger="node-autoscaler") - batches
    finally:
        admission.close()
    released_whole(releases, pods,
                   after=max(h.created for h in overflow(scenario) if h.name in pods))
    assert batches == 1, "raygate's metrics: one batch, released for the node autoscaler"
    bought = claims.history()[head_claims:]
    assert bought and all(not h.gpu for h in bought), bought
    kinds = ", ".join(f"{h.instance_type or '?'}" for h in bought)
    report.add("karpenter-7-all-or-nothing", scenario.timeline(
        f"Karpenter and an all-or-nothing scale-up: the Ray autoscaler asks for four "
        f"workers, raygate releases them in one pass, Karpenter buys {len(bought)} "
        f"NodeClaim{'s' if len(bought) != 1 else ''} for them ({kinds})")
        + "\nraygate's releases:\n\n" + releases.table(pods) + claims.timeline()
        + decisions + "\nraygate's admission API about the RayCluster's pods:\n\n"
        + admission.table())
