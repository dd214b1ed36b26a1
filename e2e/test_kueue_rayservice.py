"""A RayService queued in Kueue, admitted and placed (#41 item 4): Kueue's RayService
integration on as it ships (``testbed.kueue``), the real KubeRay 1.6.1, ray-scheduler with
raygate. Kueue queues the RayService as one Workload the RayService owns, suspending it
through ``spec.rayClusterConfig.suspend``; KubeRay makes the RayService's RayCluster
suspended (no pods) and, once Kueue admits the Workload and resumes the RayService,
toggles ``suspend`` on that same RayCluster in place (``shouldUpdateCluster``).

What it does not show: the Serve application. KubeRay deploys it through the head's
dashboard, which no kwok pod runs; the RayService never becomes Ready, and KubeRay keeps
retrying. The scenario is about admission and placement only.

A 2-CPU head and one 2-CPU worker, no autoscaling, a one-application ``serveConfigV2``.

1. Queued: 2 CPU of quota. The Workload waits (``QuotaReserved=False``, ``Pending``);
   the RayCluster is suspended with no pod. raygate: the gang is the RayService's
   Workload, not admitted, Kueue's message quoted, scale-up held.
2. Admitted: the quota raised to 6 CPU. Kueue admits the Workload; KubeRay resumes the
   RayCluster and makes the pods; ray-scheduler binds them to CPU nodes. raygate: the gang
   admitted (that Workload, minMember 2), the workers' scale-up may proceed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.gangs import GangRecorder, events
from e2e.objects import Group, raycluster
from e2e.scenario import Scenario, wait_until
from e2e.test_kueue import KUEUE, QUEUE_LABEL, Said, nodes, queues
from e2e.test_kueue_rayjob import _clusters, _condition
from raygate.contract.admission_status import AdmissionStatus
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

SERVICE = "serve"
SERVE_CONFIG = """applications:
  - name: hello
    import_path: hello:app
    route_prefix: /
"""


def rayservice(scenario: Scenario) -> dict[str, Any]:
    cluster = raycluster("unused", scenario.namespace, scenario.name,
                         [Group("workers", replicas=1, cpu="2", min=1, max=1)],
                         autoscaling=False)
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": SERVICE, "namespace": scenario.namespace,
                         "labels": {QUEUE_LABEL: "ray-queue"}},
            "spec": {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": cluster["spec"]}}


def _services_workload(scenario: Scenario) -> str | None:
    for item in scenario.api.items(f"{KUEUE}/namespaces/{scenario.namespace}/workloads"):
        refs = item["metadata"].get("ownerReferences") or []
        if any(r["kind"] == "RayService" and r["name"] == SERVICE for r in refs):
            name: str = item["metadata"]["name"]
            return name
    return None


def _said(said: Said, admitted: bool) -> AdmissionStatus | None:
    status = said.get()
    return status if status is not None and status.gang.admitted is admitted else None


@pytest.fixture
def workloads(scenario: Scenario) -> Iterator[GangRecorder]:
    recorder = GangRecorder(scenario.api, f"{KUEUE}/namespaces/{scenario.namespace}/workloads",
                            scenario.started)
    yield recorder
    recorder.close()


def queued(scenario: Scenario, workloads: GangRecorder) -> tuple[str, str]:
    """Step 1; returns the RayService's Workload and its RayCluster."""
    workload = wait_until("the RayService's Workload", lambda: _services_workload(scenario))
    quota = wait_until("QuotaReserved=False", lambda: _condition(
        workloads, workload, "QuotaReserved", "False"))
    scenario.step(f"Workload {workload} (owned by RayService {SERVICE}): "
                  f"QuotaReserved=False {quota[2]}: {quota[3]}")
    assert quota[2] == "Pending" and "insufficient" in quota[3], quota
    cluster = wait_until("the RayService's RayCluster", lambda: next(
        (c for c in _clusters(scenario)), None))
    name: str = cluster["metadata"]["name"]
    owner = cluster["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("RayService", SERVICE)
    assert cluster["spec"].get("suspend") is True, "Kueue's suspension, copied by KubeRay"
    scenario.step(f"RayCluster {name} made by KubeRay, suspended")
    assert scenario.live_pods() == []
    return workload, name


def test_kueue_rayservice_queued_admitted_placed(kueue: Testbed, scenario: Scenario,
                                                 workloads: GangRecorder,
                                                 reader_token: str) -> None:
    scenario.setup(nodes(scenario.name))
    for body in queues(scenario, cpu="2"):
        scenario.create(body)
    scenario.create(rayservice(scenario))
    workload, cluster = queued(scenario, workloads)
    said = Said(kueue.raygate_url, reader_token, scenario.namespace, cluster,
                scenario.started)
    try:
        status = wait_until("raygate saying not admitted", lambda: _said(said, False))
        assert status.gang.source is not None and status.gang.source.name == workload
        assert "insufficient" in status.gang.reason, status.gang.reason
        assert {g.name: g.scale_up.action for g in status.groups}["workers"] == "hold"
        scenario.step(f"raygate: not admitted: {status.gang.reason}")

        scenario.api.json_patch(f"{KUEUE}/clusterqueues/{scenario.name}-cq", [
            {"op": "replace", "value": "6",
             "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota"}])
        scenario.step("raised the ClusterQueue's CPU quota to 6")
        wait_until("the Workload Admitted", lambda: _condition(
            workloads, workload, "Admitted", "True"))
        wait_until("the head and the worker running", lambda: len(scenario.running(
            "headgroup")) == 1 and len(scenario.running("workers")) == 1, timeout=90)
        kinds = {scenario.node_kind(p) for p in scenario.live_pods()}
        scenario.step(f"head and worker running on {sorted(kinds)} nodes")
        assert kinds == {"CPU"}, kinds
        status = wait_until("raygate saying admitted", lambda: _said(said, True))
        assert status.gang.source is not None and status.gang.source.name == workload
        assert status.gang.min_member == 2, "Kueue's pod sets: the head and 1 worker"
        assert {g.name: g.scale_up.action for g in status.groups}["workers"] == "proceed"
        scenario.step("raygate: admitted (the RayService's Workload)")
        service = scenario.api.get(
            f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayservices/{SERVICE}")
        ready = [c for c in service.get("status", {}).get("conditions") or []
                 if c["type"] == "Ready"]
        scenario.step(f"RayService Ready: {ready[0]['status'] if ready else '(none)'} "
                      f"{ready[0].get('reason', '') if ready else ''} (no dashboard runs)")
        report.add("kueue-5-rayservice", scenario.timeline(
            "Kueue with its RayService integration: a RayService queued, then admitted and "
            "placed") + "\nThe Workload as Kueue wrote it:\n\n" + workloads.table()
            + "\nKueue's events:\n\n" + events(scenario.api, scenario.namespace, source="kueue")
            + "\nWhat raygate's admission API said of the RayService's RayCluster:\n\n"
            + said.table())
    finally:
        said.close()
