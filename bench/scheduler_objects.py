"""The objects of ``bench.scheduler_throughput``: the nodes, RayClusters and pending Ray
worker pods it creates through the API, made from ``bench.payloads`` as a client sends
them (no server-set metadata, no status but a Node's)."""

from __future__ import annotations

import copy
from typing import Any

from bench import payloads

__all__ = ["FLOOR_SHARE", "NAMESPACE", "SCHEDULER", "nodes", "probe_pod", "rayclusters",
           "worker_pods"]

Obj = dict[str, Any]
NAMESPACE = "ray"
SCHEDULER = "ray-scheduler"
FLOOR_SHARE = 0.2
"""Of each RayCluster's workers, those of the floor group (replicas = minReplicas)."""
PODS_PER_CLUSTER = 200


def _clean(obj: Obj, *, keep_status: bool = False) -> Obj:
    """What a client sends: no server-set metadata, and no status unless ``keep_status``."""
    obj = copy.deepcopy(obj)
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        obj["metadata"].pop(key, None)
    if not keep_status:
        obj.pop("status", None)
    return obj


def nodes(count: int) -> list[Obj]:
    """``count`` nodes, one in seven a GPU node: the ``nvidia.com/gpu`` taint and
    resource, and the label ``nvidia.com/gpu.present=true`` that raygate's native rule
    names (``policy.gpuNodeLabels``)."""
    gpu = payloads.snapshot_gpu_node_names(payloads.cluster_snapshot(count))
    # Status kept: the API server keeps a new Node's status (a Pod's it drops).
    return [_clean(payloads.node(name, i, name in gpu), keep_status=True)
            for i, name in enumerate(payloads.node_names(count))]


def rayclusters(pods: int) -> list[Obj]:
    count = max(1, pods // PODS_PER_CLUSTER)
    out = []
    for c in range(count):
        body = _clean(payloads.raycluster())
        body["metadata"].update(name=f"bench-{c}", namespace=NAMESPACE)
        per = pods // count + (1 if c < pods % count else 0)
        floor = max(1, int(per * FLOOR_SHARE))
        for group in body["spec"]["workerGroupSpecs"]:
            if group["groupName"] == payloads.FLOOR_GROUP:
                group.update(replicas=floor, minReplicas=floor, maxReplicas=floor)
            else:
                group.update(replicas=per - floor, minReplicas=0, maxReplicas=per)
        out.append(body)
    return out


def worker_pods(clusters: list[Obj], run: str) -> list[Obj]:
    """The pending workers KubeRay would create for ``clusters``, named per run."""
    out = []
    for rc in clusters:
        name, uid = rc["metadata"]["name"], rc["metadata"]["uid"]
        for group in rc["spec"]["workerGroupSpecs"]:
            for i in range(group["replicas"]):
                pod = _clean(payloads.ray_worker_pod(group["groupName"], index=i))
                meta = pod["metadata"]
                meta.pop("generateName", None)
                meta["name"] = f"{name}-{group['groupName']}-{run}-{i}"
                meta["namespace"] = NAMESPACE
                for key in ("app.kubernetes.io/instance", "ray.io/cluster"):
                    meta["labels"][key] = name
                meta["ownerReferences"][0].update(name=name, uid=uid)
                spec = pod["spec"]
                spec["schedulerName"] = SCHEDULER
                spec.pop("nodeName", None)
                # The seed's clusters: Ray pods tolerate the GPU taint (a blanket toleration,
                # or one copied from a GPU group), so only a scheduler-side rule keeps them off.
                spec["tolerations"].append({"key": payloads.GPU_RESOURCE, "operator": "Exists",
                                            "effect": "NoSchedule"})
                anti = spec["affinity"]["podAntiAffinity"]
                anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
                    "labelSelector"]["matchLabels"]["ray.io/cluster"] = name
                out.append(pod)
    return out


def probe_pod() -> Obj:
    """A small pod, no Ray pod (no webhook call), for ``SCHEDULER``: bound once that
    kube-scheduler schedules."""
    return {"metadata": {"generateName": "probe-", "namespace": NAMESPACE},
            # No controller-manager here, so no "default" ServiceAccount: the bench's own.
            "spec": {"schedulerName": SCHEDULER, "serviceAccountName": "ray-bench",
                     "automountServiceAccountToken": False, "containers": [{
                "name": "probe", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
