"""Kubernetes' own gangs (``scheduling.k8s.io/v1beta1`` PodGroups, kube-scheduler's
``GangScheduling`` plugin and workload-aware preemption), on the real kube-scheduler 1.37
with the beta gate ``GenericWorkload`` on (the module's ``native_gangs`` fixture; every
other module runs with the defaults).

The RayCluster's gang stands in for KubeRay 1.7's ``kubernetes-was`` batch scheduler on
v1beta1 (1.7.0 speaks v1alpha2, which 1.37 no longer serves; the testbed's KubeRay 1.6.1
writes no ``spec.schedulingGroup``): the scenario creates the Workload ``<rc>`` (one
template, ``cluster``) and the PodGroup ``<rc>-cluster`` (gang, ``minCount`` = the head +
every group's replicas), both owned by the RayCluster, right after the RayCluster, as
KubeRay 1.7 would; a MutatingAdmissionPolicy names that PodGroup in every Ray pod of the
namespace (``testbed.native_gangs.stamp_pods``).

1. Placement: a fixed-size RayCluster whose gang does not fit on the one CPU node (the
   GPU node would hold it, but raygate keeps head and floor off it): kube-scheduler binds
   none of its pods until a second CPU node comes, then all of them; raygate's admission
   API says WaitingForGangAdmission meanwhile, the PodGroup its gang's source.
2. and 3. Gang preemption: a gang GPU job of two pods (priority 1000) preempting Ray GPU
   workers (priority 0), with raygate's floor budgets and without them. See
   ``preemption_layout`` for why the layout is what it is.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.admission import RUNNING_OR_GONE, AdmissionRecorder
from e2e.gangs import GangRecorder, events
from e2e.native_gang_objects import GROUPS, QUICK, gang_job, kuberay_was_gang
from e2e.objects import RAY_IMAGE, TOLERATE_GPU, Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from e2e.test_preemption import priority_class
from raygate.policy.budgets import budget_name
from testbed.cluster import Testbed
from testbed.native_gangs import stamp_pods

pytestmark = pytest.mark.e2e

GANG_LABEL = "ray.io/gang-scheduling-enabled"


@pytest.fixture(autouse=True)
def gate(native_gangs: Testbed) -> Testbed:
    """Every scenario here runs with ``GenericWorkload`` on."""
    return native_gangs


@pytest.fixture
def podgroups(scenario: Scenario) -> Iterator[GangRecorder]:
    recorder = GangRecorder(scenario.api, f"{GROUPS}/namespaces/{scenario.namespace}/podgroups",
                            scenario.started)
    yield recorder
    recorder.close()


def initially_scheduled(podgroups: GangRecorder, name: str, status: str,
                        ) -> tuple[str, str, str, str] | None:
    found = podgroups.condition(name, "PodGroupInitiallyScheduled")
    return found if found is not None and found[1] == status else None


# --- 1. placement ------------------------------------------------------------------------

def test_native_gang_binds_all_or_nothing_with_raygates_placement(
        scenario: Scenario, testbed: Testbed, reader_token: str,
        podgroups: GangRecorder) -> None:
    """One CPU node of 8 CPU and a GPU node of 32 CPU; the RayCluster (label
    ``ray.io/gang-scheduling-enabled``, no autoscaling): a 2-CPU head and two 4-CPU
    workers tolerating the GPU taint, 10 CPU in all."""
    name = scenario.name
    scenario.setup([node(f"{name}-cpu-a", name, cpu=8),
                    node(f"{name}-gpu-a", name, cpu=32, gpus=4)])
    stamp_pods(testbed, scenario.namespace)
    scenario.step("Ray pods of the namespace name <cluster>-cluster (the stamp in force)")
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        pods = gang_created(scenario)
        waiting_reason = gang_waits_whole(scenario, podgroups, admission, pods)
        placed = gang_binds_whole_once_it_fits(scenario, podgroups, admission, pods)
    finally:
        admission.close()
    report.add("gangs-native-1-placement", scenario.timeline(
        "Kubernetes' own gang (GenericWorkload on, ray-scheduler with raygate): a "
        "fixed-size RayCluster's PodGroup, all or nothing; head and floor on CPU nodes")
        + f"\nThe gang's PodGroup as kube-scheduler wrote it ({placed[2]}):\n\n"
        + podgroups.table()
        + f"\nraygate's gang while it waited: `{waiting_reason}`\n"
        + "\nAdmission API (gRPC Watch) transitions:\n\n" + admission.table())


def gang_created(scenario: Scenario) -> list[dict[str, Any]]:
    """The RayCluster ``gang`` and what KubeRay 1.7 makes for it; returns its 3 pods, each
    naming the PodGroup."""
    body = raycluster("gang", scenario.namespace, scenario.name, [
        Group("workers", 2, "4", min=2, max=2, pod_spec={"tolerations": [TOLERATE_GPU]})],
        autoscaling=False)
    body["metadata"]["labels"] = {GANG_LABEL: "true"}
    scenario.create(body)
    min_count = kuberay_was_gang(scenario, "gang")
    assert min_count == 3
    pods: list[dict[str, Any]] = wait_until("the 3 Ray pods, each naming the PodGroup", lambda: (
        found if len(found := scenario.live_pods("ray.io/cluster=gang")) == 3 else None))
    assert {(p["spec"].get("schedulingGroup") or {}).get("podGroupName")
            for p in pods} == {"gang-cluster"}, "the stamp, as KubeRay 1.7 writes it"
    return pods


def gang_waits_whole(scenario: Scenario, podgroups: GangRecorder,
                     admission: AdmissionRecorder, pods: list[dict[str, Any]]) -> str:
    """kube-scheduler refuses the gang that does not fit, binds none of it, and raygate
    says each member waits (for the gang, or for capacity), the PodGroup its gang's
    source; returns raygate's reason for the gang's wait."""
    refused = wait_until("kube-scheduler's verdict on the gang", lambda: initially_scheduled(
        podgroups, "gang-cluster", "False"), timeout=60)
    scenario.step(f"PodGroupInitiallyScheduled=False {refused[2]}: {refused[3]}")
    # A member that fits waits for the gang; one that fits nowhere has its own verdict
    # (Insufficient cpu), a wait for capacity. Neither is Stuck.
    names = [p["metadata"]["name"] for p in pods]
    waits = {"WaitingForGangAdmission", "WaitingForCapacity"}
    said_before = wait_until("the admission API's word on each member", lambda: (
        found if all(waits & set(found[n]) for n in names) and sum(
            "WaitingForGangAdmission" in found[n] for n in names) >= 2 else None)
        if (found := {n: admission.states(n) for n in names}) else None, timeout=30)
    scenario.step("raygate says: " + "; ".join(
        f"{n}: {' → '.join(states)}" for n, states in said_before.items()))
    assert not [p for p in scenario.live_pods() if p["spec"].get("nodeName")], (
        "no member bound while the gang does not fit")
    status = admission.status("gang")
    assert status is not None and not status.gang.admitted, status
    assert status.gang.source is not None and (
        status.gang.source.kind, status.gang.source.name) == (
        "PodGroup.scheduling.k8s.io", "gang-cluster"), status.gang
    reason: str = status.gang.reason
    return reason


def gang_binds_whole_once_it_fits(
        scenario: Scenario, podgroups: GangRecorder, admission: AdmissionRecorder,
        pods: list[dict[str, Any]]) -> tuple[str, str, str, str]:
    """A second CPU node comes: the whole gang is bound (none before), head and floor on
    CPU nodes, no member ever Stuck, and raygate's gang admitted; returns kube-scheduler's
    PodGroupInitiallyScheduled=True condition."""
    name = scenario.name
    added = scenario.now()
    scenario.add_node(node(f"{name}-cpu-b", name, cpu=8))
    scenario.step(f"added {name}-cpu-b (8 CPU)")
    wait_until("the whole gang running", lambda: len(
        [p for p in scenario.live_pods("ray.io/cluster=gang")
         if p["status"].get("phase") == "Running"]) == 3, timeout=60)
    scenario.step("the whole gang running")
    placed = wait_until("PodGroupInitiallyScheduled=True", lambda: initially_scheduled(
        podgroups, "gang-cluster", "True"), timeout=30)
    bound = [h for h in scenario.history() if h.group in ("headgroup", "workers")]
    assert len(bound) == 3 and all(h.bound is not None and h.bound >= added
                                   for h in bound), "all bound, none before the node came"
    assert sorted(scenario.node_kind(p) for p in scenario.live_pods("ray.io/cluster=gang")
                  ) == ["CPU", "CPU", "CPU"], "raygate's placement: head and floor on CPU"
    for pod in pods:
        admission.wait_for_state(pod["metadata"]["name"], RUNNING_OR_GONE, last=True)
    said = {p["metadata"]["name"]: admission.states(p["metadata"]["name"]) for p in pods}
    assert all("Stuck" not in states for states in said.values()), said
    admitted = wait_until("raygate's gang admitted", lambda: (
        s if (s := admission.status("gang")) is not None and s.gang.admitted else None),
        timeout=30)
    assert admitted.gang.phase == "Scheduled" and admitted.gang.min_member == 3, admitted.gang
    return placed


# --- 2. and 3. gang preemption -----------------------------------------------------------

def gpu_group(name: str, replicas: int, floor: int) -> Group:
    """Ray GPU workers: 4 CPU and 2 GPUs each."""
    resources = {"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": "2"}
    return Group(name, replicas, "4", min=floor, max=max(replicas, floor, 4), pod_spec={
        **QUICK, "tolerations": [TOLERATE_GPU],
        "containers": [{"name": "ray-worker", "image": RAY_IMAGE,
                        "resources": {"requests": resources, "limits": resources}}]})


def budgets(scenario: Scenario) -> dict[str, dict[str, Any]]:
    path = f"/apis/policy/v1/namespaces/{scenario.namespace}/poddisruptionbudgets"
    return {b["metadata"]["name"]: b for b in scenario.api.items(path)}


def allowed(scenario: Scenario) -> dict[str, int | None]:
    return {name: b.get("status", {}).get("disruptionsAllowed")
            for name, b in budgets(scenario).items()}


def on_node(scenario: Scenario, group: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in scenario.running(group)}


def preempt_calls(testbed: Testbed) -> float:
    """The kube-scheduler extender ``preempt`` requests raygate has answered (any code)."""
    text = urllib.request.urlopen(f"{testbed.raygate_url}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("raygate_requests_total{")
               and 'scheduler/preempt"' in line)


def preemption_layout(scenario: Scenario, *, with_budgets: bool) -> dict[str, Any]:
    """kube-scheduler 1.37's gang preemption (``PodGroupEvaluator``) takes every pod of
    lower priority off every node of its snapshot, places the gang there once (per pod:
    filters, raygate's filter and prioritize, scores; ties broken at random), and then
    reprieves victims one by one where the gang's placement still fits: first those whose
    eviction a PodDisruptionBudget forbids, then the others, each list most important
    first (priority, then the oldest pod). Budgets never move the placement, so a floor
    that has a node to itself is evicted whenever that node is drawn, budget or not; they
    only decide who stays on the nodes the gang was given. So each GPU node here holds one
    floor worker and one overflow worker, and the gang's two pods (2 GPUs each) need half
    of each node: a correct choice (the overflow workers) always exists, and only the
    budgets make kube-scheduler take it: the floor workers are the youngest (restarted),
    so its own order would keep the overflow workers.

    Nodes: a CPU node (8 CPU: the head) and two GPU nodes (32 CPU, 4 GPUs). The
    RayCluster: group ``floor`` (2 workers, ``minReplicas`` 2, 2 GPUs each) and
    ``overflow`` (2 workers above ``minReplicas`` 0). raygate's budget per group keeps a
    count (``minAvailable`` = the group's floor, over all its workers), so the floor and
    the overflow are separate groups: in one group any choice of its surplus count keeps
    the budget. Returns what the report needs."""
    name = scenario.name
    scenario.setup([node(f"{name}-cpu-a", name, cpu=8),
                    node(f"{name}-gpu-a", name, cpu=32, gpus=4),
                    node(f"{name}-gpu-b", name, cpu=32, gpus=4)])
    scenario.create(priority_class(f"{name}-gang", 1000))
    scenario.create(raycluster("work", scenario.namespace, name,
                               [gpu_group("floor", 2, 2), gpu_group("overflow", 0, 0)],
                               head_pod_spec=QUICK))
    wait_until("the head and 2 floor workers running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("floor")) == 2, timeout=60)
    scenario.scale("work", "overflow", 2)
    wait_until("2 overflow workers running", lambda: len(scenario.running("overflow")) == 2,
               timeout=60)
    floor, overflow = floor_restarted_beside_the_overflow(scenario)
    budgets_kept_or_deleted(scenario, with_budgets=with_budgets)
    return {"floor": floor, "overflow": overflow}


def floor_restarted_beside_the_overflow(scenario: Scenario
                                        ) -> tuple[dict[str, str], dict[str, str]]:
    """The floor restarts (say its pods were replaced): KubeRay makes them again, in the
    only room there is, one on each GPU node. Returns where the floor and the overflow
    workers run."""
    name = scenario.name
    old_floor = sorted(on_node(scenario, "floor"))
    scenario.testbed.kubectl("delete", "pod", "-n", scenario.namespace, "--wait=false",
                             *old_floor)
    scenario.step(f"deleted the floor workers {', '.join(old_floor)} (a restart)")
    wait_until("the floor running again", lambda: len(
        [p for p in on_node(scenario, "floor") if p not in old_floor]) == 2, timeout=60)
    floor, overflow = on_node(scenario, "floor"), on_node(scenario, "overflow")
    assert sorted(floor.values()) == sorted(overflow.values()) == [
        f"{name}-gpu-a", f"{name}-gpu-b"], ("one floor and one overflow worker per GPU node",
                                            floor, overflow)
    scenario.step("each GPU node: one floor worker (the younger) and one overflow worker")
    return floor, overflow


def budgets_kept_or_deleted(scenario: Scenario, *, with_budgets: bool) -> None:
    """raygate's budgets for the head and the floor, written; kept ``with_budgets``, else
    deleted."""
    floor_budget = budget_name("work", "floor")
    head_budget = budget_name("work", "headgroup")
    wait_until("raygate's budgets and their status", lambda: allowed(scenario) == {
        head_budget: 0, floor_budget: 0}, timeout=60)
    if with_budgets:
        scenario.step(f"budgets: {head_budget} and {floor_budget} (0 disruptions allowed)")
    else:
        # raygate applies a cluster's budgets when what they should be changes (and
        # every 10 minutes); deleted now, they stay away for the scenario.
        scenario.testbed.kubectl("delete", "pdb", "-n", scenario.namespace,
                                 head_budget, floor_budget)
        wait_until("no budget", lambda: budgets(scenario) == {}, timeout=30)
        scenario.step("raygate's budgets deleted: no budget in the namespace")


def run_gang_preemption(scenario: Scenario, testbed: Testbed, podgroups: GangRecorder,
                        *, with_budgets: bool) -> tuple[dict[str, Any], list[str], float]:
    """The layout, then the gang job on ray-scheduler until both its pods are bound.
    Returns the layout, the victims and how many preempt calls raygate got meanwhile."""
    layout = preemption_layout(scenario, with_budgets=with_budgets)
    before = preempt_calls(testbed)
    gang_job(scenario, f"{scenario.name}-gang", "ray-scheduler")
    jobs = wait_until("both gang pods bound", lambda: (
        found if len(found := [p for p in scenario.live_pods("app=train")
                               if p["spec"].get("nodeName")]) == 2 else None), timeout=60)
    scenario.step("gang job bound: " + ", ".join(
        f"{p['metadata']['name']} on {p['spec']['nodeName']}" for p in jobs))
    wait_until("PodGroupInitiallyScheduled=True on train", lambda: initially_scheduled(
        podgroups, "train", "True"), timeout=30)
    assert sorted(p["spec"]["nodeName"] for p in jobs) == [
        f"{scenario.name}-gpu-a", f"{scenario.name}-gpu-b"], "half of each GPU node"
    taken = sorted(h.name for h in scenario.history() if h.disruption == "PreemptionByScheduler")
    assert len(taken) == 2, f"one victim per GPU node: {taken}"
    return layout, taken, preempt_calls(testbed) - before


def victims_table(scenario: Scenario, layout: dict[str, Any], taken: list[str]) -> str:
    role = {**dict.fromkeys(layout["floor"], "floor"),
            **dict.fromkeys(layout["overflow"], "overflow (above minReplicas)")}
    lines = ["| victim | role | node | DisruptionTarget at | gone at |", "|---|---|---|---:|---:|"]
    for h in scenario.history():
        if h.name in taken:
            short = (h.node or "").removeprefix(f"{scenario.name}-")
            lines.append(f"| {h.name} | {role.get(h.name, h.group)} | {short} | "
                         f"{h.disrupted or 0:.1f} | "
                         f"{'' if h.deleted is None else f'{h.deleted:.1f}'} |")
    return "\n".join(lines) + "\n"


def preemption_report(scenario: Scenario, podgroups: GangRecorder, layout: dict[str, Any],
                      taken: list[str], *, calls: float, title: str) -> str:
    return (scenario.timeline(title)
            + "\nVictims (pods kube-scheduler marked `DisruptionTarget` "
              "`PreemptionByScheduler`):\n\n" + victims_table(scenario, layout, taken)
            + f"\nraygate's `preempt` verb was called {calls:.0f} times meanwhile "
              "(gang preemption calls no extender).\n"
            + "\nThe gang job's PodGroup as kube-scheduler wrote it:\n\n" + podgroups.table()
            + "\nkube-scheduler's events:\n\n"
            + events(scenario.api, scenario.namespace, source="ray-scheduler"))


def test_native_gang_preemption_with_floor_budgets_takes_overflow_only(
        scenario: Scenario, testbed: Testbed, podgroups: GangRecorder) -> None:
    layout, taken, calls = run_gang_preemption(scenario, testbed, podgroups,
                                               with_budgets=True)
    assert set(taken) == set(layout["overflow"]), (
        f"the budgets keep the floor: victims {taken}, overflow {layout['overflow']}")
    assert sorted(on_node(scenario, "floor")) == sorted(layout["floor"]), "the floor stays"
    assert calls == 0, "gang preemption never calls raygate's preempt verb"
    report.add("gangs-native-2-preemption", preemption_report(
        scenario, podgroups, layout, taken, calls=calls, title=(
        "Gang preemption (a PodGroup of 2 GPU pods, priority 1000, ray-scheduler) with "
        "raygate's floor budgets: the overflow workers are taken, the floor stays")))


def test_native_gang_preemption_without_budgets(
        scenario: Scenario, testbed: Testbed, podgroups: GangRecorder) -> None:
    layout, taken, calls = run_gang_preemption(scenario, testbed, podgroups,
                                               with_budgets=False)
    assert budgets(scenario) == {}, "no budget came back during the run"
    assert calls == 0, "gang preemption never calls raygate's preempt verb"
    hit = sorted(set(taken) & set(layout["floor"]))
    verdict = (f"the floor was hit in this run ({', '.join(hit)})" if hit
               else "the floor was not hit in this run")
    report.add("gangs-native-3-preemption-no-budgets", preemption_report(
        scenario, podgroups, layout, taken, calls=calls,
        title=f"The same gang preemption without raygate's budgets: {verdict}"))
