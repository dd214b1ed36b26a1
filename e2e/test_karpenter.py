"""The real Karpenter (its kwok provider, v1.15.0) beside raygate: what a node autoscaler
does for Ray pods that raygate places, today.

Each scenario has NodePools of its own, labelled with the scenario's label that its pods
select (so it sees no other scenario's capacity), and no node at the start:

- ``cpu-<scenario>``: instance type ``cpu-4x`` (4 CPU, 16Gi, $0.2/h);
- ``gpu-<scenario>``: instance type ``gpu-8x`` (8 CPU, 64Gi, one ``nvidia.com/gpu``,
  $3.0/h), the GPU taint and ``nvidia.com/gpu.present=true`` on its nodes.

Equal weights, so Karpenter tries ``gpu-…`` first (names descending on a tie). The
RayCluster: a 1-CPU head and a floor group of two 1-CPU workers, no autoscaling.

Assertions marked TODAY'S BEHAVIOUR describe what raygate does not yet prevent; they are
to flip when raygate's native rules land (a required not-GPU affinity written on floor
and head pods before they are scheduled, which Karpenter reads; issue #26).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.admission import RUNNING_OR_GONE, AdmissionRecorder
from e2e.nodeclaims import NodeClaims
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
HOLD = 30.0


@pytest.fixture
def claims(scenario: Scenario, karpenter: Karpenter) -> Iterator[NodeClaims]:
    """The scenario's NodePools ``cpu-…`` and ``gpu-…`` and a recorder of its NodeClaims;
    afterwards its RayCluster and pools go (Karpenter deletes their nodes)."""
    scenario.setup([])
    recorder = NodeClaims(scenario, karpenter)
    scope = {SCENARIO_LABEL: scenario.name}
    karpenter.create_pools([node_pool(f"cpu-{scenario.name}", scope, ["cpu-4x"]),
                            node_pool(f"gpu-{scenario.name}", scope, ["gpu-8x"], gpu=True)])
    scenario.step("NodePools cpu and gpu Ready (equal weight), no node")
    yield recorder
    recorder.close()
    scenario.testbed.kubectl("delete", "raycluster", "--all", "-n", scenario.namespace,
                             "--wait=false")
    karpenter.delete_pools(f"{SCENARIO_LABEL}={scenario.name}")


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


def test_karpenter_floor_tolerating_gpu(scenario: Scenario, claims: NodeClaims,
                                        admission: AdmissionRecorder) -> None:
    """Head and floor tolerate the GPU taint: Karpenter buys a GPU node for them, raygate
    refuses it to each, and Karpenter, which never asks raygate, says they should schedule
    there and buys nothing else. raygate's admission API says so: no node is coming."""
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

    # TODAY'S BEHAVIOUR, to flip when native rules land: the GPU pool wins the name tie,
    # one GPU node is bought, raygate refuses it, and Karpenter buys nothing else.
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
    report.add("karpenter-1-tolerating", scenario.timeline(
        "Karpenter: head and floor tolerate the GPU taint (today: a GPU node raygate "
        "refuses, nothing else; raygate says NoNodeComing)") + claims.timeline()
        + admission.table())


def test_karpenter_floor_not_gpu_affinity(scenario: Scenario, claims: NodeClaims) -> None:
    """The same RayCluster with the required not-GPU term raygate's native rule will
    write: Karpenter reads it and buys one CPU node, where all three run."""
    spec = {"tolerations": [TOLERATE_GPU], "affinity": NOT_GPU}
    scenario.create(floor_cluster(scenario, spec))
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
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in ray_pods(scenario)}
    assert set(nodes.values()) == {history[0].node}, (nodes, history)
    report.add("karpenter-2-affinity", scenario.timeline(
        f"Karpenter: the same RayCluster with a required not-GPU affinity (one CPU node, "
        f"all Running in {took:.0f} s)") + claims.timeline())


def test_karpenter_marker_resource(scenario: Scenario, claims: NodeClaims,
                                   default_setup: Testbed) -> None:
    """``deploy/kube-scheduler-default``: the webhook adds ``raygate.io/managed: 1`` to
    every Ray pod's requests. kube-scheduler ignores it (``ignoredByScheduler``);
    Karpenter does not: no instance type offers it, so no pool fits any Ray pod. The
    RayCluster is the one that got a CPU node in the scenario before."""
    scenario.testbed.kubectl("label", "namespace", scenario.namespace,
                             f"{NAMESPACE_LABEL}=true")
    scenario.create(floor_cluster(scenario, {"tolerations": [TOLERATE_GPU],
                                             "affinity": NOT_GPU}, scheduler=SCHEDULER))
    pods = wait_until(f"the {PODS} Ray pods", lambda: (
        pods if len(pods := ray_pods(scenario)) == PODS else None), timeout=120)
    for pod in pods:
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert requests.get("raygate.io/managed") == "1", "the webhook marked the pod"
    names = [p["metadata"]["name"] for p in pods]

    def refused(name: str) -> bool:
        return any(pod == name and reason == "FailedScheduling" and "raygate.io/managed" in said
                   for _, pod, reason, said in claims.pod_events())

    wait_until("Karpenter failing every pod on raygate.io/managed",
               lambda: all(refused(name) for name in names), timeout=120)
    scenario.step("Karpenter: no instance type for any pod (raygate.io/managed)")

    # TODAY'S BEHAVIOUR, to flip when the marker is optional (native mode): no node is
    # bought, and the pods stay Pending.
    assert claims.history() == []
    assert all(not p["spec"].get("nodeName") for p in ray_pods(scenario))
    report.add("karpenter-3-marker", scenario.timeline(
        "Karpenter and the kube-scheduler-default setup: the webhook's raygate.io/managed "
        "request fits no instance type (today: no node)") + claims.timeline())


def test_karpenter_node_provisioning_then_running(scenario: Scenario, claims: NodeClaims,
                                                  admission: AdmissionRecorder) -> None:
    """The not-GPU RayCluster: while Karpenter launches its CPU node, the admission API
    says NodeProvisioning of each pod (naming the NodeClaim), then the pods run."""
    scenario.create(floor_cluster(scenario, {"tolerations": [TOLERATE_GPU],
                                             "affinity": NOT_GPU}))
    pods = wait_until(f"the {PODS} Ray pods", lambda: (
        pods if len(pods := ray_pods(scenario)) == PODS else None), timeout=120)
    for name in (p["metadata"]["name"] for p in pods):
        admission.wait_for_state(name, RUNNING_OR_GONE, last=True, timeout=180)
        assert "NodeProvisioning" in admission.states(name), admission.states(name)
    assert [h.instance_type for h in claims.history()] == ["cpu-4x"]
    report.add("karpenter-4-provisioning", scenario.timeline(
        "Karpenter launches a CPU node: raygate says NodeProvisioning, then the pods run")
        + claims.timeline() + admission.table())


def test_karpenter_no_instance_type_fits(scenario: Scenario, claims: NodeClaims,
                                         admission: AdmissionRecorder) -> None:
    """A worker asking 100 CPUs, which no instance type of any NodePool has: Karpenter
    says it cannot schedule it, raygate says NoNodeComing and holds the group's
    scale-up, quoting Karpenter."""
    spec = {"tolerations": [TOLERATE_GPU], "affinity": NOT_GPU}
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
    report.add("karpenter-5-no-fit", scenario.timeline(
        "Karpenter: a 100-CPU worker no instance type fits; raygate says NoNodeComing")
        + claims.timeline() + admission.table())
