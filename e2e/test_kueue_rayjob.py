"""A RayJob queued in Kueue, as people run it (#41): Kueue's RayJob integration on (as it
ships, ``testbed.kueue``), the real KubeRay, ray-scheduler with raygate. Kueue queues the
RayJob as one Workload the RayJob owns; the RayCluster KubeRay makes for it carries no
Workload of its own, and raygate's admission API names the RayJob's.

The RayJob: ``HTTPMode`` (KubeRay submits the job to the head's dashboard, which no kwok
pod runs: it retries every 3 s, and the RayJob stays ``Running``, where KubeRay reads
``spec.suspend`` first), so no submitter Job, whose pod would never finish without a
kubelet; Kueue's pod sets are the head and the workers. Not ``InteractiveMode``: KubeRay
1.6.1 never reads ``spec.suspend`` in its ``Waiting`` state (``rayjob_controller.go``), so
Kueue's eviction would never stop it. A 2-CPU head and one 2-CPU worker,
``shutdownAfterJobFinishes`` (Kueue's webhook requires it). Its ClusterQueue preempts lower
priorities within itself.

1. Queued: 2 CPU of quota. Kueue's webhook suspends the RayJob, its Workload waits
   (``QuotaReserved=False``, ``Pending``), and KubeRay makes no RayCluster for a suspended
   RayJob: raygate has no RayCluster to answer for.
2. Admitted: the quota raised to 6 CPU. KubeRay makes the RayCluster; raygate says
   admitted, naming the RayJob's Workload (minMember 2), scale-up may proceed.
3. Evicted: a Workload of priority 1000 asking 4 CPU comes to the same ClusterQueue; Kueue
   preempts the RayJob's (``Evicted=True``, ``Preempted``) and suspends the RayJob, and
   KubeRay deletes the RayCluster. raygate says not admitted from the eviction on, while
   the RayCluster is still there: the test holds the RayCluster's deletion with a
   finalizer of its own, so that the window between Kueue's eviction and the RayCluster's
   going (milliseconds here, where no pod has a grace period to run out) can be asked
   about every 0.1 s; it lets go once raygate has answered.
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
from raygate.contract.admission_status import AdmissionStatus
from testbed.api import ApiError
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

JOB = "job"
HOLD = "testbed.raygate.dev/hold-teardown"


def preempting_queues(scenario: Scenario) -> list[dict[str, Any]]:
    """``test_kueue.queues`` with 2 CPU, its ClusterQueue preempting lower priorities."""
    bodies = queues(scenario, cpu="2")
    bodies[1]["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return bodies


def rayjob(scenario: Scenario) -> dict[str, Any]:
    cluster = raycluster("unused", scenario.namespace, scenario.name,
                         [Group("workers", replicas=1, cpu="2", min=1, max=1)],
                         autoscaling=False)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": JOB, "namespace": scenario.namespace,
                         "labels": {QUEUE_LABEL: "ray-queue"}},
            "spec": {"submissionMode": "HTTPMode", "entrypoint": "python -c pass",
                     "shutdownAfterJobFinishes": True, "rayClusterSpec": cluster["spec"]}}


def preemptor(scenario: Scenario) -> dict[str, Any]:
    """A Workload of no job (Kueue admits it as it is; nothing runs), priority 1000."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "urgent", "namespace": scenario.namespace},
            "spec": {"queueName": "ray-queue", "priority": 1000, "podSets": [{
                "name": "main", "count": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "4"}}}]}}}]}}


def _job(scenario: Scenario) -> dict[str, Any]:
    return scenario.api.get(f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayjobs/{JOB}")


def _jobs_workload(scenario: Scenario) -> str | None:
    for item in scenario.api.items(f"{KUEUE}/namespaces/{scenario.namespace}/workloads"):
        refs = item["metadata"].get("ownerReferences") or []
        if any(r["kind"] == "RayJob" and r["name"] == JOB for r in refs):
            name: str = item["metadata"]["name"]
            return name
    return None


def _clusters(scenario: Scenario) -> list[dict[str, Any]]:
    return scenario.api.items(f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters")


def _condition(workloads: GangRecorder, name: str, kind: str, status: str,
               ) -> tuple[str, str, str, str] | None:
    found = workloads.condition(name, kind)
    return found if found is not None and found[1] == status else None


def _said(said: Said, admitted: bool, phase: str) -> AdmissionStatus | None:
    status = said.get()
    return status if status is not None and (status.gang.admitted, status.gang.phase) == (
        admitted, phase) else None


def _release(scenario: Scenario, cluster: str) -> None:
    path = f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{cluster}"
    try:
        held = scenario.api.get(path)["metadata"].get("finalizers") or []
        if HOLD in held:
            scenario.api.json_patch(path, [{"op": "remove",
                                            "path": f"/metadata/finalizers/{held.index(HOLD)}"}])
    except ApiError as exc:
        if exc.status != 404:
            raise


def _never_admitted_again(said: Said, workloads: GangRecorder, workload: str) -> float:
    """Once raygate said not admitted after the eviction, it never says admitted again;
    returns how long after Kueue's ``Evicted=True`` it first said so."""
    evicted_at = min(w.at for w in list(workloads.written) if w.name == workload
                     and any(c[:2] == ("Evicted", "True") for c in w.conditions))
    answers = [(t, a) for t, _, a in list(said.rows) if a is not None]
    first = min(t for t, a in answers if t >= evicted_at and not a.gang.admitted)
    assert [t for t, a in answers if t >= first and a.gang.admitted] == []
    return first - evicted_at


@pytest.fixture
def workloads(scenario: Scenario) -> Iterator[GangRecorder]:
    recorder = GangRecorder(scenario.api, f"{KUEUE}/namespaces/{scenario.namespace}/workloads",
                            scenario.started)
    yield recorder
    recorder.close()


def queued(scenario: Scenario, workloads: GangRecorder) -> str:
    """Step 1; returns the RayJob's Workload."""
    workload = wait_until("the RayJob's Workload", lambda: _jobs_workload(scenario))
    quota = wait_until("QuotaReserved=False", lambda: _condition(
        workloads, workload, "QuotaReserved", "False"))
    scenario.step(f"Workload {workload} (owned by RayJob {JOB}): QuotaReserved=False "
                  f"{quota[2]}: {quota[3]}")
    assert quota[2] == "Pending" and "insufficient" in quota[3], quota
    assert _job(scenario)["spec"]["suspend"] is True, "Kueue's webhook suspends the RayJob"
    assert _clusters(scenario) == [], "KubeRay makes no RayCluster for a suspended RayJob"
    return workload


def admitted(scenario: Scenario, workloads: GangRecorder, workload: str) -> str:
    """Step 2; returns the RayCluster, its teardown held."""
    scenario.api.json_patch(f"{KUEUE}/clusterqueues/{scenario.name}-cq", [
        {"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
         "value": "6"}])
    scenario.step("raised the ClusterQueue's CPU quota to 6")
    wait_until("the Workload Admitted", lambda: _condition(workloads, workload, "Admitted",
                                                           "True"))
    cluster: str = wait_until("the RayJob's RayCluster", lambda: next(
        (c["metadata"]["name"] for c in _clusters(scenario)), None))
    path = f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{cluster}"
    scenario.api.json_patch(path, [{"op": "add", "path": "/metadata/finalizers",
                                    "value": [HOLD]}])
    scenario.step(f"RayCluster {cluster} made by KubeRay (its teardown held)")
    owner = scenario.api.get(path)["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("RayJob", JOB)
    wait_until("the head and the worker running", lambda: len(scenario.running(
        "headgroup")) == 1 and len(scenario.running("workers")) == 1, timeout=90)
    scenario.step("head and worker running")
    return cluster


def test_kueue_rayjob_queued_admitted_evicted(kueue: Testbed, scenario: Scenario,
                                              workloads: GangRecorder,
                                              reader_token: str) -> None:
    scenario.setup(nodes(scenario.name))
    for body in preempting_queues(scenario):
        scenario.create(body)
    scenario.create(rayjob(scenario))
    workload = queued(scenario, workloads)
    cluster = admitted(scenario, workloads, workload)
    said = Said(kueue.raygate_url, reader_token, scenario.namespace, cluster,
                scenario.started)
    try:
        status = wait_until("raygate saying admitted", lambda: _said(said, True, "Admitted"),
                            timeout=30)
        assert status.gang.source is not None
        assert (status.gang.source.kind, status.gang.source.name) == ("Workload", workload)
        assert status.gang.min_member == 2, "Kueue's pod sets: the head and 1 worker"
        assert {g.name: g.scale_up.action for g in status.groups} == {
            "headgroup": "hold", "workers": "proceed"}

        _evicted(scenario, workloads, said, workload, cluster)
        _release(scenario, cluster)
        wait_until("the RayCluster gone", lambda: _clusters(scenario) == [], timeout=60)
        scenario.step("the RayCluster gone")
        requeued = wait_until("the RayJob's Workload requeued", lambda: _condition(
            workloads, workload, "QuotaReserved", "False"), timeout=60)
        scenario.step(f"Workload {workload}: QuotaReserved=False {requeued[2]}")
        lag = _never_admitted_again(said, workloads, workload)
        scenario.step(f"raygate said not admitted {lag:.1f} s after Kueue's eviction")
        report.add("kueue-3-rayjob", scenario.timeline(
            "Kueue with its RayJob integration: a RayJob queued, admitted, then evicted by a "
            "higher-priority Workload") + "\nThe Workloads as Kueue wrote them:\n\n"
            + workloads.table() + "\nKueue's events:\n\n"
            + events(scenario.api, scenario.namespace, source="kueue")
            + "\nWhat raygate's admission API said of the RayJob's RayCluster:\n\n"
            + said.table())
    finally:
        said.close()
        _release(scenario, cluster)


def _evicted(scenario: Scenario, workloads: GangRecorder, said: Said, workload: str,
             cluster: str) -> None:
    """A higher-priority Workload preempts the RayJob's: raygate says not admitted while
    the RayCluster is still there."""
    scenario.create(preemptor(scenario))
    evicted = wait_until("the RayJob's Workload Evicted", lambda: _condition(
        workloads, workload, "Evicted", "True"))
    scenario.step(f"Workload {workload}: Evicted=True {evicted[2]}: {evicted[3]}")
    assert evicted[2] == "Preempted", evicted
    going = wait_until("raygate saying not admitted", lambda: _said(
        said, False, "Evicted"), timeout=30)
    scenario.step("raygate: not admitted (Evicted)")
    assert going.gang.source is not None and going.gang.source.name == workload
    assert "being evicted" in going.gang.reason and "Preempted" in going.gang.reason
    assert {g.name: g.scale_up.action for g in going.groups} == {
        "headgroup": "hold", "workers": "hold"}
    assert [c["metadata"]["name"] for c in _clusters(scenario)] == [cluster], (
        "the RayCluster is still there")
    deleting = _clusters(scenario)[0]["metadata"].get("deletionTimestamp")
    scenario.step(f"the RayCluster {'being deleted' if deleting else 'not deleted yet'}")
