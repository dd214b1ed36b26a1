"""One role per pod, decided once at its creation and read by every layer, on the real
kube-scheduler with raygate's extender in its cycle and its webhook (issue #42 item 3).

1. **A floor pod stranded by the layers' disagreement, no more.** A group whose floor is
   two pods, one CPU place free, a GPU node with room, a second CPU node added later.
   Before, the extender derived roles each cycle (a pending pod was floor while the group
   had fewer than its floor scheduled) while the native rule fixed them in release order:
   a pod released as surplus was refused the GPU node as floor, took the CPU place when it
   came, and the pod released as floor waited beside the GPU node: 3 of 4 running. Now
   the extender reads the role raygate wrote: the surplus worker (the group scaled past
   its floor while one floor worker waits) goes to the GPU node at once, the waiting floor
   worker to the CPU node when it comes, 4 of 4 running.
2. **A floor worker deleted while its group is at its floor**: KubeRay's replacement is
   created floor (the required rule), and the group keeps exactly its floor.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from e2e import report
from e2e.objects import HEAD_NODE, TOLERATE_GPU, WORKER_NODE, Group, node, pool, raycluster
from e2e.scenario import Scenario, wait_until
from raygate.policy.classify import LABEL_ROLE, LABEL_RULE

pytestmark = pytest.mark.e2e


def roles(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter((p["metadata"].get("labels") or {}).get(LABEL_ROLE, "") for p in pods)


def test_the_extender_honours_the_role_written_at_creation(scenario: Scenario) -> None:
    name = scenario.name
    # The head (2 CPU and the autoscaler's 500m) on a node of its own (by node selector),
    # cpu-1, two the GPU node.
    scenario.setup([node(f"{name}-head", name, cpu=3, labels=HEAD_NODE),
                    node(f"{name}-cpu-1", name, cpu=2, labels=WORKER_NODE),
                    node(f"{name}-gpu", name, cpu=8, gpus=4, labels=WORKER_NODE)])
    workers = {"tolerations": [TOLERATE_GPU], **pool(name, WORKER_NODE)}
    scenario.create(raycluster("shape", scenario.namespace, name, [
        Group("work", 2, "2", min=2, max=4, pod_spec=workers)],
        head_pod_spec=pool(name, HEAD_NODE)))
    wait_until("the head and one floor worker running", lambda: len(
        scenario.running("headgroup")) == 1 and len(scenario.running("work")) == 1,
        timeout=90)
    scenario.step("the head on its node, a floor worker on cpu-1; the other floor worker "
                  "waits (its rule: not a GPU node), 1 of 2 floor pods scheduled")
    scenario.scale("shape", "work", 3)
    # Derived per cycle, this pod would be floor (1 of 2 scheduled) and refused the GPU
    # node; created surplus, every layer lets it have it.
    wait_until("the surplus worker running", lambda: len(scenario.running("work")) == 2,
               timeout=90)
    placed = {(p["metadata"]["labels"][LABEL_ROLE], scenario.node_kind(p))
              for p in scenario.running("work")}
    assert placed == {("floor", "CPU"), ("surplus", "GPU")}, placed
    scenario.step("scaled to 3: the surplus worker on the GPU node")
    scenario.add_node(node(f"{name}-cpu-2", name, cpu=2, labels=WORKER_NODE))
    wait_until("4 of 4 running", lambda: len(scenario.running("work")) == 3, timeout=90)
    pods = scenario.group_pods("work")
    assert roles(pods) == Counter(floor=2, surplus=1)
    assert all(scenario.node_kind(p) == "CPU" for p in pods
               if p["metadata"]["labels"][LABEL_ROLE] == "floor")
    scenario.step("cpu-2 added: the waiting floor worker bound there; 4 of 4 running")
    report.add("roles-1-one-role", scenario.timeline(
        "One role per pod: floor 2, one CPU place, a GPU node with room, a CPU node later"))


def test_a_floor_workers_replacement_is_floor(scenario: Scenario) -> None:
    name = scenario.name
    scenario.setup([node(f"{name}-cpu", name, cpu=16)])
    scenario.create(raycluster("refill", scenario.namespace, name,
                               [Group("work", 3, "1", min=2, max=4)]))
    wait_until("3 workers running", lambda: len(scenario.running("work")) == 3, timeout=90)
    pods = scenario.group_pods("work")
    assert roles(pods) == Counter(floor=2, surplus=1)
    (victim,) = [p for p in pods if p["metadata"]["labels"][LABEL_ROLE] == "floor"][:1]
    scenario.api.request("DELETE", f"{scenario.pods_path}/{victim['metadata']['name']}")
    scenario.step(f"floor worker {victim['metadata']['name']} deleted")
    wait_until("KubeRay's replacement running", lambda: len(scenario.running("work")) == 3
               and victim["metadata"]["name"] not in {
                   p["metadata"]["name"] for p in scenario.running("work")}, timeout=90)
    after = scenario.group_pods("work")
    assert roles(after) == Counter(floor=2, surplus=1), roles(after)
    (new,) = [p for p in after if p["metadata"]["name"] not in {
        q["metadata"]["name"] for q in pods}]
    assert new["metadata"]["labels"][LABEL_RULE] == "floor-avoids-gpu"
    scenario.step(f"the replacement {new['metadata']['name']} created floor "
                  "(floor-avoids-gpu): 2 floor, 1 surplus")
    report.add("roles-2-replacement", scenario.timeline(
        "One role per pod: a floor worker deleted, its replacement created floor"))
