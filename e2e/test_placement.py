"""Where the real kube-scheduler puts a RayCluster's pods, with raygate as its extender
and without it.

Nodes of each scenario: two CPU nodes of 8 CPU and a GPU node of 32 CPU and 4 GPUs
(tainted). The RayCluster: a 2-CPU head, a ``baseline`` group of 2 (the gang floor) and
an ``overflow`` group scaled to 4 afterwards, 4 CPU a worker. CPU nodes hold the head,
the floor and one overflow worker; the rest can only go to the GPU node.
"""

from __future__ import annotations

import pytest

from e2e import report
from e2e.objects import Group, node, raycluster, recipe_groups, tolerating_gpu_groups
from e2e.scenario import Scenario, wait_until

pytestmark = pytest.mark.e2e


def nodes(scenario: str) -> list[dict[str, object]]:
    return [node(f"{scenario}-cpu-a", scenario, cpu=8), node(f"{scenario}-cpu-b", scenario, cpu=8),
            node(f"{scenario}-gpu-a", scenario, cpu=32, gpus=4)]


def bring_up(scenario: Scenario, groups: list[Group], scheduler: str) -> None:
    # Without raygate means without its gate too.
    scenario.setup(nodes(scenario.name), native_placement=scheduler != "default-scheduler")
    scenario.create(raycluster("mixed", scenario.namespace, scenario.name, groups,
                               scheduler=scheduler))
    wait_until("the head and the 2 floor workers running",
               lambda: len(scenario.running("headgroup")) == 1
               and len(scenario.running("baseline")) == 2, timeout=90)
    scenario.step("head and floor running")
    overflow_to_four(scenario, "mixed")


def overflow_to_four(scenario: Scenario, cluster: str) -> None:
    """Scale ``cluster``'s overflow group to 4, as the Ray autoscaler does, until they run."""
    scenario.scale(cluster, "overflow", 4)
    wait_until("4 overflow workers running", lambda: len(scenario.running("overflow")) == 4,
               timeout=90)
    scenario.step("4 overflow workers running")


def kinds(scenario: Scenario, group: str) -> list[str]:
    return sorted(scenario.node_kind(pod) for pod in scenario.running(group))


def test_with_raygate_floor_and_head_stay_on_cpu_nodes(scenario: Scenario) -> None:
    bring_up(scenario, tolerating_gpu_groups(baseline=2, overflow=0), "ray-scheduler")

    assert kinds(scenario, "headgroup") == ["CPU"]
    assert kinds(scenario, "baseline") == ["CPU", "CPU"]
    # Overflow goes to the GPU node only once CPU nodes are full: one fits there. (Which
    # pod is bound first says nothing: kube-scheduler binds asynchronously, so a later
    # cycle's bind can land first. Without raygate's CPU-first preference, its score and its
    # preferred affinity, the empty GPU node, with room for all four, would take them all.)
    assert kinds(scenario, "overflow") == ["CPU", "GPU", "GPU", "GPU"]
    report.add("placement-1-raygate", scenario.timeline(
        "Placement with raygate (ray-scheduler): both groups tolerate the GPU taint"))


def test_without_raygate_the_floor_lands_on_the_gpu_node(scenario: Scenario) -> None:
    """The same RayCluster under the stock scheduler: the big empty GPU node scores
    highest for everything that tolerates it, the floor included."""
    bring_up(scenario, tolerating_gpu_groups(baseline=2, overflow=0), "default-scheduler")

    floor = kinds(scenario, "headgroup") + kinds(scenario, "baseline")
    assert "GPU" in floor, f"expected the stock scheduler to use the GPU node: {floor}"
    report.add("placement-2-stock", scenario.timeline(
        "Placement without raygate (default-scheduler): the same RayCluster"))


def test_hand_written_recipe_without_raygate(scenario: Scenario) -> None:
    """The seed's two-group recipe: required CPU affinity on the floor, preferred on
    overflow. It keeps the floor off GPU nodes by hand, in every RayCluster's spec."""
    bring_up(scenario, recipe_groups(baseline=2, overflow=0), "default-scheduler")

    assert kinds(scenario, "baseline") == ["CPU", "CPU"]
    report.add("placement-3-recipe", scenario.timeline(
        "Placement without raygate, the hand-written recipe (default-scheduler)"))
