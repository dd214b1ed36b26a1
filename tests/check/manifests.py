"""Manifests for the `raygate check` tests: a RayCluster that passes every rule, a dotted
path setter to break it one field at a time, and the shapes the rules look for (embedded
in a RayJob, RayService or RayCronJob; queued in Volcano or Kueue; GPU affinity terms)."""

from __future__ import annotations

from typing import Any

from testkit.builders import Obj, make_raycluster


def with_(obj: Obj, path: str, value: object) -> Obj:
    """Set a dotted path (list indexes as numbers) in a manifest."""
    *parents, last = path.split(".")
    target: Any = obj
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return obj


def good() -> Obj:
    return make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
        .group("over", replicas=0, min=0, max=8).obj()


def embedded(kind: str, cluster: Obj) -> Obj:
    """``cluster``'s spec inside a RayJob or a RayService, as KubeRay's types name it."""
    field_name = {"RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}[kind]
    spec: Obj = {field_name: cluster["spec"]}
    if kind == "RayJob":
        spec["entrypoint"] = "python train.py"
    return {"apiVersion": "ray.io/v1", "kind": kind,
            "metadata": {"name": kind.lower(), "namespace": "ray"}, "spec": spec}


GROUPS = "spec.workerGroupSpecs"
HEAD = "spec.headGroupSpec.template.spec"
REQUIRED = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def requiring(*terms: list[Obj]) -> Obj:
    """A pod's ``affinity`` whose required node affinity has these terms (ORed)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]}}}


def gpu_present(*values: str) -> Obj:
    return {"key": "nvidia.com/gpu.present", "operator": "In", "values": list(values)}


def gke_accelerator(operator: str, *values: str) -> Obj:
    return {"key": "cloud.google.com/gke-accelerator", "operator": operator,
            **({"values": list(values)} if values else {})}
VOLCANO_QUEUE = {"volcano.sh/queue-name": "q"}


def unscaled_volcano() -> Obj:
    """A RayCluster queued in Volcano, autoscaling off, with 3 replicas above minReplicas 1."""
    return with_(make_raycluster("rc").group("g", replicas=3, min=1, max=8).obj(),
                 "metadata.labels", VOLCANO_QUEUE)


def kueue_autoscaled() -> Obj:
    return with_(good(), "metadata.labels", {"kueue.x-k8s.io/queue-name": "q"})


def cron(cluster: Obj) -> Obj:
    """``cluster``'s spec inside a RayCronJob's RayJob template."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCronJob",
            "metadata": {"name": "nightly", "namespace": "ray"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {
                "entrypoint": "python train.py", "rayClusterSpec": cluster["spec"]}}}


TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
KUBERNETES_GANG = {"ray.io/gang-scheduling-enabled": "true"}


def two_cpu_groups() -> Obj:
    """The seed's shape, autoscaled: ``cpu`` kept to CPU nodes, ``over`` tolerating GPU
    taints; both CPU-only, no priority."""
    return with_(make_raycluster("rc").autoscaling().group("cpu", replicas=0, min=0, max=8)
                 .group("over", replicas=0, min=0, max=8).obj(),
                 f"{GROUPS}.1.template.spec.tolerations", TOLERATE_GPU)
