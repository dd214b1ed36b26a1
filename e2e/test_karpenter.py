"""The real Karpenter (its kwok provider, v1.15.0) beside raygate: what a node autoscaler
does for Ray pods that raygate places.

Each scenario has NodePools of its own, labelled with the scenario's label that its pods
select (so it sees no other scenario's capacity), and no node at the start:

- ``cpu-<scenario>``: instance type ``cpu-4x`` (4 CPU, 16Gi, $0.2/h);
- ``gpu-<scenario>``: instance type ``gpu-8x`` (8 CPU, 64Gi, one ``nvidia.com/gpu``,
  $3.0/h), the GPU taint and ``nvidia.com/gpu.present=true`` on its nodes.

Equal weights, so Karpenter tries ``gpu-…`` first (names descending on a tie). The
RayCluster: a 1-CPU head and a floor group of two 1-CPU workers, no autoscaling.

Tests marked ``extender_only`` are the baselines: raygate as a scheduler extender alone
(no gate in their namespace), which Karpenter never asks, or the marker resource it used to
add. The others run raygate as installed: its native placement writes the rule into each
pod before it can be scheduled, and Karpenter reads it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.admission import RUNNING_OR_GONE, AdmissionRecorder
from e2e.events import described, wait_for_reason
from e2e.nodeclaims import NodeClaims, clear_scenario
from e2e.objects import SCENARIO_LABEL, TOLERATE_GPU, Group, raycluster
from e2e.scenario import Scenario, wait_until
from testbed.cluster import Testbed
from testbed.default_setup import NAMESPACE_LABEL, SCHEDULER
from testbed.karpenter import Karpenter, node_pool

pytestmark = pytest.mark.e2e

CLUSTER = "floor"
PODS = 3  # the head and two floor workers
# The rule raygate's native mode is to write on floor and head pods.
NOT_GPU = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]}]}}}
# How long the baseline watches for Karpenter to change its mind once it has nominated the
# GPU node for every pod and raygate has refused that node to every pod. Karpenter
# re-simulates within its batch window (1-3 s here) of any pod change; a slow machine
# only makes a second claim later, never an early one. (Held for 150 s once: Karpenter
# nominated the GPU node again after its 2-minute event dedupe, bought nothing, and did
# not consolidate the empty node while pods were nominated to it.)
HOLD = 15.0


@pytest.fixture
def claims(scenario: Scenario, karpenter: Karpenter,
           request: pytest.FixtureRequest) -> Iterator[NodeClaims]:
    """The scenario's NodePools ``cpu-…`` and ``gpu-…`` and a recorder of its NodeClaims;
    afterwards its RayCluster and pools go (Karpenter deletes their nodes). A test marked
    ``extender_only`` runs without raygate's native placement (the baseline)."""
    scenario.setup([], native_placement=request.node.get_closest_marker("extender_only")
                   is None)
    recorder = NodeClaims(scenario, karpenter)
    scope = {SCENARIO_LABEL: scenario.name}
    karpenter.create_pools([node_pool(f"cpu-{scenario.name}", scope, ["cpu-4x"]),
                            node_pool(f"gpu-{scenario.name}", scope, ["gpu-8x"], gpu=True)])
    scenario.step("NodePools cpu and gpu Ready (equal weight), no node")
    yield recorder
    recorder.close()
    clear_scenario(scenario, karpenter)


@pytest.fixture
def admission(scenario: Scenario, reader_token: str) -> Iterator[AdmissionRecorder]:
    """raygate's admission-status Watch of the scenario's namespace."""
    recorder = AdmissionRecorder(scenario.testbed.raygate_grpc, reader_token,
                                 scenario.namespace, scenario.started)
    yield recorder
    recorder.close()


def floor_cluster(scenario: Scenario, pod_spec: dict[str, Any],
                  scheduler: str = "ray-scheduler") -> dict[str, Any]:
    """The head and a floor of two, 1 CPU each, every pod with ``pod_spec`` merged."""
    floor = Group("baseline", 2, "1", min=2, max=2, pod_spec=pod_spec)
    return raycluster(CLUSTER, scenario.namespace, scenario.name, [floor],
                      scheduler=scheduler, head_cpu="1", head_pod_spec=pod_spec,
                      autoscaling=False)


def ray_pods(scenario: Scenario) -> list[dict[str, Any]]:
    return scenario.live_pods(f"ray.io/cluster={CLUSTER}")


def refused_by_raygate(pod: dict[str, Any]) -> bool:
    """kube-scheduler's last verdict on the pod names raygate's GPU rule."""
    return any(c["type"] == "PodScheduled" and c["status"] == "False"
               and "avoids-gpu" in (c.get("message") or "")
               for c in pod["status"].get("conditions") or [])


@pytest.mark.extender_only
def test_karpenter_floor_tolerating_gpu_extender_only(
        scenario: Scenario, claims: NodeClaims, admission: AdmissionRecorder) -> None:
    """BASELINE, raygate as an extender alone: head and floor tolerate the GPU taint;
    Karpenter buys a GPU node for them, raygate refuses it to each, and Karpenter, which
    never asks raygate, says they should schedule there and buys nothing else. raygate's
    admission API says so: no node is coming."""
    scenario.create(floor_cluster(scenario, {"tolerations": [TOLERATE_GPU]}))
    claim = wait_until("Karpenter's first NodeClaim", claims.history, timeout=120)[0]
    wait_until(f"NodeClaim {claim.name} initialized (its node Ready)",
               lambda: claim.at("Initialized") is not None, timeout=120)
    scenario.step(f"NodeClaim {claim.name} ({claim.instance_type}) initialized")
    pods = wait_until(f"raygate refusing {claim.node} to all {PODS} pods", lambda: (
        pods if len(pods := ray_pods(scenario)) == PODS
        and all(refused_by_raygate(p) for p in pods) else None), timeout=120)
    names = [p["metadata"]["name"] for p in pods]
    wait_until("Karpenter nominating the GPU claim for every pod", lambda: all(
        any(claim.name in said for said in claims.nominated(name)) for name in names),
        timeout=120)
    scenario.step(f"every pod refused the GPU node by raygate, nominated to it by "
                  f"Karpenter; watching {HOLD:.0f} s")
    time.sleep(HOLD)
    scenario.step("hold over")

    # The extender alone: the GPU pool wins the name tie, one GPU node is bought, raygate
    # refuses it, and Karpenter buys nothing else.
    history = claims.history()
    assert [(h.pool, h.instance_type) for h in history] == [
        (f"gpu-{scenario.name}", "gpu-8x")], history
    assert all(not p["spec"].get("nodeName") for p in ray_pods(scenario)), \
        "the head and the floor stay Pending beside the idle GPU node"
    for name in names:
        assert any(f"nodeclaim/{claim.name}" in said for said in claims.nominated(name))
        # Stranded: Karpenter counts the pod on the GPU node raygate refuses it.
        admission.wait_for_state(name, "NoNodeComing", last=True, timeout=30)
    status = admission.status(CLUSTER)
    assert status is not None
    assert all(g.scale_up.action == "hold" for g in status.groups), status.groups
    report.add("karpenter-1-tolerating-extender-only", scenario.timeline(
        "Karpenter, raygate as an extender alone: head and floor tolerate the GPU taint (a "
        "GPU node raygate refuses, nothing else; raygate says NoNodeComing)")
        + claims.timeline() + admission.table())


def test_karpenter_floor_tolerating_gpu(scenario: Scenario, claims: NodeClaims,
                                        admission: AdmissionRecorder) -> None:
    """The same RayCluster with raygate's native placement (as installed): each pod is
    released with raygate's required not-GPU term; Karpenter reads it and buys one CPU
    node, where all three run; no GPU node is bought. While the node comes, raygate's
    admission API says NodeProvisioning."""
    scenario.create(floor_cluster(scenario, {"tolerations": [TOLERATE_GPU]}))
    created = scenario.now()
    wait_until(f"all {PODS} pods Running", lambda: len(
        [p for p in ray_pods(scenario) if p["status"].get("phase") == "Running"]) == PODS,
        timeout=180)
    took = scenario.now() - created
    scenario.step(f"all {PODS} pods Running, {took:.1f} s after the RayCluster")
    # The pods can run before the claim's watch event naming its node arrives here.
    wait_until("the NodeClaim initialized, as the watch saw it", claims.initialized,
               timeout=60)

    history = claims.history()
    assert [(h.pool, h.instance_type) for h in history] == [
        (f"cpu-{scenario.name}", "cpu-4x")], history
    pods = ray_pods(scenario)
    assert {p["spec"]["nodeName"] for p in pods} == {history[0].node}, (pods, history)
    for pod in pods:
        assert pod["metadata"]["labels"]["raygate.io/role"] in ("head", "floor"), pod
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == NOT_GPU["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for name in (p["metadata"]["name"] for p in pods):
        admission.wait_for_state(name, RUNNING_OR_GONE, last=True, timeout=60)
    seen = {p["metadata"]["name"]: admission.states(p["metadata"]["name"]) for p in pods}
    assert any("NodeProvisioning" in states for states in seen.values()), seen
    report.add("karpenter-2-native", scenario.timeline(
        f"Karpenter, raygate as installed (native placement): the same RayCluster gets one "
        f"CPU node, all Running in {took:.0f} s, no GPU node") + claims.timeline()
        + admission.table())


MARKED = {"raygate.io/managed": "1"}
"""What the webhook's opt-in marker (``webhook.marker: on``) adds to a Ray pod's first
container, requests and limits."""


@pytest.mark.extender_only
def test_karpenter_marker_resource_extender_only(scenario: Scenario,
                                                 claims: NodeClaims) -> None:
    """BASELINE, the marker: pods carrying ``raygate.io/managed: 1`` as the webhook wrote
    it before it was off by default (here written into the RayCluster's templates).
    Karpenter fits requests against instance types and none offers the marker: no pool
    fits any Ray pod, no node is bought."""
    spec = {"tolerations": [TOLERATE_GPU], "affinity": NOT_GPU}
    cluster = floor_cluster(scenario, spec)
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    for container in (head, worker):
        container["resources"]["requests"].update(MARKED)
        container["resources"].setdefault("limits", {}).update(MARKED)
    scenario.create(cluster)
    pods = wait_until(f"the {PODS} Ray pods", lambda: (
        pods if len(pods := ray_pods(scenario)) == PODS else None), timeout=120)
    names = [p["metadata"]["name"] for p in pods]

    def refused(name: str) -> bool:
        return any(pod == name and reason == "FailedScheduling" and "raygate.io/managed" in said
                   for _, pod, reason, said in claims.pod_events())

    wait_until("Karpenter failing every pod on raygate.io/managed",
               lambda: all(refused(name) for name in names), timeout=120)
    scenario.step("Karpenter: no instance type for any pod (raygate.io/managed)")
    assert claims.history() == []
    assert all(not p["spec"].get("nodeName") for p in ray_pods(scenario))
    report.add("karpenter-3-marker-baseline", scenario.timeline(
        "Karpenter and the marker resource raygate.io/managed (now off by default): it "
        "fits no instance type, no node") + claims.timeline())


def test_karpenter_default_setup(scenario: Scenario, claims: NodeClaims,
                                 default_setup: Testbed) -> None:
    """``deploy/kube-scheduler-default`` as shipped: no marker, the extender called for
    every pod, the native placement on. Karpenter buys a CPU node; the Ray pods run."""
    scenario.testbed.kubectl("label", "namespace", scenario.namespace,
                             f"{NAMESPACE_LABEL}=true")
    scenario.create(floor_cluster(scenario, {"tolerations": [TOLERATE_GPU]},
                                  scheduler=SCHEDULER))
    wait_until(f"all {PODS} pods Running", lambda: len(
        [p for p in ray_pods(scenario) if p["status"].get("phase") == "Running"]) == PODS,
        timeout=180)
    scenario.step(f"all {PODS} pods Running")
    pods = ray_pods(scenario)
    assert all("raygate.io/managed" not in p["spec"]["containers"][0]["resources"].get(
        "requests", {}) for p in pods)
    wait_until("the NodeClaim initialized, as the watch saw it", claims.initialized,
               timeout=60)
    assert [h.instance_type for h in claims.history()] == ["cpu-4x"]
    report.add("karpenter-4-default-setup", scenario.timeline(
        "Karpenter and the kube-scheduler-default setup as shipped (no marker): one CPU "
        "node, the Ray pods run") + claims.timeline())


def test_karpenter_no_instance_type_fits(scenario: Scenario, claims: NodeClaims,
                                         admission: AdmissionRecorder) -> None:
    """A worker asking 100 CPUs, which no instance type of any NodePool has: Karpenter
    says it cannot schedule it, raygate says NoNodeComing and holds the group's
    scale-up, quoting Karpenter."""
    spec = {"tolerations": [TOLERATE_GPU]}  # raygate's native rule keeps it off GPU nodes
    big = Group("big", 1, "100", min=1, max=1, pod_spec=spec)
    scenario.create(raycluster(CLUSTER, scenario.namespace, scenario.name, [big],
                               head_cpu="1", head_pod_spec=spec, autoscaling=False))
    worker = wait_until("the big worker", lambda: next(
        (p["metadata"]["name"] for p in ray_pods(scenario)
         if p["metadata"]["labels"].get("ray.io/group") == "big"), None), timeout=120)
    admission.wait_for_state(worker, "NoNodeComing", last=True, timeout=120)
    status = admission.status(CLUSTER)
    assert status is not None
    pod = next(p for p in status.pods if p.name == worker)
    assert "Karpenter will not launch a node for it" in pod.reason, pod.reason
    group = next(g for g in status.groups if g.name == "big")
    assert group.scale_up.action == "hold" and "Karpenter" in group.scale_up.reason
    (warned,) = wait_for_reason(scenario, "Pod", worker, "NoNodeComing")
    assert warned["type"] == "Warning" and warned["note"] in pod.reason, warned
    report.add("karpenter-5-no-fit", scenario.timeline(
        "Karpenter: a 100-CPU worker no instance type fits; raygate says NoNodeComing")
        + claims.timeline() + admission.table()
        + "\n`kubectl describe pod`:\n\n```\n" + described(scenario, "Pod", worker)
        + "\n```\n")
