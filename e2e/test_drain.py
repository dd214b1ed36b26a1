"""A drain of a node holding floor workers stops at the floor: raygate's
PodDisruptionBudgets against the real ``kubectl drain``, Eviction API and disruption
controller.

The seed's shape on one 16-CPU node: a 1-CPU head, a ``baseline`` group of two 2-CPU
floor workers (``minReplicas: 2``) and an ``overflow`` group of two 2-CPU surplus workers
(``minReplicas: 0``, in-tree autoscaling). raygate publishes a budget for the head
(``minAvailable: 1``) and one for ``baseline`` (``minAvailable: 2``); ``overflow`` has a
floor of 0, so no budget. A second, empty node is added once they run, for KubeRay's
recreations.

``kubectl drain --timeout=15s`` of the first node: it evicts the two surplus workers at
once, then asks again every 5 s for the head and the floor, is refused each time (429 from
the budgets) and gives up when its timeout runs out, the node still holding them. The
Eviction API, asked pod by pod afterwards, answers exactly that: 429 for each of the
three, naming its budget. KubeRay recreates the evicted surplus on the other node.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e import report
from e2e.objects import Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from raygate.plugin.budgets import budget_name
from testbed.api import ApiError
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

CLUSTER = "seed"
REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget"
DRAIN_TIMEOUT = 15  # seconds: three of kubectl's 5-second retries of the refused pods


def budgets_status(scenario: Scenario) -> dict[str, tuple[int, int | None]]:
    """Each budget's (minAvailable, disruptionsAllowed) as the disruption controller says."""
    path = f"/apis/policy/v1/namespaces/{scenario.namespace}/poddisruptionbudgets"
    return {b["metadata"]["name"]: (b["spec"]["minAvailable"],
                                    b.get("status", {}).get("disruptionsAllowed"))
            for b in scenario.api.items(path)}


def on_node(scenario: Scenario, node_name: str) -> dict[str, str]:
    """Pods bound to ``node_name`` and not terminating, by name: their group."""
    return {p["metadata"]["name"]: p["metadata"]["labels"].get("ray.io/group", "")
            for p in scenario.live_pods() if p["spec"].get("nodeName") == node_name
            and not p["metadata"].get("deletionTimestamp")}


def evict(scenario: Scenario, pod: str) -> tuple[int, str]:
    """Ask the Eviction API to evict ``pod``: (HTTP status, message)."""
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": pod, "namespace": scenario.namespace}}
    try:
        scenario.api.create(f"{scenario.pods_path}/{pod}/eviction", body)
    except ApiError as exc:
        return exc.status, str(exc)
    return 201, "evicted"


def said_of(stderr: str, words: str) -> list[str]:
    """The pods named by kubectl drain's ``error when evicting pods/"<pod>" …`` lines
    that say ``words``, each once."""
    return sorted({line.split('"')[1] for line in stderr.splitlines()
                   if line.startswith("error when evicting pods/") and words in line})


def bring_up(scenario: Scenario) -> tuple[str, dict[str, str]]:
    """The RayCluster on one node, its budgets counted; returns the node and its pods."""
    name = scenario.name
    first = f"{name}-cpu-a"
    scenario.setup([node(first, name, cpu=16)])
    scenario.create(raycluster(CLUSTER, scenario.namespace, name, [
        Group("baseline", 2, "2", min=2, max=2), Group("overflow", 2, "2", min=0, max=8)],
        head_cpu="1"))
    wait_until("the head, 2 floor and 2 surplus workers running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("baseline")) == 2
               and len(scenario.running("overflow")) == 2, timeout=90)
    head, floor = budget_name(CLUSTER, "headgroup"), budget_name(CLUSTER, "baseline")
    # Both budgets at their minimum: neither allows a disruption; overflow has none.
    wait_until("raygate's budgets, counted by the disruption controller",
               lambda: budgets_status(scenario) == {head: (1, 0), floor: (2, 0)}, timeout=60)
    scenario.step("budgets: head minAvailable 1, baseline minAvailable 2, no disruption "
                  "allowed; overflow (floor 0) has none")
    scenario.add_node(node(f"{name}-cpu-b", name, cpu=16))
    scenario.step(f"added {name}-cpu-b (empty)")
    return first, on_node(scenario, first)


def test_drain_of_a_node_with_floor_workers_stops_at_the_floor(
        scenario: Scenario, testbed: Testbed) -> None:
    first, before = bring_up(scenario)
    assert sorted(before.values()) == ["baseline", "baseline", "headgroup", "overflow",
                                       "overflow"], before
    surplus = sorted(p for p, group in before.items() if group == "overflow")
    floor = sorted(p for p, group in before.items() if group != "overflow")

    started = time.monotonic()
    drained = testbed.kubectl("drain", "--ignore-daemonsets", "--delete-emptydir-data",
                              f"--timeout={DRAIN_TIMEOUT}s", first, check=False)
    took = time.monotonic() - started
    scenario.step(f"kubectl drain --timeout={DRAIN_TIMEOUT}s: exit {drained.returncode} "
                  f"after {took:.1f} s")
    # The drain never completes: it gives up when its timeout runs out, not before,
    # refused by the budgets for exactly the head and the floor, retrying them to the end.
    assert drained.returncode != 0, drained.stdout
    assert took >= DRAIN_TIMEOUT, took
    refused = said_of(drained.stderr, f"(will retry after 5s): {REFUSAL}")
    timed_out = said_of(drained.stderr, f": global timeout reached: {DRAIN_TIMEOUT}s")
    assert refused == timed_out == floor, drained.stderr
    # The surplus' evictions were accepted (kubectl may still wait for a pod's grace
    # period: kwok ends a deleted pod within it, as a kubelet does).
    wait_until("the evicted surplus gone", lambda: all(
        h.deleted is not None for h in scenario.history() if h.name in surplus), timeout=60)
    assert {h.name: h.disruption for h in scenario.history() if h.name in surplus} == \
        dict.fromkeys(surplus, "EvictionByEvictionAPI")

    left = on_node(scenario, first)
    assert sorted(left) == floor, "the head and the floor stay on the drained node"

    # The Eviction API, pod by pod: every one of the floor is refused by its budget.
    answers = {pod: evict(scenario, pod) for pod in floor}
    scenario.step("Eviction API: " + ", ".join(f"{pod} {status}"
                                                for pod, (status, _) in answers.items()))
    for pod, (status, said) in answers.items():
        assert status == 429 and REFUSAL in said, (pod, status, said)
    assert sorted(on_node(scenario, first)) == floor

    # KubeRay replaced the evicted surplus; the cordoned node takes none of them.
    second = f"{scenario.name}-cpu-b"
    wait_until("KubeRay's 2 new surplus workers running on the other node", lambda: sorted(
        p["spec"]["nodeName"] for p in scenario.running("overflow")) == [second, second],
        timeout=60)
    assert not set(surplus) & {p["metadata"]["name"] for p in scenario.running("overflow")}
    head, base = budget_name(CLUSTER, "headgroup"), budget_name(CLUSTER, "baseline")
    assert budgets_status(scenario) == {head: (1, 0), base: (2, 0)}
    testbed.kubectl("uncordon", first)
    report.add("drain-1-floor", scenario.timeline(
        f"Drain: kubectl drain of a node with the head, 2 floor and 2 surplus workers "
        f"evicts the surplus, is refused the floor (429) and gives up after its "
        f"{DRAIN_TIMEOUT} s timeout") + "\n```\n" + drained.stdout + drained.stderr + "```\n")
