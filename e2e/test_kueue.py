"""Kueue decides when a RayCluster runs, ray-scheduler with raygate where its pods go
(``deploy/kueue``): the real Kueue manager (``testbed.kueue``) with its RayCluster
integration and webhooks, KubeRay, ray-scheduler.

Nodes of each scenario, as in ``test_placement``: two CPU nodes of 8 CPU and a GPU node
of 32 CPU and 4 GPUs (tainted). The RayCluster: a 2-CPU head and a ``baseline`` floor of
2 workers of 4 CPU (10 CPU), both groups tolerating the GPU taint, no autoscaling.

1. Its ClusterQueue has 6 CPU of quota: Kueue's webhook suspends the RayCluster, its
   Workload waits (``QuotaReserved=False``, reason ``Pending``, Kueue's message), and no
   pod exists. raygate's admission API reads that Workload as the gang: not admitted,
   Kueue's message quoted, scale-up held. The quota is then raised to 16 CPU: Kueue
   admits the Workload and unsuspends the RayCluster, KubeRay makes the pods, and
   ray-scheduler binds the head and the floor to CPU nodes (raygate's predicate).
2. The same RayCluster without Kueue, under the hand-written recipe and the stock
   scheduler, for the side-by-side report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from e2e import report
from e2e.admission import AdmissionRecorder
from e2e.gangs import GangRecorder, events
from e2e.objects import node, raycluster, recipe_groups, tolerating_gpu_groups
from e2e.scenario import Scenario, wait_until
from raygate.client import HttpAdmissionClient
from raygate.contract.admission_status import AdmissionStatus
from raygate.contract.errors import RaygateError
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLUSTER = "gated"


def nodes(scenario: str) -> list[dict[str, Any]]:
    return [node(f"{scenario}-cpu-a", scenario, cpu=8), node(f"{scenario}-cpu-b", scenario, cpu=8),
            node(f"{scenario}-gpu-a", scenario, cpu=32, gpus=4)]


def queues(scenario: Scenario, cpu: str) -> list[dict[str, Any]]:
    """A ResourceFlavor and a ClusterQueue of the scenario's own (cluster-scoped: named
    after it), the ClusterQueue for the scenario's namespace only, and its LocalQueue."""
    name = scenario.name
    quota = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "64Gi"},
             {"name": "nvidia.com/gpu", "nominalQuota": "4"}]
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": f"{name}-flavor"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": f"{name}-cq"},
         "spec": {"namespaceSelector": {"matchLabels": {
                      "kubernetes.io/metadata.name": scenario.namespace}},
                  "resourceGroups": [{"coveredResources": [q["name"] for q in quota],
                                      "flavors": [{"name": f"{name}-flavor",
                                                   "resources": quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "ray-queue", "namespace": scenario.namespace},
         "spec": {"clusterQueue": f"{name}-cq"}},
    ]


def _active(scenario: Scenario, path: str) -> bool:
    conditions = scenario.api.get(path).get("status", {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


@dataclass
class Said:
    """Every distinct answer of raygate's admission API (HTTP GET) about one RayCluster,
    polled every 0.1 s in the background; ``get`` asks once, from the test's thread."""

    url: str
    token: str
    namespace: str
    name: str
    started: float
    rows: list[tuple[float, str, AdmissionStatus | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._client = self._connect()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="said", daemon=True)
        self._thread.start()

    def _connect(self) -> HttpAdmissionClient:
        # One client a thread: a client is not thread-safe.
        return HttpAdmissionClient(self.url, token=lambda: self.token)

    def get(self) -> AdmissionStatus | None:
        try:
            return self._client.get(self.namespace, self.name)
        except RaygateError:
            return None  # not known yet, or raygate away for a moment

    def _run(self) -> None:
        client, last = self._connect(), ""
        while not self._closed.wait(0.1):
            status: AdmissionStatus | None = None
            try:
                status = client.get(self.namespace, self.name)
                row = _row(status)
            except RaygateError as exc:
                row = f"(no answer) | | | | | | {type(exc).__name__}"
            if row != last:
                self.rows.append((time.monotonic() - self.started, row, status))
                last = row
        client.close()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._client.close()

    def table(self) -> str:
        return ("| t (s) | gang source | phase | admitted | minMember | running | scale-up | "
                "reason |\n|---:|---|---|---|---:|---:|---|---|\n"
                + "".join(f"| {t:.1f} | {row} |\n" for t, row, _ in list(self.rows)))

    def answers(self, until: float) -> list[AdmissionStatus]:
        """What raygate answered before ``until`` (seconds since the scenario began)."""
        return [status for t, _, status in list(self.rows) if t < until and status]


def _row(status: AdmissionStatus) -> str:
    gang, source = status.gang, status.gang.source
    scale_up = "<br>".join(f"{g.name}: {g.scale_up.action}"
                           + (f" ({g.scale_up.reason})" if g.scale_up.action == "hold" else "")
                           for g in status.groups)
    where = f"{source.kind} {source.name}" if source else "(none)"
    return " | ".join(part.replace("|", "\\|") for part in (
        where, gang.phase, str(gang.admitted), str(gang.min_member), str(gang.running),
        scale_up, gang.reason))


@pytest.fixture
def said(testbed: Testbed, reader_token: str, scenario: Scenario) -> Iterator[Said]:
    recorder = Said(testbed.raygate_url, reader_token, scenario.namespace, CLUSTER,
                    scenario.started)
    yield recorder
    recorder.close()


def kinds(scenario: Scenario, group: str) -> list[str]:
    return sorted(scenario.node_kind(pod) for pod in scenario.running(group))


def _workload_name(scenario: Scenario) -> str | None:
    items = scenario.api.items(f"{KUEUE}/namespaces/{scenario.namespace}/workloads")
    return items[0]["metadata"]["name"] if len(items) == 1 else None


def _suspended(scenario: Scenario) -> bool | None:
    path = f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{CLUSTER}"
    suspend: bool | None = scenario.api.get(path)["spec"].get("suspend")
    return suspend


def _pending_gang(said: Said, message: str) -> AdmissionStatus | None:
    status = said.get()
    return status if (status is not None and status.gang.source is not None
                      and not status.gang.admitted and message in status.gang.reason) else None


def _admitted_gang(said: Said) -> AdmissionStatus | None:
    status = said.get()
    return status if status is not None and status.gang.admitted and (
        status.gang.running == 3) else None


def _waiting(condition: tuple[str, str, str, str] | None,
             ) -> tuple[str, str, str, str] | None:
    return condition if condition is not None and condition[1] == "False" and (
        condition[3]) else None


def wait_pending(scenario: Scenario, workloads: GangRecorder, said: Said) -> str:
    """The RayCluster suspended, its Workload waiting for quota; returns the Workload."""
    workload = wait_until("the RayCluster's Workload", lambda: _workload_name(scenario))
    quota = wait_until("QuotaReserved=False on the Workload",
                       lambda: _waiting(workloads.condition(workload, "QuotaReserved")))
    scenario.step(f"Workload {workload}: QuotaReserved=False {quota[2]}: {quota[3]}")
    assert quota[2] == "Pending", f"Kueue's reason: {quota}"
    assert "insufficient quota" in quota[3], quota
    assert _suspended(scenario) is True, "Kueue's webhook suspends the RayCluster"
    assert scenario.live_pods() == [], "a suspended RayCluster has no pods"
    status = wait_until("raygate quoting Kueue's message",
                        lambda: _pending_gang(said, quota[3]), timeout=30)
    assert status.gang.source is not None and status.gang.source.kind == "Workload"
    assert status.gang.source.name == workload
    assert {g.name: g.scale_up.action for g in status.groups} == {
        "headgroup": "hold", "baseline": "hold", "overflow": "hold"}
    return workload


def raise_quota(scenario: Scenario, workloads: GangRecorder, said: Said, workload: str,
                ) -> None:
    """16 CPU of quota: Kueue reserves it and admits the Workload."""
    scenario.api.json_patch(f"{KUEUE}/clusterqueues/{scenario.name}-cq", [
        {"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
         "value": "16"}])
    raised = scenario.now()
    scenario.step("raised the ClusterQueue's CPU quota to 16")
    assert [a.gang.admitted for a in said.answers(raised) if a.gang.admitted] == [], (
        "raygate never says admitted while Kueue keeps the RayCluster suspended")
    wait_until("the Workload Admitted", lambda: (
        workloads.condition(workload, "Admitted") or ("", ""))[1] == "True")
    reserved = workloads.condition(workload, "QuotaReserved")
    assert reserved is not None and reserved[1] == "True", reserved
    scenario.step(f"Workload Admitted ({reserved[3]})")


def test_kueue_admits_when_quota_frees_and_raygate_places(
        kueue: Testbed, scenario: Scenario, said: Said, reader_token: str) -> None:
    name = scenario.name
    workloads = GangRecorder(scenario.api, f"{KUEUE}/namespaces/{scenario.namespace}/workloads",
                             scenario.started)
    admission = AdmissionRecorder(kueue.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        scenario.setup(nodes(name))
        for body in queues(scenario, cpu="6"):
            scenario.create(body)
        wait_until("the ClusterQueue and LocalQueue Active", lambda: _active(
            scenario, f"{KUEUE}/clusterqueues/{name}-cq") and _active(
            scenario, f"{KUEUE}/namespaces/{scenario.namespace}/localqueues/ray-queue"))
        body = raycluster(CLUSTER, scenario.namespace, name,
                          tolerating_gpu_groups(baseline=2, overflow=0), autoscaling=False)
        body["metadata"]["labels"] = {QUEUE_LABEL: "ray-queue"}
        scenario.create(body)
        workload = wait_pending(scenario, workloads, said)

        raise_quota(scenario, workloads, said, workload)
        wait_until("the head and the 2 floor workers running",
                   lambda: len(scenario.running("headgroup")) == 1
                   and len(scenario.running("baseline")) == 2, timeout=90)
        scenario.step("head and floor running")
        assert not _suspended(scenario), "Kueue unsuspends the admitted RayCluster"
        assert kinds(scenario, "headgroup") == ["CPU"]
        assert kinds(scenario, "baseline") == ["CPU", "CPU"], "raygate keeps the floor off GPU"
        status = wait_until("raygate saying the gang is admitted",
                            lambda: _admitted_gang(said), timeout=30)
        assert status.gang.source is not None and status.gang.source.name == workload
        assert status.gang.phase == "Admitted"
        assert status.gang.min_member == 3, "Kueue's pod sets: head + 2 + 0"
        report.add("kueue-1-admission", scenario.timeline(
            "Kueue: quota short, then raised; ray-scheduler with raygate places the pods")
            + "\nThe Workload as Kueue wrote it:\n\n" + workloads.table()
            + "\nKueue's events:\n\n" + events(scenario.api, scenario.namespace, source="kueue")
            + "\nWhat raygate's admission API said of the RayCluster:\n\n" + said.table()
            + "\nIts pods, from the admission Watch:\n\n" + admission.table())
    finally:
        workloads.close()
        admission.close()


def test_kueue_side_by_side_hand_written_recipe(kueue: Testbed, scenario: Scenario,
                                                said: Said) -> None:
    """The same RayCluster without Kueue (no queue label), under the seed's recipe and
    the stock scheduler: it runs at once; Kueue runs too, and leaves it alone."""
    scenario.setup(nodes(scenario.name), native_placement=False)  # raygate is not asked
    scenario.create(raycluster(CLUSTER, scenario.namespace, scenario.name,
                               recipe_groups(baseline=2, overflow=0),
                               scheduler="default-scheduler", autoscaling=False))
    wait_until("the head and the 2 floor workers running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("baseline")) == 2, timeout=90)
    scenario.step("head and floor running")
    assert kinds(scenario, "baseline") == ["CPU", "CPU"], "the recipe's required affinity"
    status = wait_until("raygate's answer", lambda: _admitted_gang(said), timeout=30)
    assert status.gang.source is None, "no PodGroup, no Workload"
    report.add("kueue-2-recipe", scenario.timeline(
        "Without Kueue: the hand-written recipe (default-scheduler), no quota gate")
        + "\nWhat raygate's admission API said of the RayCluster:\n\n" + said.table())
