"""What Kubernetes' own gangs (``scheduling.k8s.io/v1beta1``) are made of in the e2e
scenarios: the Workload and PodGroup KubeRay 1.7's ``kubernetes-was`` batch scheduler
makes for a fixed-size RayCluster (the testbed's KubeRay 1.6.1 writes neither), and a gang
GPU job of two pods."""

from __future__ import annotations

from typing import Any

from e2e.objects import SCENARIO_LABEL, TOLERATE_GPU
from e2e.scenario import Scenario
from testbed.native_gangs import API

GROUPS = f"/apis/{API}"
QUICK = {"terminationGracePeriodSeconds": 1}
"""Victims go within a second (kwok removes a deleted pod within its grace period)."""


def owned_by(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
             "name": cluster["metadata"]["name"], "uid": cluster["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}]


def gang_policy(min_count: int) -> dict[str, Any]:
    return {"gang": {"minCount": min_count}}


def kuberay_was_gang(scenario: Scenario, name: str) -> int:
    """The Workload ``name`` and PodGroup ``name-cluster`` KubeRay 1.7's kubernetes-was
    makes for a fixed-size RayCluster labelled for it; returns ``minCount``."""
    cluster = scenario.api.get(
        f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{name}")
    spec = cluster["spec"]
    min_count: int = 1 + sum(g["replicas"] * g.get("numOfHosts", 1)
                        for g in spec["workerGroupSpecs"])
    owners = owned_by(cluster)
    scenario.api.create(f"{GROUPS}/namespaces/{scenario.namespace}/workloads", {
        "apiVersion": API, "kind": "Workload",
        "metadata": {"name": name, "namespace": scenario.namespace, "ownerReferences": owners},
        "spec": {"controllerRef": {"apiGroup": "ray.io", "kind": "RayCluster", "name": name},
                 "podGroupTemplates": [{"name": "cluster",
                                        "schedulingPolicy": gang_policy(min_count)}]}})
    scenario.api.create(f"{GROUPS}/namespaces/{scenario.namespace}/podgroups", {
        "apiVersion": API, "kind": "PodGroup",
        "metadata": {"name": f"{name}-cluster", "namespace": scenario.namespace,
                     "ownerReferences": owners},
        "spec": {"workloadRef": {"workloadName": name, "templateName": "cluster"},
                 "schedulingPolicy": gang_policy(min_count)}})
    scenario.step(f"created Workload {name} and PodGroup {name}-cluster "
                  f"(gang, minCount {min_count}), owned by the RayCluster")
    return min_count


def gang_job(scenario: Scenario, priority: str, scheduler: str) -> None:
    """A PodGroup ``train`` (gang, minCount 2) and its two pods, 8 CPU and 2 GPUs each,
    at ``priority`` (the PodGroup's priority comes from the same class)."""
    scenario.api.create(f"{GROUPS}/namespaces/{scenario.namespace}/podgroups", {
        "apiVersion": API, "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": scenario.namespace},
        "spec": {"schedulingPolicy": gang_policy(2), "priorityClassName": priority}})
    resources = {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}
    for i in range(2):
        scenario.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"train-{i}", "namespace": scenario.namespace,
                         "labels": {"app": "train"}},
            "spec": {"schedulerName": scheduler, "priorityClassName": priority, **QUICK,
                     "schedulingGroup": {"podGroupName": "train"},
                     "nodeSelector": {SCENARIO_LABEL: scenario.name},
                     "tolerations": [TOLERATE_GPU],
                     "containers": [{"name": "train", "image": "example.invalid/train:1",
                                     "resources": {"requests": resources,
                                                   "limits": resources}}]}})
