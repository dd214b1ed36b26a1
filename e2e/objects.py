"""Builders of the objects a scenario creates through the API: simulated nodes (kwok
runs them), RayClusters as an operator writes them, a GPU job.

Each scenario lives on its own nodes (label ``testbed.raygate.dev/scenario``) and in its
own namespace, and its pods select those nodes: scenarios share one control plane and
never see each other's capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DRA_GPUS_LABEL",
    "GPU_TAINT",
    "HEAD_NODE",
    "SCENARIO_LABEL",
    "TOLERATE_GPU",
    "WORKER_NODE",
    "Group",
    "dra_gpu_node",
    "gpu_job",
    "node",
    "pool",
    "raycluster",
    "recipe_groups",
    "tolerating_gpu_groups",
]

SCENARIO_LABEL = "testbed.raygate.dev/scenario"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
HEAD_NODE = {"testbed.raygate.dev/pool": "head"}
WORKER_NODE = {"testbed.raygate.dev/pool": "workers"}
"""Node pools of a scenario whose layout must not depend on which pod a scheduler tries
first (``pool``)."""
RAY_IMAGE = "rayproject/ray:2.60.0"  # never pulled: kwok runs no containers
DRA_GPUS_LABEL = "testbed.raygate.dev/dra-gpus"
"""How many GPUs a DRA GPU node's slice lists: the timeline's node kinds read it (raygate
never does: it reads the slice)."""


def node(name: str, scenario: str, *, cpu: int, gpus: int = 0, memory: str = "256Gi",
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as a kubelet would register it (kwok marks it Ready); a GPU node carries
    ``nvidia.com/gpu`` allocatable and the NoSchedule taint GPU operators add."""
    resources = {"cpu": str(cpu), "memory": memory, "pods": "110"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       SCENARIO_LABEL: scenario,
                       # GPU feature discovery's label, which the seed's recipe selects on.
                       **({"nvidia.com/gpu.present": "true"} if gpus else {}),
                       **(labels or {})},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [GPU_TAINT]} if gpus else {},
        "status": {"capacity": resources, "allocatable": resources},
    }


def dra_gpu_node(name: str, scenario: str, *, cpu: int, gpus: int,
                 driver: str = "gpu.nvidia.com") -> tuple[dict[str, Any], dict[str, Any]]:
    """A GPU node whose GPUs a DRA driver publishes, and the ResourceSlice it publishes:
    no ``nvidia.com/gpu`` allocatable and no GPU label (the driver alone, no GPU feature
    discovery), the GPU taint."""
    body = node(name, scenario, cpu=cpu, labels={DRA_GPUS_LABEL: str(gpus)})
    body["spec"] = {"taints": [GPU_TAINT]}
    slice_ = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{driver}"},
        "spec": {"driver": driver, "nodeName": name,
                 "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {
                     "type": {"string": "gpu"}, "index": {"int": i}}} for i in range(gpus)]},
    }
    return body, slice_


def pool(scenario: str, labels: dict[str, str]) -> dict[str, Any]:
    """Pod spec that keeps a pod on ``scenario``'s nodes of one pool (``HEAD_NODE``...)."""
    return {"nodeSelector": {SCENARIO_LABEL: scenario, **labels}}


@dataclass
class Group:
    """A worker group: ``min``/``max``/``replicas`` as KubeRay reads them."""

    name: str
    replicas: int
    cpu: str
    min: int = 0
    max: int = 8
    labels: dict[str, str] = field(default_factory=dict)
    pod_spec: dict[str, Any] = field(default_factory=dict)
    """Merged into the template's pod spec (tolerations, affinity, priority)."""


def _pod_spec(scenario: str, scheduler: str, container: str, cpu: str,
              extra: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "nodeSelector": {SCENARIO_LABEL: scenario},
        "containers": [{"name": container, "image": RAY_IMAGE,
                        "resources": {"requests": {"cpu": cpu, "memory": "4Gi"},
                                      "limits": {"cpu": cpu, "memory": "4Gi"}}}],
    }
    spec.update(extra)
    return spec


def raycluster(name: str, namespace: str, scenario: str, groups: list[Group], *,
               scheduler: str = "ray-scheduler", head_cpu: str = "2",
               head_pod_spec: dict[str, Any] | None = None,
               autoscaling: bool = True) -> dict[str, Any]:
    """A RayCluster (ray.io/v1) of a head and ``groups``; every pod on ``scenario``'s
    nodes, scheduled by ``scheduler``."""
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "rayVersion": "2.60.0",
            "enableInTreeAutoscaling": autoscaling,
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": _pod_spec(
                scenario, scheduler, "ray-head", head_cpu, head_pod_spec or {})}},
            "workerGroupSpecs": [{
                "groupName": group.name, "replicas": group.replicas,
                "minReplicas": group.min, "maxReplicas": group.max, "rayStartParams": {},
                "template": {"metadata": {"labels": group.labels},
                             "spec": _pod_spec(scenario, scheduler, "ray-worker", group.cpu,
                                               group.pod_spec)},
            } for group in groups],
        },
    }


def tolerating_gpu_groups(baseline: int, overflow: int, cpu: str = "4",
                          overflow_max: int = 8) -> list[Group]:
    """The two groups of the seed, written as a team writes them when nothing keeps CPU
    pods off GPU nodes but raygate: both tolerate the GPU taint, neither has affinity."""
    tolerate = {"tolerations": [TOLERATE_GPU]}
    return [Group("baseline", baseline, cpu, min=baseline, max=baseline, pod_spec=tolerate),
            Group("overflow", overflow, cpu, min=0, max=overflow_max, pod_spec=tolerate)]


def recipe_groups(baseline: int, overflow: int, cpu: str = "4",
                  overflow_max: int = 8) -> list[Group]:
    """The seed's hand-written recipe without raygate: the baseline group required on
    CPU nodes, no GPU toleration, ``volcano.sh/preemptable: "false"``; the overflow group
    preferring CPU nodes and tolerating GPU ones."""
    not_gpu = {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}
    baseline_spec = {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [not_gpu]}]}}}}
    overflow_spec = {"tolerations": [TOLERATE_GPU], "affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [not_gpu]}}]}}}
    return [Group("baseline", baseline, cpu, min=baseline, max=baseline,
                  labels={"volcano.sh/preemptable": "false"}, pod_spec=baseline_spec),
            Group("overflow", overflow, cpu, min=0, max=overflow_max, pod_spec=overflow_spec)]


def gpu_job(name: str, namespace: str, scenario: str, *, cpu: str, gpus: int,
            priority_class: str, scheduler: str = "ray-scheduler") -> dict[str, Any]:
    """A high-priority training pod that needs a GPU node (not a Ray pod)."""
    resources = {"cpu": cpu, "memory": "8Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "train"}},
        "spec": {
            "schedulerName": scheduler, "priorityClassName": priority_class,
            "nodeSelector": {SCENARIO_LABEL: scenario},
            "tolerations": [TOLERATE_GPU],
            "containers": [{"name": "train", "image": "example.invalid/train:1",
                            "resources": {"requests": resources, "limits": resources}}],
        },
    }

