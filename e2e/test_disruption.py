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

Then a second raygate beside the testbed's, as two replicas run: both write, with no
leader, and the budgets end on the latest floor; and a raygate whose ServiceAccount may
not touch budgets: it serves on, counts and logs the refusal once, and tries again
rarely.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml

from e2e import report
from e2e.events import wait_for_reason
from e2e.lagging import metric
from e2e.objects import Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from raygate.policy.budgets import budget_name
from testbed.cluster import DEPLOY, REPO, Testbed
from testbed.common import RAYGATE_ACCOUNT
from testbed.processes import free_port, wait_for

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
    head, base = budgets_written(scenario)
    drain_stops_at_the_floor(scenario, testbed, only)
    budgets_follow_the_cluster(scenario, testbed, head, base)
    report.add("disruption-1-drain", scenario.timeline(
        "Disruption: kubectl drain against raygate's PodDisruptionBudgets (one node, a "
        "floor of 2 of 4 workers)"))


def budgets_written(scenario: Scenario) -> tuple[str, str]:
    """raygate's budgets for ``work``'s head and ``base`` group, applied by raygate, owned
    by the RayCluster and counted by the disruption controller: (head's name, base's)."""
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
    written = wait_for_reason(scenario, "RayCluster", "work", "FloorBudgetWritten", count=2)
    assert {e["related"]["name"] for e in written} == {head, base}
    return head, base


def drain_stops_at_the_floor(scenario: Scenario, testbed: Testbed, only: str) -> None:
    """``kubectl drain`` of the one node evicts the two surplus workers and stops there,
    with the budget's refusal; the node is uncordoned after."""
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


def budgets_follow_the_cluster(scenario: Scenario, testbed: Testbed, head: str,
                               base: str) -> None:
    """minReplicas raised raises minAvailable, 0 deletes the group's budget; the RayCluster
    deleted, the garbage collector deletes the rest."""
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


@contextmanager
def another_raygate(testbed: Testbed, name: str, service_account: str) -> Iterator[str]:
    """One more ``raygate serve`` with deploy/'s settings under ``service_account``'s
    token; yields its URL, stops it after."""
    kubeconfig = testbed.service_account_kubeconfig(service_account)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = testbed.run(name, [
        sys.executable, "-m", "raygate", "serve", f"--kubeconfig={kubeconfig}",
        f"--config={testbed.workdir / 'raygate.yaml'}", f"--http-addr=127.0.0.1:{port}",
        f"--grpc-addr=127.0.0.1:{free_port()}", "--authz=off", "--shutdown-delay-seconds=0",
    ], env={"PYTHONPATH": str(REPO)})
    try:
        wait_for(f"{name} /readyz", lambda: urllib.request.urlopen(
            f"{url}/readyz", timeout=2).status == 200, 120, process)
        yield url
    finally:
        testbed.processes.pop(name).stop()


def test_two_replicas_converge_on_the_latest_floor(scenario: Scenario,
                                                   testbed: Testbed) -> None:
    name = scenario.name
    scenario.setup([node(f"{name}-cpu-a", name, cpu=16)])
    with another_raygate(testbed, "raygate-second", RAYGATE_ACCOUNT) as second:
        scenario.create(raycluster("pair", scenario.namespace, name,
                                   [Group("base", 3, "2", min=1, max=8)]))
        head, base = budget_name("pair", "headgroup"), budget_name("pair", "base")
        wait_until("both budgets", lambda: min_available(scenario) == {head: 1, base: 1},
                   timeout=60)
        for value in (2, 3, 1, 3):  # faster than either raygate follows
            set_min(scenario, "pair", "base", value)
        wait_until("minAvailable 3", lambda: min_available(scenario).get(base) == 3,
                   timeout=60)
        time.sleep(3)  # a replica that lagged behind has had its say by now
        assert min_available(scenario) == {head: 1, base: 3}
        for budget in budgets(scenario).values():
            # Both replicas are one field manager: one entry, the latest apply's.
            assert [f["operation"] for f in budget["metadata"]["managedFields"]
                    if f["manager"] == "raygate"] == ["Apply"]
        for url in (testbed.raygate_url, second):
            assert metric(url, "raygate_disruption_budget_writes_total", result="applied") > 0
            assert metric(url, "raygate_disruption_budget_writes_total", result="failed") == 0
    scenario.step("two raygates wrote the budgets; minAvailable ends at the last floor, 3")


def test_a_raygate_that_may_not_write_budgets_counts_and_backs_off(
        scenario: Scenario, testbed: Testbed) -> None:
    """deploy/'s ClusterRole without its poddisruptionbudgets rule."""
    rbac = list(yaml.safe_load_all((DEPLOY / "base" / "rbac.yaml").read_text()))
    role = next(d for d in rbac if d["kind"] == "ClusterRole"
                and d["metadata"]["name"] == "raygate")
    role["metadata"] = {"name": "raygate-no-budgets"}
    role["rules"] = [r for r in role["rules"] if r["apiGroups"] != ["policy"]]
    account = "raygate-no-budgets"
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(role))
    testbed.kubectl("create", "serviceaccount", account, "-n", "raygate-system")
    testbed.kubectl("create", "clusterrolebinding", account, f"--clusterrole={account}",
                    f"--serviceaccount=raygate-system:{account}")
    with another_raygate(testbed, "raygate-no-budgets", account) as url:
        started = time.monotonic()
        wait_until("a counted refusal", lambda: metric(
            url, "raygate_disruption_budget_writes_total", result="failed") >= 1, timeout=30)
        time.sleep(8)
        failed = metric(url, "raygate_disruption_budget_writes_total", result="failed")
        elapsed = time.monotonic() - started
        # Tried at 0, 1, 3, 7, 15 s ...: a handful in ~10 s, never a hot loop.
        assert 1 <= failed <= 5, (failed, elapsed)
        log = (testbed.logs / "raygate-no-budgets.log").read_text()
        refusals = [line for line in log.splitlines() if "budgets failed" in line]
        assert len(refusals) == 1, refusals
        assert "403" in refusals[0]
        assert urllib.request.urlopen(f"{url}/readyz", timeout=2).status == 200
    scenario.step(f"without the RBAC: {failed:.0f} refused writes in {elapsed:.0f} s, "
                  "logged once, serving on")
