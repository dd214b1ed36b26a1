"""Fluent builders of Kubernetes objects as JSON-ready dicts, shaped as the API server
and kubectl print them: ``make_pod("w1").ray("demo", "overflow").requests(cpu="2").obj()``.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any, Self

Obj = dict[str, Any]

T0 = "2026-11-30T04:00:00Z"
T0_EPOCH = 1796011200.0  # T0 as seconds since the epoch


def uid_for(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{namespace}/{name}"))


def iso(epoch: float) -> str:
    """Seconds since the epoch to an RFC 3339 time, as Kubernetes writes it."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodBuilder:
    def __init__(self, name: str, namespace: str) -> None:
        self._obj: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid_for("Pod", namespace, name),
                "creationTimestamp": T0,
                "labels": {},
            },
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {}}]},
            "status": {"phase": "Pending"},
        }

    @property
    def _meta(self) -> Obj:
        meta: Obj = self._obj["metadata"]
        return meta

    def ray(self, cluster: str, group: str = "workers", node_type: str = "worker") -> Self:
        """A KubeRay pod: labels, controller owner and Volcano annotations as KubeRay sets
        them."""
        group = "headgroup" if node_type == "head" else group
        self._meta["labels"].update({
            "ray.io/cluster": cluster,
            "ray.io/group": group,
            "ray.io/node-type": node_type,
            "ray.io/is-ray-node": "yes",
        })
        self._meta["ownerReferences"] = [{
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": cluster,
            "uid": uid_for("RayCluster", self._meta["namespace"], cluster),
            "controller": True,
            "blockOwnerDeletion": True,
        }]
        self._meta.setdefault("annotations", {})["scheduling.k8s.io/group-name"] = (
            f"ray-{cluster}-pg")
        return self

    def head(self, cluster: str) -> Self:
        return self.ray(cluster, node_type="head")

    def requests(self, **resources: str) -> Self:
        """Container 0's requests; ``nvidia_com_gpu`` spells ``nvidia.com/gpu``."""
        res = self._obj["spec"]["containers"][0]["resources"]
        res.setdefault("requests", {}).update(_names(resources))
        return self

    def limits(self, **resources: str) -> Self:
        res = self._obj["spec"]["containers"][0]["resources"]
        res.setdefault("limits", {}).update(_names(resources))
        return self

    def init_requests(self, sidecar: bool = False, **resources: str) -> Self:
        init: Obj = {"name": f"init-{len(self._obj['spec'].get('initContainers', []))}",
                     "resources": {"requests": _names(resources)}}
        if sidecar:
            init["restartPolicy"] = "Always"
        self._obj["spec"].setdefault("initContainers", []).append(init)
        return self

    def on(self, node: str) -> Self:
        self._obj["spec"]["nodeName"] = node
        self._obj["status"]["phase"] = "Running"
        return self

    def gated(self, *names: str) -> Self:
        self._obj["spec"]["schedulingGates"] = [{"name": n} for n in names]
        return self

    def claim(self, name: str, *, claim: str = "", template: str = "") -> Self:
        """A ``spec.resourceClaims`` entry: a ResourceClaim or a template by name."""
        entry: Obj = {"name": name}
        if claim:
            entry["resourceClaimName"] = claim
        if template:
            entry["resourceClaimTemplateName"] = template
        self._obj["spec"].setdefault("resourceClaims", []).append(entry)
        return self

    def gang(self, pod_group: str) -> Self:
        """A member of Kubernetes' own PodGroup ``pod_group`` (``spec.schedulingGroup``)."""
        self._obj["spec"]["schedulingGroup"] = {"podGroupName": pod_group}
        return self

    def affinity(self, affinity: Obj) -> Self:
        self._obj["spec"]["affinity"] = affinity
        return self

    def tolerate(self, key: str = "", operator: str = "Exists", value: str = "",
                 effect: str = "") -> Self:
        toleration = {"key": key, "operator": operator, "value": value, "effect": effect}
        self._obj["spec"].setdefault("tolerations", []).append(
            {k: v for k, v in toleration.items() if v})
        return self

    def priority(self, value: int) -> Self:
        self._obj["spec"]["priority"] = value
        return self

    def created(self, timestamp: str) -> Self:
        self._meta["creationTimestamp"] = timestamp
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._meta.setdefault("annotations", {})[key] = value
        return self

    def label(self, key: str, value: str) -> Self:
        self._meta["labels"][key] = value
        return self

    def uid(self, value: str) -> Self:
        self._meta["uid"] = value
        return self

    def phase(self, value: str) -> Self:
        self._obj["status"]["phase"] = value
        return self

    def condition(self, type_: str, status: str, reason: str = "", message: str = "",
                  at: str = T0) -> Self:
        cond: Obj = {"type": type_, "status": status, "lastTransitionTime": at}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        self._obj["status"].setdefault("conditions", []).append(cond)
        return self

    def preempted(self, at: str = T0, reason: str = "PreemptionByScheduler") -> Self:
        """Marked by the scheduler for preemption: DisruptionTarget, then deletion."""
        self.condition("DisruptionTarget", "True", reason,
                       "default-scheduler: preempting to accommodate a higher priority pod", at)
        self._meta["deletionTimestamp"] = at
        return self

    def terminating(self, at: str = T0) -> Self:
        self._meta["deletionTimestamp"] = at
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._obj: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "uid": uid_for("Node", "", name),
                         "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
        }

    def allocatable(self, **resources: str) -> Self:
        self._obj["status"]["allocatable"].update(_names(resources))
        return self

    def gpus(self, count: int, resource: str = "nvidia.com/gpu") -> Self:
        self._obj["status"]["allocatable"][resource] = str(count)
        return self

    def label(self, key: str, value: str) -> Self:
        self._obj["metadata"]["labels"][key] = value
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> Self:
        taint = {"key": key, "effect": effect} | ({"value": value} if value else {})
        self._obj["spec"].setdefault("taints", []).append(taint)
        return self

    def unschedulable(self) -> Self:
        self._obj["spec"]["unschedulable"] = True
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)


class RayClusterBuilder:
    def __init__(self, name: str, namespace: str) -> None:
        self._obj: Obj = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": uid_for("RayCluster", namespace, name)},
            "spec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                    {"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}},
                "workerGroupSpecs": [],
            },
        }

    def autoscaling(self, enabled: bool = True) -> Self:
        self._obj["spec"]["enableInTreeAutoscaling"] = enabled
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._obj["metadata"].setdefault("annotations", {})[key] = value
        return self

    def label(self, key: str, value: str) -> Self:
        self._obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def owned_by(self, kind: str, name: str) -> Self:
        """Made by ``kind`` ``name`` (a RayJob, a RayService), its controller owner."""
        ns = self._obj["metadata"]["namespace"]
        self._obj["metadata"]["ownerReferences"] = [{
            "apiVersion": "ray.io/v1", "kind": kind, "name": name,
            "uid": uid_for(kind, ns, name), "controller": True}]
        return self

    def group(self, name: str, *, replicas: int | None = None, min: int = 0,
              max: int | None = None, hosts: int | None = None,
              cpu: str = "1", gpu: str | None = None) -> Self:
        group: Obj = {"groupName": name, "minReplicas": min, "rayStartParams": {}}
        if replicas is not None:
            group["replicas"] = replicas
        if max is not None:
            group["maxReplicas"] = max
        if hosts is not None:
            group["numOfHosts"] = hosts
        requests = {"cpu": cpu} | ({"nvidia.com/gpu": gpu} if gpu else {})
        group["template"] = {"spec": {"containers": [
            {"name": "ray-worker", "image": "rayproject/ray:2.60.0",
             "resources": {"requests": requests, "limits": requests}}]}}
        self._obj["spec"]["workerGroupSpecs"].append(group)
        return self

    def suspended(self, group: str | None = None) -> Self:
        """``spec.suspend`` of the cluster, or of one worker group."""
        if group is None:
            self._obj["spec"]["suspend"] = True
        for spec in self._obj["spec"]["workerGroupSpecs"]:
            if spec["groupName"] == group:
                spec["suspend"] = True
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)


def _names(resources: dict[str, str]) -> dict[str, str]:
    return {k.replace("nvidia_com_gpu", "nvidia.com/gpu")
             .replace("ephemeral_storage", "ephemeral-storage"): v
            for k, v in resources.items()}


def make_pod(name: str, namespace: str = "ray") -> PodBuilder:
    return PodBuilder(name, namespace)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_raycluster(name: str, namespace: str = "ray") -> RayClusterBuilder:
    return RayClusterBuilder(name, namespace)


def make_event(pod: Obj, reason: str, message: str, *, at: str = T0,
               component: str = "karpenter") -> Obj:
    """A core/v1 Event about ``pod`` as a legacy recorder writes it (Karpenter's and
    Cluster Autoscaler's): ``source.component``, first and last timestamps."""
    meta = pod["metadata"]
    name = f"{meta['name']}.{reason.lower()}"
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": meta["namespace"],
                         "uid": uid_for("Event", meta["namespace"], name)},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": reason, "message": message, "source": {"component": component},
            "firstTimestamp": at, "lastTimestamp": at, "count": 1,
            "type": "Warning" if reason == "FailedScheduling" else "Normal"}


def make_nodeclaim(name: str, node: str = "", *, deleting: bool = False) -> Obj:
    """A Karpenter NodeClaim, with the node it registered (if any)."""
    claim: Obj = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                  "metadata": {"name": name, "uid": uid_for("NodeClaim", "", name)},
                  "spec": {}, "status": {"nodeName": node} if node else {}}
    if deleting:
        claim["metadata"]["deletionTimestamp"] = T0
    return claim


def make_gang_group(name: str, min_count: int, *, workload: str = "", namespace: str = "ray",
                    scheduled: tuple[str, str, str, str] | None = None) -> Obj:
    """Kubernetes' own PodGroup (``scheduling.k8s.io/v1beta1``) with a gang policy, as
    KubeRay's ``kubernetes-was`` writes it (``<cluster>-cluster``, its Workload
    ``<cluster>``); ``scheduled``: its ``PodGroupInitiallyScheduled`` condition (status,
    reason, message, lastTransitionTime)."""
    group: Obj = {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace,
                     "uid": uid_for("PodGroup.scheduling.k8s.io", namespace, name)},
        "spec": {"workloadRef": {"workloadName": workload or name, "templateName": "cluster"},
                 "schedulingPolicy": {"gang": {"minCount": min_count}}},
        "status": {}}
    if scheduled is not None:
        status, reason, message, at = scheduled
        group["status"]["conditions"] = [{
            "type": "PodGroupInitiallyScheduled", "status": status, "reason": reason,
            "message": message, "lastTransitionTime": at}]
    return group


# --- Dynamic Resource Allocation (resource.k8s.io/v1) ----------------------------------

DRA_VERSION = "resource.k8s.io/v1"


def make_device_class(name: str, driver: str = "", *, extended_resource: str = "") -> Obj:
    """A DeviceClass as a DRA driver ships it: a CEL selector on its driver, and the
    extended resource it backs when given."""
    spec: Obj = {}
    if driver:
        spec["selectors"] = [{"cel": {"expression": f"device.driver == '{driver}'"}}]
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": DRA_VERSION, "kind": "DeviceClass",
            "metadata": {"name": name, "uid": uid_for("DeviceClass", "", name)}, "spec": spec}


def make_resource_slice(node: str, driver: str, devices: int = 1, *, name: str = "") -> Obj:
    """The ResourceSlice a DRA driver publishes for ``node``: one pool, ``devices`` GPUs."""
    name = name or f"{node}-{driver}"
    return {"apiVersion": DRA_VERSION, "kind": "ResourceSlice",
            "metadata": {"name": name, "uid": uid_for("ResourceSlice", "", name)},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "type": {"string": "gpu"}, "index": {"int": i}}}
                         for i in range(devices)]}}


def _claim_spec(device_classes: tuple[str, ...]) -> Obj:
    return {"devices": {"requests": [
        {"name": f"req-{i}", "exactly": {"deviceClassName": c, "allocationMode": "ExactCount",
                                         "count": 1}}
        for i, c in enumerate(device_classes)]}}


def make_resource_claim(name: str, *device_classes: str, namespace: str = "ray") -> Obj:
    return {"apiVersion": DRA_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": uid_for("ResourceClaim", namespace, name)},
            "spec": _claim_spec(device_classes)}


def make_claim_template(name: str, *device_classes: str, namespace: str = "ray") -> Obj:
    return {"apiVersion": DRA_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": uid_for("ResourceClaimTemplate", namespace, name)},
            "spec": {"spec": _claim_spec(device_classes)}}


def object_list(*objects: Obj) -> Obj:
    """A ``kind: List`` as ``kubectl get -o json`` prints it."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": list(objects)}
