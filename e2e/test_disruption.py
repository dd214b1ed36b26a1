"""The floor in its native form: raygate's PodDisruptionBudgets against the real Eviction
API, kube-controller-manager's disruption controller and garbage collector.

One CPU node of 16 CPU. The RayCluster (in-tree autoscaling): a 2-CPU head and a
``base`` group of 4 workers, 2 CPU each, ``minReplicas: 2`` — two floor workers and two
surplus, all on the one node. raygate (run as deploy/ ships it: its ClusterRole, its
ConfigMap's ``disruptionBudgets: on``) writes a budget for the head (``minAvailable: 1``)
and one for ``base`` (``minAvailable: 2``). ``kubectl drain`` evicts the surplus and stops
at the floor, with the budget's refusal; raising ``minReplicas`` raises ``minAvailable``,
``minReplicas: 0`` deletes the group's budget; deleting the RayCluster deletes the rest
(ownerReferences, the garbage collector).
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e import report
from e2e.objects import Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from raygate.plugin.budgets import budget_name
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget"


def budgets(scenario: Scenario) -> dict[str, dict[str, Any]]:
    path = f"/apis/policy/v1/namespaces/{scenario.namespace}/poddisruptionbudgets"
    return {b["metadata"]["name"]: b for b in scenario.api.items(path)}


def min_available(scenario: Scenario) -> dict[str, int]:
    return {name: b["spec"]["minAvailable"] for name, b in budgets(scenario).items()}


def set_min(scenario: Scenario, cluster: str, group: str, value: int) -> None:
    path = f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{cluster}"
    groups = scenario.api.get(path)["spec"]["workerGroupSpecs"]
    index = next(i for i, g in enumerate(groups) if g["groupName"] == group)
    scenario.api.json_patch(path, [{"op": "replace", "value": value,
                                    "path": f"/spec/workerGroupSpecs/{index}/minReplicas"}])
    scenario.step(f"set {cluster}/{group} minReplicas to {value}")


def on_node(scenario: Scenario, node_name: str) -> list[str]:
    """Pods bound to ``node_name``, not terminating."""
    return sorted(p["metadata"]["name"] for p in scenario.live_pods()
                  if p["spec"].get("nodeName") == node_name
                  and not p["metadata"].get("deletionTimestamp"))


def test_drain_stops_at_the_floor_and_budgets_follow_the_cluster(
        scenario: Scenario, testbed: Testbed) -> None:
    name = scenario.name
    only = f"{name}-cpu-a"
    scenario.setup([node(only, name, cpu=16)])
    scenario.create(raycluster("work", scenario.namespace, name,
                               [Group("base", 4, "2", min=2, max=8)]))
    wait_until("the head and 4 base workers running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("base")) == 4, timeout=90)
    scenario.step("head and 4 base workers running")

    head, base = budget_name("work", "headgroup"), budget_name("work", "base")
    wait_until("raygate's budgets", lambda: min_available(scenario) == {head: 1, base: 2},
               timeout=60)
    made = budgets(scenario)
    for budget in made.values():
        meta = budget["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "raygate"
        [owner] = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["blockOwnerDeletion"]) == (
            "RayCluster", "work", False)
        # Server-side apply: the spec is raygate's (the status the disruption controller's).
        assert [f["operation"] for f in meta["managedFields"]
                if f["manager"] == "raygate"] == ["Apply"]
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # The disruption controller counts the healthy pods: 4 base workers over a floor of 2.
    wait_until("the budgets' status", lambda: {
        n: b.get("status", {}).get("disruptionsAllowed") for n, b in budgets(scenario).items()}
        == {head: 0, base: 2}, timeout=60)
    scenario.step("budgets: head minAvailable 1, base minAvailable 2 (2 disruptions allowed)")

    before = on_node(scenario, only)
    floor_ok = sorted(p["metadata"]["name"] for p in scenario.running("headgroup"))
    drained = testbed.kubectl("drain", "--ignore-daemonsets", "--delete-emptydir-data",
                              "--timeout=30s", only, check=False)
    scenario.step(f"kubectl drain: exit {drained.returncode}")
    assert drained.returncode != 0, "the drain cannot finish: the floor stays"
    assert REFUSAL in drained.stderr, drained.stderr
    left = on_node(scenario, only)
    evicted = sorted(set(before) - set(left))
    assert len(evicted) == 2 and all("-base-" in p for p in evicted), (before, left)
    assert all(p in left for p in floor_ok), "the head stays"
    assert len([p for p in left if "-base-" in p]) == 2, "the floor stays"
    scenario.step(f"evicted {', '.join(evicted)}; the head and 2 base workers stay")
    testbed.kubectl("uncordon", only)

    set_min(scenario, "work", "base", 3)
    wait_until("minAvailable 3", lambda: min_available(scenario) == {head: 1, base: 3},
               timeout=60)
    scenario.step("base minAvailable 3")
    set_min(scenario, "work", "base", 0)
    wait_until("the base budget deleted", lambda: min_available(scenario) == {head: 1},
               timeout=60)
    scenario.step("base budget deleted (floor 0)")

    testbed.kubectl("delete", "raycluster", "work", "-n", scenario.namespace, "--wait=false")
    wait_until("the budgets deleted with the RayCluster", lambda: not budgets(scenario),
               timeout=90)
    scenario.step("RayCluster deleted: the garbage collector deleted the head's budget")
    report.add("disruption-1-drain", scenario.timeline(
        "Disruption: kubectl drain against raygate's PodDisruptionBudgets (one node, a "
        "floor of 2 of 4 workers)"))
