"""An autoscaled RayCluster under Kueue with elastic workload slices (#41 item 3): Kueue
0.17 with ``ElasticJobsViaWorkloadSlices`` on (``testbed.kueue``), the RayCluster annotated
``kueue.x-k8s.io/elastic-job: "true"`` (Kueue's webhook then puts its scheduling gate
``kueue.x-k8s.io/elastic-job`` in the head and worker templates, and lets
``enableInTreeAutoscaling`` through), the real KubeRay, ray-scheduler with raygate.

A 2-CPU head and 2 workers of 2 CPU; the ClusterQueue has 6 CPU. The test scales the
group as the Ray autoscaler does (``spec.workerGroupSpecs[].replicas``):

1. Admitted: Kueue admits the first slice (one Workload the RayCluster owns), lifts its
   gate from the pods, ray-scheduler binds them; raygate names that Workload, admitted.
2. Past quota: 3 workers (8 CPU). Kueue makes a new slice that replaces the first
   (``workload-slice-replacement-for``) and cannot reserve quota for it; the new worker
   waits behind Kueue's gate. raygate: the gang is the new slice, not admitted, Kueue's
   message quoted; the new worker WaitingForGangAdmission, Kueue's gate and words named,
   never WaitingForCapacity or Stuck; the group's scale-up held for Kueue's quota.
3. Back within it: 2 workers again, the waiting one named in ``workersToDelete`` as the Ray
   autoscaler names it (with autoscaling on KubeRay deletes no worker of its own choice:
   set to 2 replicas alone, the third worker stayed, Kueue admitted the shrunk slice and
   lifted its gate, and 3 workers ran on 2 workers' quota). Kueue shrinks the waiting
   slice and admits it in the first's place (the first ends Finished,
   ``WorkloadSliceReplaced``); KubeRay deletes the waiting worker. raygate: the gang is
   the new slice, admitted; no pod waits.
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
from e2e.test_kueue_rayjob import _condition
from raygate.contract.admission_status import AdmissionStatus
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

CLUSTER = "elastic"
ELASTIC = "kueue.x-k8s.io/elastic-job"
REPLACES = "kueue.x-k8s.io/workload-slice-replacement-for"


def elastic_cluster(scenario: Scenario) -> dict[str, Any]:
    body = raycluster(CLUSTER, scenario.namespace, scenario.name,
                      [Group("workers", replicas=2, cpu="2", min=0, max=4)])
    body["metadata"]["labels"] = {QUEUE_LABEL: "ray-queue"}
    body["metadata"]["annotations"] = {ELASTIC: "true"}
    return body


def _slices(scenario: Scenario) -> list[dict[str, Any]]:
    return [w for w in scenario.api.items(f"{KUEUE}/namespaces/{scenario.namespace}/workloads")
            if any(r["kind"] == "RayCluster" and r["name"] == CLUSTER
                   for r in w["metadata"].get("ownerReferences") or [])]


def _new_slice(scenario: Scenario, old: str) -> str | None:
    for w in _slices(scenario):
        if (w["metadata"].get("annotations") or {}).get(REPLACES, "").endswith(f"/{old}"):
            name: str = w["metadata"]["name"]
            return name
    return None


def _said(said: Said, source: str, admitted: bool) -> AdmissionStatus | None:
    status = said.get()
    if status is None or status.gang.source is None:
        return None
    return status if (status.gang.source.name, status.gang.admitted) == (
        source, admitted) else None


@pytest.fixture
def workloads(scenario: Scenario) -> Iterator[GangRecorder]:
    recorder = GangRecorder(scenario.api, f"{KUEUE}/namespaces/{scenario.namespace}/workloads",
                            scenario.started)
    yield recorder
    recorder.close()


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def first_slice(scenario: Scenario, workloads: GangRecorder, said: Said) -> str:
    """Step 1; returns the first slice."""
    first: str = wait_until("the first slice", lambda: next(
        (w["metadata"]["name"] for w in _slices(scenario)), None))
    wait_until("the first slice Admitted", lambda: _condition(workloads, first, "Admitted",
                                                              "True"))
    scenario.step(f"Workload {first} (the first slice) admitted")
    cluster = scenario.api.get(
        f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{CLUSTER}")
    assert ELASTIC in _gates({"spec": cluster["spec"]["headGroupSpec"]["template"]["spec"]})
    wait_until("the head and 2 workers running", lambda: len(scenario.running(
        "headgroup")) == 1 and len(scenario.running("workers")) == 2, timeout=60)
    scenario.step("head and 2 workers running (Kueue lifted its gate)")
    status = wait_until("raygate saying admitted", lambda: _said(said, first, True))
    assert {g.name: g.scale_up.action for g in status.groups}["workers"] == "proceed"
    return first


def past_quota(scenario: Scenario, workloads: GangRecorder, said: Said,
               first: str) -> tuple[str, str]:
    """Step 2; returns the new slice and the worker that waits for it."""
    scenario.scale(CLUSTER, "workers", 3)
    new: str = wait_until("the new slice", lambda: _new_slice(scenario, first))
    quota = wait_until("the new slice QuotaReserved=False", lambda: _condition(
        workloads, new, "QuotaReserved", "False"))
    scenario.step(f"Workload {new} (replaces {first}): QuotaReserved=False {quota[2]}: "
                  f"{quota[3]}")
    status = wait_until("raygate naming the new slice", lambda: _said(said, new, False))
    assert quota[3] in status.gang.reason and f"replaces {scenario.namespace}/{first}" in (
        status.gang.reason), status.gang.reason
    waiting = wait_until("the new worker listed", lambda: next(
        (p for p in status_now(said).pods if p.group == "workers"), None))
    scenario.step(f"raygate: {waiting.name} {waiting.state}: {waiting.reason}")
    assert waiting.state == "WaitingForGangAdmission", waiting
    assert ELASTIC in waiting.reason and quota[3] in waiting.reason, waiting.reason
    hold = {g.name: g.scale_up for g in status_now(said).groups}["workers"]
    assert hold.action == "hold" and "Kueue's quota" in hold.reason, hold
    pod = next(p for p in scenario.group_pods("workers") if p["metadata"]["name"]
               == waiting.name)
    assert ELASTIC in _gates(pod) and not pod["spec"].get("nodeName")
    return new, waiting.name


def scale_down(scenario: Scenario, worker: str) -> None:
    """As the Ray autoscaler scales down (KubeRay deletes no worker on its own when the
    cluster autoscales): 2 replicas, and the worker to delete named."""
    path = f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{CLUSTER}"
    scenario.api.json_patch(path, [
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2},
        {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
         "value": {"workersToDelete": [worker]}}])
    scenario.step(f"scaled {CLUSTER}/workers to 2 replicas, {worker} to delete")


def status_now(said: Said) -> AdmissionStatus:
    status = said.get()
    assert status is not None
    return status


def test_kueue_elastic_raycluster_past_quota_and_back(
        kueue: Testbed, scenario: Scenario, workloads: GangRecorder, reader_token: str) -> None:
    scenario.setup(nodes(scenario.name))
    for body in queues(scenario, cpu="6"):
        scenario.create(body)
    scenario.create(elastic_cluster(scenario))
    said = Said(kueue.raygate_url, reader_token, scenario.namespace, CLUSTER, scenario.started)
    try:
        first = first_slice(scenario, workloads, said)
        new, worker = past_quota(scenario, workloads, said, first)
        scale_down(scenario, worker)
        wait_until("the new slice Admitted", lambda: _condition(workloads, new, "Admitted",
                                                                "True"), timeout=60)
        finished = wait_until("the first slice Finished", lambda: _condition(
            workloads, first, "Finished", "True"))
        scenario.step(f"Workload {new} admitted; {first}: Finished {finished[2]}")
        assert finished[2] == "WorkloadSliceReplaced", finished
        status = wait_until("raygate: the new slice admitted, no pod waiting", lambda: (
            s if (s := _said(said, new, True)) is not None and not s.pods else None))
        assert {g.name: g.scale_up.action for g in status.groups}["workers"] == "proceed"
        wait_until("the waiting worker gone", lambda: all(
            p["metadata"]["name"] != worker for p in scenario.group_pods("workers")))
        assert len(scenario.running("workers")) == 2
        scenario.step("raygate: the new slice admitted, 2 workers running, none waiting")
        states = {a.pods[0].state for a in said.answers(10**9) if a.pods
                  and a.pods[0].group == "workers"}
        assert not states & {"WaitingForCapacity", "Stuck"}, states
        report.add("kueue-4-elastic", scenario.timeline(
            "Kueue's elastic slices: an autoscaled RayCluster scaled past its quota and back")
            + "\nThe Workloads as Kueue wrote them:\n\n" + workloads.table()
            + "\nKueue's events:\n\n" + events(scenario.api, scenario.namespace, source="kueue")
            + "\nWhat raygate's admission API said of the RayCluster:\n\n" + said.table())
    finally:
        said.close()
