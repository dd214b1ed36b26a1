"""Deterministic payloads for raygate's benchmarks: a cluster snapshot, KubeRay worker pods
and kube-scheduler ``ExtenderArgs`` bodies.

Every generator is a pure function of its arguments: names, UIDs and the choice of GPU
nodes come from ``uuid5`` and a ``random.Random`` with a fixed seed, so two runs (and a
test and a benchmark) see byte-identical payloads.

The snapshot is a ``kind: List`` as ``kubectl get -o json`` prints it, holding

* ``n_nodes`` EKS-style nodes (``ip-10-a-b-c.us-west-2.compute.internal``), 15% of them
  GPU nodes (allocatable ``nvidia.com/gpu: "8"``), the rest CPU nodes;
* the RayCluster ``ray/bench`` with in-tree autoscaling and two worker groups:
  ``baseline`` (replicas = minReplicas = maxReplicas = 4, so its floor is 4) and
  ``overflow`` (minReplicas 0, maxReplicas 100, replicas 20, so its floor is 0);
* the head pod and a few running workers of each group, bound to CPU nodes: fewer
  ``baseline`` workers than its floor, so a pending ``baseline`` pod is a floor pod.

Usage::

    snapshot = cluster_snapshot(500)
    names = request_node_names(snapshot)           # the nodes plus ~1% unknown names
    body = extender_args(ray_worker_pod(FLOOR_GROUP), names)
"""

from __future__ import annotations

import functools
import json
import random
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from testkit.ray_pods import (
    CLUSTER,
    FLOOR_GROUP,
    NAMESPACE,
    OVERFLOW_GROUP,
    T0,
    fill,
    fixture_text,
    ray_head_pod,
    ray_worker_pod,
    raycluster,
    running_status,
    suffix,
    uid_for,
)
from testkit.volcano_objects import node_info, task_info

__all__ = [
    "CLUSTER",
    "FLOOR_GROUP",
    "GPU_RESOURCE",
    "NAMESPACE",
    "OVERFLOW_GROUP",
    "RUNNING_WORKERS",
    "Obj",
    "app_pod",
    "cluster_snapshot",
    "dumps",
    "extender_args",
    "gpu_node_count",
    "node",
    "node_list_args",
    "node_names",
    "node_with_status",
    "ray_head_pod",
    "ray_worker_pod",
    "raycluster",
    "request_node_names",
    "snapshot_gpu_node_names",
    "snapshot_node_names",
    "unknown_node_names",
    "volcano_node_info",
    "volcano_predicate",
    "volcano_prioritize",
]

Obj = dict[str, Any]

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 20261130
GPU_RESOURCE = "nvidia.com/gpu"
REGION = "us-west-2"
ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")

RUNNING_WORKERS: dict[str, int] = {FLOOR_GROUP: 2, OVERFLOW_GROUP: 3}
"""Running workers of each group in the snapshot. ``baseline``'s floor is 4: with 2 of
them scheduled a pending ``baseline`` pod is floor; ``overflow``'s floor is 0: a pending
``overflow`` pod is surplus."""

# 10.0.0.0/8 with the last octet in 1..254: enough distinct addresses for any benchmark.
_HOSTS_PER_24 = 254
_ADDRESSES = 256 * 256 * _HOSTS_PER_24


def _eks_name(prefix: str, a: int, b: int, c: int) -> str:
    return f"ip-{prefix}-{a}-{b}-{c}.{REGION}.compute.internal"


def node_names(n_nodes: int) -> list[str]:
    """The names of the ``n_nodes`` nodes of ``cluster_snapshot(n_nodes)``, in its order."""
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be at least 1, got {n_nodes}")
    picks = random.Random(SEED).sample(range(_ADDRESSES), n_nodes)
    out = []
    for v in picks:
        a, rest = divmod(v, 256 * _HOSTS_PER_24)
        b, c = divmod(rest, _HOSTS_PER_24)
        out.append(_eks_name("10", a, b, c + 1))
    return out


def gpu_node_count(n_nodes: int) -> int:
    """15% of the nodes, rounded half up."""
    return (n_nodes * 15 + 50) // 100


def _gpu_indices(n_nodes: int) -> frozenset[int]:
    return frozenset(random.Random(SEED + 1).sample(range(n_nodes), gpu_node_count(n_nodes)))


def unknown_node_names(count: int) -> list[str]:
    """Names no snapshot holds (172.31.0.0/16, never 10/8): nodes kube-scheduler knows
    and raygate does not (yet)."""
    out = []
    for i in range(count):
        b, c = divmod(i, _HOSTS_PER_24)
        out.append(f"ip-172-31-{b % 256}-{c + 1}.{REGION}.compute.internal")
    return out


@functools.cache
def _node_fixture() -> tuple[str, dict[str, dict[str, str]], tuple[str, ...]]:
    """(the node template as JSON text, the CPU and GPU shapes, container image names)."""
    data = json.loads((FIXTURES / "node.json").read_text(encoding="utf-8"))
    return json.dumps(data["node"]), data["shapes"], tuple(data["images"])


def node(name: str, index: int, gpu: bool) -> Obj:
    """One EKS node as the API server prints it (``fixtures/node.json``); GPU nodes are
    p4d-like with 8 GPUs and the usual ``nvidia.com/gpu`` taint."""
    template, shapes, _ = _node_fixture()
    obj = fill(template, name=name, zone=ZONES[index % len(ZONES)],
               ip=name.removeprefix("ip-").partition(".")[0].replace("-", "."),
               instance_id=suffix(name, 16), resource_version=str(100000 + index),
               uid=uid_for("Node", "", name), **shapes["gpu" if gpu else "cpu"])
    if gpu:
        obj["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"
        obj["status"]["capacity"][GPU_RESOURCE] = "8"
        obj["status"]["allocatable"][GPU_RESOURCE] = "8"
        obj["spec"]["taints"] = [{"effect": "NoSchedule", "key": GPU_RESOURCE, "value": "true"}]
    return obj


# --- the snapshot -----------------------------------------------------------------------


def cluster_snapshot(n_nodes: int) -> Obj:
    """The whole cluster as a ``kind: List``: ``n_nodes`` nodes (15% GPU), the RayCluster,
    its head and ``RUNNING_WORKERS`` workers per group, all on CPU nodes."""
    names = node_names(n_nodes)
    gpu = _gpu_indices(n_nodes)
    items = [node(name, i, i in gpu) for i, name in enumerate(names)]
    cpu_names = [name for i, name in enumerate(names) if i not in gpu]
    items.append(raycluster())
    items.append(ray_head_pod(cpu_names[0]))
    slot = 1
    for group, count in RUNNING_WORKERS.items():
        for index in range(count):
            host = cpu_names[slot % len(cpu_names)]
            items.append(ray_worker_pod(group, index=1000 + index, node_name=host))
            slot += 1
    return {"apiVersion": "v1", "kind": "List", "items": items,
            "metadata": {"resourceVersion": ""}}


def snapshot_node_names(snapshot: Obj) -> list[str]:
    """The names of the snapshot's nodes, in its order."""
    return [o["metadata"]["name"] for o in snapshot["items"] if o.get("kind") == "Node"]


def snapshot_gpu_node_names(snapshot: Obj) -> frozenset[str]:
    """The snapshot's GPU nodes, read from the objects: allocatable ``nvidia.com/gpu`` > 0."""
    out = set()
    for obj in snapshot["items"]:
        if obj.get("kind") != "Node":
            continue
        allocatable = obj.get("status", {}).get("allocatable", {})
        if int(allocatable.get(GPU_RESOURCE, "0")) > 0:
            out.add(obj["metadata"]["name"])
    return frozenset(out)


# --- requests ---------------------------------------------------------------------------


def request_node_names(snapshot: Obj, unknown_fraction: float = 0.01) -> list[str]:
    """The snapshot's node names with about ``unknown_fraction`` of unknown names spread
    evenly among them (at least one when the fraction is above zero)."""
    known = snapshot_node_names(snapshot)
    n_unknown = max(1, round(len(known) * unknown_fraction)) if unknown_fraction > 0 else 0
    if n_unknown == 0:
        return known
    unknown = iter(unknown_node_names(n_unknown))
    step = max(1, len(known) // n_unknown)
    out: list[str] = []
    added = 0
    for i, name in enumerate(known, 1):
        out.append(name)
        if i % step == 0 and added < n_unknown:
            out.append(next(unknown))
            added += 1
    out.extend(unknown)
    return out


def extender_args(pod: Obj, names: Iterable[str]) -> bytes:
    """kube-scheduler's ``ExtenderArgs`` body for a node-cache-capable extender: PascalCase
    envelope, the Pod in Kubernetes' camelCase, ``Nodes`` null."""
    body = {"Pod": pod, "Nodes": None, "NodeNames": list(names)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def dumps(obj: Obj | Sequence[Obj]) -> bytes:
    """Compact JSON, as kubectl and kube-scheduler would send it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# --- nodeCacheCapable: false -------------------------------------------------------------

def node_with_status(obj: Obj, images: int = 18) -> Obj:
    """``obj`` with the status a kubelet reports: the four pressure/ready conditions,
    addresses, daemon endpoints and ``images`` container images (kubelet lists up to 50).
    This is what a ``v1.NodeList`` carries when ``nodeCacheCapable`` is false: about
    7 KB per node."""
    out: Obj = json.loads(json.dumps(obj))
    name = out["metadata"]["name"]
    ip = name.removeprefix("ip-").partition(".")[0].replace("-", ".")
    status = out["status"]
    status["addresses"] = [{"address": ip, "type": "InternalIP"},
                           {"address": name, "type": "InternalDNS"},
                           {"address": name, "type": "Hostname"}]
    status["conditions"] = [
        {"lastHeartbeatTime": T0, "lastTransitionTime": T0, "message": message,
         "reason": reason, "status": "False", "type": kind}
        for kind, reason, message in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory "
             "available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ] + status["conditions"]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    status["images"] = [
        {"names": [f"{image}@sha256:{uuid.uuid5(uuid.NAMESPACE_URL, image).hex * 2}",
                   f"{image}:v1.{i}.{len(image) % 7}"],
         "sizeBytes": 10_000_000 * (i + 3) + len(image)}
        for i, image in enumerate(_node_fixture()[2][:images])
    ]
    return out


def node_list_args(pod: Obj, nodes: Sequence[Obj]) -> bytes:
    """kube-scheduler's ``ExtenderArgs`` when ``nodeCacheCapable`` is false: ``Nodes`` is a
    ``v1.NodeList`` of the candidate nodes, ``NodeNames`` null."""
    body = {"Pod": pod, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


# --- Volcano -----------------------------------------------------------------------------


def app_pod(index: int, node_name: str) -> Obj:
    """A running, non-Ray application pod (a Deployment replica with a sidecar, probes, a
    config volume; ``fixtures/app_pod.json``): about 3.5 KB, the usual neighbour of a Ray
    worker."""
    app = f"svc-{index % 17}"
    name = f"{app}-7d9f8c6b5-{suffix(f'app/{index}')}"
    namespace = f"team-{index % 5}"
    pod = fill(fixture_text(FIXTURES / "app_pod.json"), name=name,
               uid=uid_for("Pod", namespace, name), rs_uid=uid_for("ReplicaSet", namespace, app),
               resource_version=str(500000 + index), minor=str(index % 9), app=app,
               namespace=namespace, node=node_name)
    pod["status"] = running_status(index)
    return pod


def volcano_node_info(node_obj: Obj, pods_per_node: int, first_index: int = 0) -> Obj:
    """Volcano's ``api.NodeInfo`` of ``node_obj`` as Go prints it, with ``pods_per_node``
    running tasks, each a full ``TaskInfo`` with its Pod: the bulk of every Volcano
    request."""
    name = node_obj["metadata"]["name"]
    tasks = [task_info(app_pod(first_index + i, name)) for i in range(pods_per_node)]
    return node_info(node_obj, tasks)


def volcano_predicate(pod: Obj, node: Obj) -> bytes:
    """``PredicateRequest``: ``{"task": TaskInfo, "node": NodeInfo}``."""
    return dumps({"task": task_info(pod), "node": node})


def volcano_prioritize(pod: Obj, nodes: Sequence[Obj]) -> bytes:
    """``PrioritizeRequest``: ``{"task": TaskInfo, "nodes": [NodeInfo, ...]}``."""
    return dumps({"task": task_info(pod), "nodes": list(nodes)})
