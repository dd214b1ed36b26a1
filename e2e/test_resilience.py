"""raygate and the API server going away mid-scenario, for real.

- raygate killed (SIGKILL): kube-scheduler keeps scheduling without it (the extender is
  ``ignorable: true`` in deploy/), raygate relists when it is back, is ready again, and
  answers as before, with what happened while it was down.
- kube-apiserver restarted: every watch raygate holds ends and the new server's watch
  cache starts afresh; raygate resumes (relisting where the old position is gone) and
  loses nothing made after the restart.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from e2e import report
from e2e.objects import node, raycluster, tolerating_gpu_groups
from e2e.scenario import Scenario, wait_until
from raygate.client import connect
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e


def admission(testbed: Testbed, token: str, namespace: str, name: str) -> dict[str, Any]:
    """The status's groups and pod states, without its version (which may change)."""
    with connect(testbed.raygate_url, token=lambda: token) as client:
        status = client.get(namespace, name)
    return {"groups": {g.name: (g.floor, g.desired, g.scheduled, g.running, g.pending)
                       for g in status.groups},
            "pods": sorted((p.name, p.state) for p in status.pods)}


def readyz(testbed: Testbed) -> dict[str, Any]:
    with urllib.request.urlopen(f"{testbed.raygate_url}/readyz", timeout=5) as reply:
        result: dict[str, Any] = json.loads(reply.read())
        return result


def running_counts(scenario: Scenario) -> dict[str, int]:
    return {group: len(scenario.running(group)) for group in ("headgroup", "baseline",
                                                              "overflow")}


def start_cluster(scenario: Scenario, cluster: str, overflow: int) -> None:
    """Two roomy CPU nodes and a RayCluster of a head, 2 floor workers and ``overflow``
    overflow workers, all running."""
    name = scenario.name
    scenario.setup([node(f"{name}-cpu-a", name, cpu=16), node(f"{name}-cpu-b", name, cpu=16)])
    scenario.create(raycluster(cluster, scenario.namespace, name,
                               tolerating_gpu_groups(baseline=2, overflow=overflow)))
    wait_until("all running", lambda: running_counts(scenario) == {
        "headgroup": 1, "baseline": 2, "overflow": overflow}, timeout=90)


def test_raygate_killed_scheduling_goes_on_and_it_catches_up(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    start_cluster(scenario, "steady", overflow=1)
    before = wait_until("raygate's status agrees", lambda: (
        s := admission(testbed, reader_token, scenario.namespace, "steady"))["groups"][
            "overflow"][3] == 1 and s)

    testbed.kill_raygate()
    scenario.step("raygate killed (SIGKILL)")
    scenario.scale("steady", "overflow", 2)
    wait_until("the new overflow worker bound while raygate is down",
               lambda: len(scenario.running("overflow")) == 2, timeout=90)
    scenario.step("kube-scheduler bound the new worker without raygate")

    testbed.start_raygate()
    scenario.step("raygate restarted and ready")
    after = admission(testbed, reader_token, scenario.namespace, "steady")
    assert after["groups"]["overflow"][3] == 2, "it knows what happened while it was down"
    assert {k: v for k, v in after["groups"].items() if k != "overflow"} == {
        k: v for k, v in before["groups"].items() if k != "overflow"}
    assert after["pods"] == before["pods"] == []
    report.add("resilience-1-raygate-down", scenario.timeline(
        "raygate killed: kube-scheduler schedules on (ignorable), raygate catches up"))


def test_apiserver_restart_raygate_resumes_and_loses_nothing(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    start_cluster(scenario, "resume", overflow=0)
    before = readyz(testbed)["kinds"]

    testbed.restart_apiserver()
    scenario.step("kube-apiserver restarted")
    wait_until("raygate ready again", lambda: readyz(testbed)["status"] == "ready", timeout=60)
    scenario.scale("resume", "overflow", 2)
    wait_until("2 overflow workers running", lambda: len(scenario.running("overflow")) == 2,
               timeout=90)
    status = wait_until("raygate sees the workers made after the restart", lambda: (
        s := admission(testbed, reader_token, scenario.namespace, "resume"))["groups"][
            "overflow"][3] == 2 and s, timeout=30)
    assert status["groups"]["baseline"][3] == 2
    kinds = ("Node", "Pod", "RayCluster")
    # A kind whose retries grew while the server was down waits out its backoff (at most
    # 30 s) before it lists again; Pod, which the status above needed, may be back first.
    def resumed() -> dict[str, Any] | None:
        now = readyz(testbed)["kinds"]
        return now if all(now[kind]["state"] == "watching" for kind in kinds) else None

    after = wait_until("every watch resumed", resumed, timeout=60)
    for kind in kinds:
        # The new server's watch cache starts at its own resourceVersion: raygate's old
        # position is gone (410), so it lists again, and watches on from there.
        assert after[kind]["relists"] > before[kind]["relists"], (kind, after[kind])
    assert after["Pod"]["events"] > before["Pod"]["events"]
    scenario.step("restarts the testbed made (as a kubelet would): " + (", ".join(
        f"{name} at {t:.0f} s (exit {code})" for t, name, code in testbed.restarts) or "none"))
    report.add("resilience-2-apiserver", scenario.timeline(
        "kube-apiserver restarted under raygate, kube-scheduler and KubeRay"))
