"""The seed's delete-and-recreate loop on the real Ray autoscaler (Ray 2.60, autoscaler v2)
with the real KubeRay operator and kube-scheduler, then without it under raygate's.

The head is a local ``ray start --head`` standing in for the head pod (kwok runs the pod);
the autoscaler runs as KubeRay's sidecar does, under the RayCluster's ServiceAccount.
Demand: one bundle of 8 CPU (``request_resources``) for the ``overflow`` group while the
only node has 4: the pod KubeRay creates stays Pending with ``Insufficient cpu``. Ray's
timeout for an instance stuck in ALLOCATED (3600 s by default in 2.60) is shortened to
30 s with Ray's own setting, ``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from e2e import report
from e2e.objects import Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from testbed.cluster import Testbed
from testbed.ray_head import start_autoscaler, start_head

pytestmark = pytest.mark.e2e

TIMEOUT = 30  # seconds a pod may sit ALLOCATED before Ray replaces it
WINDOW = 150.0  # seconds watched after the first pod


def autoscaled_raycluster(scenario: Scenario) -> dict[str, Any]:
    body = raycluster("work", scenario.namespace, scenario.name,
                      [Group("overflow", 0, "8", min=0, max=3)], head_cpu="1")
    body["spec"]["autoscalerOptions"] = {"version": "v2"}
    body["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    return body


def request_cpu(gcs: str, cpu: int) -> None:
    """Demand as a driver states it; it stays with the GCS after the driver exits."""
    subprocess.run([sys.executable, "-c", (
        "import ray; from ray.autoscaler.sdk import request_resources; "
        f"ray.init({gcs!r}); request_resources(bundles=[{{'CPU': {cpu}}}])")],
        check=True, capture_output=True, timeout=120)


def loop(scenario: Scenario, testbed: Testbed, *, raygate: bool) -> list[str]:
    """Bring it up, state the demand, watch WINDOW seconds; the overflow pods seen."""
    scenario.setup([node(f"{scenario.name}-cpu-a", scenario.name, cpu=4)])
    scenario.create(autoscaled_raycluster(scenario))
    head = wait_until("the head running", lambda: next(
        (p["metadata"]["name"] for p in scenario.running("headgroup")), None), timeout=90)
    if raygate:
        # The autoscaler asks raygate's admission API (authz on) under its own token.
        testbed.kubectl("create", "rolebinding", "work-reads-admission", "-n",
                        scenario.namespace, "--clusterrole=raygate-status-reader",
                        f"--serviceaccount={scenario.namespace}:work")
    gcs = start_head(testbed, head)
    scenario.step("Ray head up (local, as the head pod)")
    names = [f"ray-head-{head}"]
    names.append(start_autoscaler(testbed, "work", scenario.namespace, head, gcs,
                                  raygate=raygate, allocate_timeout=TIMEOUT).name)
    try:
        request_cpu(gcs, 8)
        scenario.step("requested 8 CPU")
        wait_until("an overflow pod", lambda: scenario.group_pods("overflow"), timeout=120)
        first = time.monotonic()
        scenario.step("first overflow pod created")
        while time.monotonic() - first < WINDOW:
            time.sleep(1)
        scenario.step(f"watched {WINDOW:.0f} s")
        return [h.name for h in scenario.history() if h.group == "overflow"]
    finally:
        for name in reversed(names):
            testbed.processes.pop(name).stop()


def test_stock_autoscaler_deletes_and_recreates_the_pending_pod(
        scenario: Scenario, testbed: Testbed) -> None:
    pods = loop(scenario, testbed, raygate=False)
    deleted = [h for h in scenario.history() if h.group == "overflow" and h.deleting]
    assert len(pods) >= 3 and len(deleted) >= 2, (
        f"the loop: {len(pods)} pods created, {len(deleted)} deleted in {WINDOW:.0f} s")
    assert all(h.bound is None for h in scenario.history() if h.group == "overflow")
    report.add("autoscaler-1-stock", scenario.timeline(
        f"Ray 2.60's stock autoscaler: the pending pod is deleted and recreated "
        f"(ALLOCATED timeout {TIMEOUT} s)"))


def test_raygate_autoscaler_keeps_the_pod_that_waits_for_capacity(
        scenario: Scenario, testbed: Testbed) -> None:
    pods = loop(scenario, testbed, raygate=True)
    deleted = [h.name for h in scenario.history() if h.group == "overflow" and h.deleting]
    assert (len(pods), deleted) == (1, []), "one pod, kept while it waits for capacity"
    report.add("autoscaler-2-raygate", scenario.timeline(
        f"raygate-autoscaler on the same cluster: the pod waits for capacity and is kept "
        f"(ALLOCATED timeout {TIMEOUT} s)"))
