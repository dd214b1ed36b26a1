"""The seed's scenario on the real Volcano: KubeRay with ``--batch-scheduler=volcano``
makes the PodGroup ``ray-<name>-pg`` (``minMember`` = head + floor), Volcano's scheduler
places the gang with raygate as its ``extender`` plugin (deploy/volcano's configuration),
and preempts for a high-priority GPU job with raygate's ``preemptable`` answers.

Nodes are those of the kube-scheduler scenarios (tests/test_placement, test_preemption),
so the timelines compare side by side in the report.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.admission import AdmissionRecorder
from e2e.gangs import GangRecorder, events
from e2e.objects import (
    HEAD_NODE,
    TOLERATE_GPU,
    WORKER_NODE,
    Group,
    node,
    pool,
    raycluster,
    tolerating_gpu_groups,
)
from e2e.scenario import Scenario, wait_until
from e2e.test_preemption import assert_untouched, bring_up, pending_replacements, priority_class
from raygate.contract.admission_status import AdmissionStatus
from raygate.policy.classify import LABEL_ROLE
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

QUEUE = {"volcano.sh/queue-name": "default"}


@pytest.fixture(scope="module", autouse=True)
def kuberay_on_volcano(volcano: Testbed) -> Iterator[None]:
    """KubeRay reads ``--batch-scheduler`` at start, for all its RayClusters: this module
    runs it so, and the others without."""
    volcano.restart_kuberay("volcano")
    yield
    volcano.restart_kuberay()


def podgroups(scenario: Scenario) -> GangRecorder:
    return GangRecorder(scenario.api, "/apis/scheduling.volcano.sh/v1beta1/namespaces/"
                        f"{scenario.namespace}/podgroups", scenario.started)


def volcano_raycluster(scenario: Scenario, name: str, baseline: int, cpu: str = "4",
                       ) -> dict[str, Any]:
    body = raycluster(name, scenario.namespace, scenario.name,
                      tolerating_gpu_groups(baseline=baseline, overflow=0, cpu=cpu),
                      scheduler="volcano")
    body["metadata"]["labels"] = dict(QUEUE)
    return body


def podgroup(scenario: Scenario, name: str) -> dict[str, Any]:
    return scenario.api.get(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/"
                            f"{scenario.namespace}/podgroups/{name}")


def gang_report(title: str, scenario: Scenario, groups: GangRecorder,
                admission: AdmissionRecorder | None = None) -> str:
    """A scenario's timeline with what Volcano wrote (and what raygate said)."""
    text = (scenario.timeline(title) + "\nPodGroups as Volcano wrote them:\n\n"
            + groups.table() + "\nVolcano's events:\n\n"
            + events(scenario.api, scenario.namespace, source="volcano"))
    if admission is not None:
        text += "\nWhat the admission API said:\n\n" + admission.table()
    return text


def kinds(scenario: Scenario, group: str) -> list[str]:
    return sorted(scenario.node_kind(pod) for pod in scenario.running(group))


def test_volcano_places_the_gang_floor_on_cpu_nodes(scenario: Scenario) -> None:
    name = scenario.name
    groups = podgroups(scenario)
    try:
        scenario.setup([node(f"{name}-cpu-a", name, cpu=8), node(f"{name}-cpu-b", name, cpu=8),
                        node(f"{name}-gpu-a", name, cpu=32, gpus=4)])
        scenario.create(volcano_raycluster(scenario, "mixed", baseline=2))
        wait_until("the head and the 2 floor workers running",
                   lambda: len(scenario.running("headgroup")) == 1
                   and len(scenario.running("baseline")) == 2, timeout=90)
        scenario.step("head and floor running")
        pg = podgroup(scenario, "ray-mixed-pg")
        assert pg["spec"]["minMember"] == 3, "head + floor"
        assert pg["spec"]["queue"] == "default"
        wait_until("the PodGroup Running", lambda: groups.phases("ray-mixed-pg")[-1:]
                   == ["Running"])
        scenario.scale("mixed", "overflow", 4)
        wait_until("4 overflow workers running",
                   lambda: len(scenario.running("overflow")) == 4, timeout=90)
        scenario.step("4 overflow workers running")

        assert kinds(scenario, "headgroup") == ["CPU"]
        assert kinds(scenario, "baseline") == ["CPU", "CPU"], "raygate's predicate"
        assert "GPU" in kinds(scenario, "overflow"), "overflow surplus may use the GPU node"
        report.add("volcano-1-placement", gang_report(
            "Volcano: placement with raygate as the extender plugin", scenario, groups))
    finally:
        groups.close()


def refused(scenario: Scenario, group: str) -> bool:
    """Has the scheduler said it cannot place a pod of ``group`` yet? The scenario below
    scales past the floor only then: a surplus worker created in the same second as the
    floor ties with it in Volcano's task order, and if it comes first it takes the only
    CPU place and strands the gang (docs/native-placement.md, "Under Volcano")."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for p in scenario.group_pods(group)
               for c in p.get("status", {}).get("conditions") or [])


def test_volcano_strands_no_surplus_worker_behind_a_waiting_floor(scenario: Scenario) -> None:
    """One role per pod behind Volcano (issue #42 item 3): a group whose floor is two pods,
    one CPU place free, a GPU node with room, a second CPU node added later. Volcano skips
    the rest of a task spec's pods once one fails its predicates everywhere; the surplus
    worker carries a task spec of its own (``<group>-surplus``), so the floor worker that
    waits for CPU does not strand it: the gang (head, one floor, the surplus) runs once the
    group scales past its floor, the second floor worker on the CPU node when it comes."""
    name = scenario.name
    groups = podgroups(scenario)
    try:
        # The head (2 CPU and the autoscaler's 500m) on a node of its own (by node selector),
        # cpu-1, two the GPU node.
        scenario.setup([node(f"{name}-head", name, cpu=3, labels=HEAD_NODE),
                        node(f"{name}-cpu-1", name, cpu=2, labels=WORKER_NODE),
                        node(f"{name}-gpu", name, cpu=8, gpus=4, labels=WORKER_NODE)])
        workers = {"tolerations": [TOLERATE_GPU], **pool(name, WORKER_NODE)}
        body = raycluster("shape", scenario.namespace, name, [Group(
            "work", 2, "2", min=2, max=4, pod_spec=workers)], scheduler="volcano",
            head_pod_spec=pool(name, HEAD_NODE))
        body["metadata"]["labels"] = dict(QUEUE)
        scenario.create(body)
        wait_until("the head and 2 floor workers created", lambda: len(
            scenario.group_pods("work")) == 2 and len(scenario.group_pods("headgroup")) == 1)
        wait_until("Volcano's verdict on the floor", lambda: refused(scenario, "work"))
        scenario.step("head and 2 floor workers created; the gang (3) cannot be placed: "
                      "one CPU place for the floor")
        scenario.scale("shape", "work", 3)
        wait_until("the head, a floor and the surplus worker running", lambda: len(
            scenario.running("headgroup")) == 1 and len(scenario.running("work")) == 2,
            timeout=120)
        specs = {(p["metadata"]["labels"][LABEL_ROLE],
                  p["metadata"]["annotations"]["volcano.sh/task-spec"])
                 for p in scenario.group_pods("work")}
        assert specs == {("floor", "work"), ("surplus", "work-surplus")}, specs
        assert kinds(scenario, "work") == ["CPU", "GPU"]
        scenario.step("scaled to 3: the head, a floor worker on cpu-1 and the surplus worker "
                      "(task spec work-surplus) on the GPU node; the other floor worker waits")
        scenario.add_node(node(f"{name}-cpu-2", name, cpu=2, labels=WORKER_NODE))
        wait_until("4 of 4 running", lambda: len(scenario.running("work")) == 3, timeout=120)
        assert kinds(scenario, "work") == ["CPU", "CPU", "GPU"]
        scenario.step("cpu-2 added: the second floor worker bound there; 4 of 4 running")
        report.add("volcano-5-one-role", gang_report(
            "Volcano: floor 2, one CPU place, a GPU node with room, a CPU node later",
            scenario, groups))
    finally:
        groups.close()


def test_volcano_preempts_overflow_never_the_floor(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    name = scenario.name
    groups = podgroups(scenario)
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        on_gpu, floor = bring_up(scenario, "volcano",
                                 tolerating_gpu_groups(baseline=2, overflow=0), QUEUE)
        evicted = sorted(h.name for h in scenario.history() if h.deleting is not None)
        assert evicted == on_gpu, "Volcano evicted the two overflow workers, not the guard"
        assert_untouched(scenario, floor)

        replacements = pending_replacements(scenario, on_gpu)
        assert len(replacements) == 2, "exactly one replacement per victim"
        scenario.add_node(node(f"{name}-cpu-c", name, cpu=8))
        scenario.step(f"added {name}-cpu-c")
        wait_until("the replacements running", lambda: all(
            p["status"].get("phase") == "Running" for p in scenario.group_pods("overflow")),
            timeout=90)
        for pod in scenario.group_pods("overflow"):
            if pod["metadata"]["name"] in replacements:
                assert scenario.node_kind(pod) == "CPU", "the replacement goes to a CPU node"
        report.add("volcano-2-preemption", gang_report(
            "Volcano: a priority-1000 GPU job preempts; raygate answers preemptable",
            scenario, groups, admission))
    finally:
        groups.close()
        admission.close()


def test_volcano_infeasible_floor_waits_for_the_gang(
        scenario: Scenario, testbed: Testbed, reader_token: str) -> None:
    """The seed's other case: a floor of 3 workers of 8 CPU on two 8-CPU nodes can never
    be placed whole. The cluster as a whole has the room (a node the gang may not use),
    so the queue accepts the gang (Inqueue); Volcano binds none of it, and raygate says
    the gang waits for capacity and holds scale-up."""
    name = scenario.name
    groups = podgroups(scenario)
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        scenario.setup([node(f"{name}-cpu-a", name, cpu=8), node(f"{name}-cpu-b", name, cpu=8),
                        node(f"{name}-elsewhere", f"{name}-other", cpu=64)])
        scenario.create(volcano_raycluster(scenario, "big", baseline=3, cpu="8"))
        wait_until("the PodGroup Inqueue, NotEnoughResources", lambda: (
            groups.phases("ray-big-pg")[-1:] == ["Inqueue"]
            and (groups.condition("ray-big-pg", "Unschedulable") or ("", "", ""))[2]
            == "NotEnoughResources"), timeout=60)
        wait_until("the 4 pods created", lambda: len(scenario.live_pods()) == 4)
        pods = scenario.live_pods()
        for pod in pods:
            admission.wait_for_state(pod["metadata"]["name"], "WaitingForCapacity")
        status = wait_until("the admission status of big", lambda: _gang_waits(admission))
        scenario.step(f"admission API: {status.gang.reason}")
        assert {g.name: g.scale_up.action for g in status.groups} == {
            "headgroup": "hold", "baseline": "hold", "overflow": "hold"}
        assert {p.advice.action for p in status.pods} == {"keep"}
        assert not [p for p in scenario.live_pods() if p["spec"].get("nodeName")], (
            "no member bound")
        report.add("volcano-3-infeasible", gang_report(
            "Volcano: a floor that cannot fit; the gang waits", scenario, groups, admission))
    finally:
        groups.close()
        admission.close()


def _gang_waits(admission: AdmissionRecorder) -> AdmissionStatus | None:
    status = admission.status("big")
    return status if status is not None and status.gang.source is not None and (
        not status.gang.admitted) else None


def cpu_job(scenario: Scenario, priority: str, cpu: str) -> dict[str, Any]:
    """A high-priority CPU-only pod (not a Ray pod), scheduled by Volcano."""
    resources = {"cpu": cpu, "memory": "4Gi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "urgent", "namespace": scenario.namespace,
                         "labels": {"app": "urgent"}},
            "spec": {"schedulerName": "volcano", "priorityClassName": priority,
                     "nodeSelector": {"testbed.raygate.dev/scenario": scenario.name},
                     "containers": [{"name": "urgent", "image": "example.invalid/urgent:1",
                                     "resources": {"requests": resources,
                                                   "limits": resources}}]}}


def test_volcano_takes_no_floor_worker_when_the_first_tier_refuses(
        scenario: Scenario) -> None:
    """Only the head and the floor run on the node a high-priority pod needs. In the
    first tier gang refuses every victim (the job is at minMember; raygate, later in the
    tier, would refuse them too): the tier yields none, and the next tier's plugins vote
    alone unless deploy/volcano turns their vote off. (Before it did, the real
    vc-scheduler evicted two floor workers here through drf.)"""
    name = scenario.name
    groups = podgroups(scenario)
    try:
        # The node elsewhere gives the queue room, so Volcano enqueues the urgent pod's
        # PodGroup and tries to preempt for it (a full queue would leave it Pending).
        scenario.setup([node(f"{name}-cpu-a", name, cpu=16),
                        node(f"{name}-elsewhere", f"{name}-other", cpu=64)])
        scenario.create(priority_class(f"{name}-urgent", 1000))
        scenario.create(volcano_raycluster(scenario, "work", baseline=3))
        wait_until("head and floor running", lambda: len(scenario.running("headgroup")) == 1
                   and len(scenario.running("baseline")) == 3, timeout=90)
        floor = sorted(p["metadata"]["name"] for p in
                       scenario.running("baseline") + scenario.running("headgroup"))
        scenario.create(cpu_job(scenario, f"{name}-urgent", cpu="6"))
        wait_until("Volcano's verdict on the urgent pod", lambda: any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            for p in scenario.live_pods("app=urgent")
            for c in p.get("status", {}).get("conditions") or []), timeout=60)
        time.sleep(10)  # ten scheduling sessions (one a second) to preempt in, if it would
        scenario.step("10 s of Volcano sessions after the urgent pod was refused")
        gone = sorted(h.name for h in scenario.history() if h.deleting is not None)
        assert gone == [], f"Volcano evicted {gone}: the floor must stay"
        assert sorted(p["metadata"]["name"] for p in scenario.running("baseline")
                      + scenario.running("headgroup")) == floor
        report.add("volcano-4-floor-veto", gang_report(
            "Volcano: the first tier refuses every victim; the floor stays", scenario, groups))
    finally:
        groups.close()


def test_raygate_answered_every_volcano_call_it_got(volcano: Testbed) -> None:
    """The real vc-scheduler's requests, as raygate counted them over this module: every
    verb the scenarios need was called, and every call decoded and answered (200; a
    request raygate could not read would be a 400 in its own error field)."""
    text = urllib.request.urlopen(f"{volcano.raygate_url}/metrics", timeout=5).read().decode()
    calls: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("raygate_requests_total{") and 'route="/volcano/' in line:
            labels, value = line.rsplit(" ", 1)
            code = labels.split('code="', 1)[1].split('"', 1)[0]
            route = labels.split('route="', 1)[1].split('"', 1)[0]
            calls[(route, code)] = calls.get((route, code), 0.0) + float(value)
    answered = {route: n for (route, code), n in calls.items() if code == "200" and n}
    refused = {key: n for key, n in calls.items() if key[1] != "200" and n}
    assert refused == {}
    for verb in ("predicate", "prioritize", "preemptable"):
        assert answered.get(f"/volcano/{verb}", 0) > 0, f"Volcano never called {verb}"
    report.add("volcano-5-calls", "### Volcano's calls to raygate over these scenarios\n\n"
               "| route | answered (200) |\n|---|---:|\n" + "".join(
                   f"| {route} | {n:.0f} |\n" for route, n in sorted(answered.items())))
