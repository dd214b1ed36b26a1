"""The seed's delete-and-recreate loop on the real Ray autoscaler (Ray 2.60, autoscaler v2)
with the real KubeRay operator and kube-scheduler, then without it under raygate's.

The head is a local ``ray start --head`` standing in for the head pod (kwok runs the pod);
the autoscaler runs as KubeRay's sidecar does, under the RayCluster's ServiceAccount.
Demand: one bundle of 8 CPU (``request_resources``) for the ``overflow`` group while the
only node has 4: the pod KubeRay creates stays Pending with ``Insufficient cpu``. Ray's
timeout for an instance stuck in ALLOCATED (3600 s by default in 2.60) is shortened with
Ray's own setting, ``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S``: to 15 s where
the pod only waits (stock and raygate side by side), to 30 s where a replacement's raylet
has to start within it (when capacity arrives).

Each scenario lasts minutes (the timeout has to pass, several times): ``slow``.
"""

from __future__ import annotations

import time

import pytest

from e2e import report
from e2e.admission import AdmissionRecorder
from e2e.objects import node
from e2e.ray import LOOP, TIMEOUT, ray_cluster
from e2e.scenario import PodHistory, Scenario, wait_until
from testbed.cluster import Testbed
from testbed.ray_head import cluster_nodes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The side-by-side pair: a pod that only waits needs no more than a short timeout to show
# the loop (stock) or that it is kept (raygate); the loop takes at most SHORT + LOOP a turn.
SHORT = 15
WINDOW = 2 * (SHORT + LOOP) + 10.0  # seconds watched after the first pod: the timeout passes twice
LOOPS = 4 * (SHORT + LOOP) + 30.0  # the longest the stock loop may take for two turns


def watch(scenario: Scenario, seconds: float) -> None:
    seconds = max(seconds, 0.0)
    time.sleep(seconds)
    scenario.step(f"watched {seconds:.0f} s")


def overflow(scenario: Scenario) -> list[PodHistory]:
    return [h for h in scenario.history() if h.group == "overflow"]


def test_stock_autoscaler_deletes_and_recreates_the_pending_pod(
        scenario: Scenario, testbed: Testbed) -> None:
    with ray_cluster(scenario, testbed, raygate=False, allocate_timeout=SHORT) as ray:
        # Until the loop has turned twice (not a fixed time: what is asserted is the loop).
        wait_until("a pod deleted and recreated twice", lambda: len(overflow(
            scenario)) >= 3 and sum(h.deleting is not None for h in overflow(scenario)) >= 2,
            timeout=LOOPS, every=0.5)
        scenario.step("the loop twice: a third pod created, two deleted")
        decisions = ray.decisions(scenario)
    pods = overflow(scenario)
    deleted = [h for h in pods if h.deleting]
    assert len(pods) >= 3 and len(deleted) >= 2, (
        f"the loop: {len(pods)} pods created, {len(deleted)} deleted")
    assert all(h.bound is None for h in pods)
    report.add("autoscaler-1-stock", scenario.timeline(
        f"Ray 2.60's stock autoscaler: the pending pod is deleted and recreated "
        f"(ALLOCATED timeout {SHORT} s)") + per_minute(scenario) + decisions)


def test_raygate_autoscaler_keeps_the_pod_that_waits_for_capacity(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        with ray_cluster(scenario, testbed, raygate=True, allocate_timeout=SHORT) as ray:
            watch(scenario, WINDOW)
            decisions = ray.decisions(scenario)
    finally:
        admission.close()
    pods = overflow(scenario)
    assert ([h.name for h in pods], [h.name for h in pods if h.deleting]) == (
        [pods[0].name], []), "one pod, kept while it waits for capacity"
    said = admission.states(pods[0].name)
    assert "WaitingForCapacity" in said and set(said) <= {"Starting", "WaitingForCapacity"}
    report.add("autoscaler-2-raygate", scenario.timeline(
        f"raygate-autoscaler on the same cluster: the pod waits for capacity and is kept "
        f"(ALLOCATED timeout {SHORT} s)") + per_minute(scenario) + decisions
        + "\nraygate's admission API about the RayCluster's pods:\n\n" + admission.table())


def test_raygate_autoscaler_when_capacity_arrives(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    """Kept while it waits; once a node with room arrives the pod is bound. The first pod
    bound never runs Ray (a stuck pod: nothing starts its raylet) and is replaced when
    Ray's timeout has passed since raygate last said to keep it; the replacement's raylet
    is started (as its container would) and joins, and that worker stays."""
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        with ray_cluster(scenario, testbed, raygate=True) as ray:
            first = overflow(scenario)[0]  # watched past Ray's timeout, and a loop to act
            watch(scenario, first.created + TIMEOUT + 2 * LOOP - scenario.now())
            assert first.deleting is None, "kept past the timeout while it waits"
            scenario.add_node(node(f"{scenario.name}-cpu-b", scenario.name, cpu=8))
            scenario.step("added an 8-CPU node")
            wait_until(f"{first.name} running (kwok)", lambda: first.running, timeout=60)
            scenario.step(f"{first.name} bound and running; no raylet starts for it")
            wait_until(f"{first.name} replaced", lambda: first.deleting, timeout=TIMEOUT + 90)
            scenario.step(f"{first.name} deleted by the autoscaler")
            # Its raylet starts once it is bound, as its container would start: Ray's
            # ALLOCATED timeout (30 s here) runs from the pod's creation, and on a loaded
            # machine kwok's Running and a raylet's start can take most of it.
            second = wait_until("its replacement bound", lambda: next(
                (h for h in overflow(scenario) if h.name != first.name and h.bound),
                None), timeout=120)
            ray.add_worker(second.name, "overflow", cpu=8)
            scenario.step(f"raylet of {second.name} joined")
            wait_until("the autoscaler seeing the worker running", lambda: any(
                n["instance_id"] == second.name and n["status"] in ("RUNNING", "IDLE")
                for n in cluster_nodes(ray.gcs)), timeout=60)
            # Until its ALLOCATED timeout would have passed, had it not joined.
            watch(scenario, second.created + TIMEOUT + 2 * LOOP - scenario.now())
            joined = cluster_nodes(ray.gcs)
            decisions = ray.decisions(scenario)
    finally:
        admission.close()
    pods = overflow(scenario)
    assert [h.name for h in pods] == [first.name, second.name]
    assert second.deleting is None, "the worker that runs Ray is kept"
    assert first.running is not None and first.deleting is not None
    assert first.deleting - first.running >= TIMEOUT - LOOP, (
        "a stuck pod gets the whole timeout, counted from raygate's last keep")
    assert "WaitingForCapacity" in admission.states(first.name)
    assert any(n["instance_id"] == second.name and n["type"] == "overflow" for n in joined)
    report.add("autoscaler-3-capacity", scenario.timeline(
        "raygate-autoscaler when capacity arrives: the waiting pod is bound; one that never "
        f"runs Ray is replaced after the timeout ({TIMEOUT} s); a worker that joins stays")
        + per_minute(scenario) + decisions
        + "\nraygate's admission API about the RayCluster's pods:\n\n" + admission.table()
        + f"\nRay nodes at the end (`get_cluster_status`): `{joined}`\n")


def per_minute(scenario: Scenario) -> str:
    """Overflow pods created and deleted in each minute of the scenario."""
    pods = overflow(scenario)
    end = max([scenario.now(), *(h.created for h in pods)])
    rows = ["", "| minute | overflow pods created | deleted |", "|---:|---:|---:|"]
    for minute in range(int(end // 60) + 1):
        created = sum(int(h.created // 60) == minute for h in pods)
        deleted = sum(h.deleting is not None and int(h.deleting // 60) == minute for h in pods)
        rows.append(f"| {minute} | {created} | {deleted} |")
    return "\n".join(rows) + "\n"
