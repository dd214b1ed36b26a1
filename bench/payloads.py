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

import json
import random
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

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

SEED = 20261130
NAMESPACE = "ray"
CLUSTER = "bench"
FLOOR_GROUP = "baseline"
OVERFLOW_GROUP = "overflow"
GPU_RESOURCE = "nvidia.com/gpu"
RAY_IMAGE = "rayproject/ray:2.40.0-py311"
REGION = "us-west-2"
ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
T0 = "2026-11-30T04:00:00Z"
T_PENDING = "2026-11-30T04:12:31Z"

RUNNING_WORKERS: dict[str, int] = {FLOOR_GROUP: 2, OVERFLOW_GROUP: 3}
"""Running workers of each group in the snapshot. ``baseline``'s floor is 4: with 2 of
them scheduled a pending ``baseline`` pod is floor; ``overflow``'s floor is 0: a pending
``overflow`` pod is surplus."""

_WORKER_GROUPS: dict[str, dict[str, int]] = {
    FLOOR_GROUP: {"replicas": 4, "minReplicas": 4, "maxReplicas": 4},
    OVERFLOW_GROUP: {"replicas": 20, "minReplicas": 0, "maxReplicas": 100},
}

# 10.0.0.0/8 with the last octet in 1..254: enough distinct addresses for any benchmark.
_HOSTS_PER_24 = 254
_ADDRESSES = 256 * 256 * _HOSTS_PER_24


def uid_for(kind: str, namespace: str, name: str) -> str:
    """A stable UID for an object: the same object gets the same UID in every run."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"raygate-bench/{kind}/{namespace}/{name}"))


def _suffix(text: str, length: int = 5) -> str:
    """A stable lower-case suffix, like the random ones generateName appends."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = uuid.uuid5(uuid.NAMESPACE_URL, text).int
    out = []
    for _ in range(length):
        value, digit = divmod(value, len(alphabet))
        out.append(alphabet[digit])
    return "".join(out)


# --- nodes ------------------------------------------------------------------------------


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


def node(name: str, index: int, gpu: bool) -> Obj:
    """One EKS node as the API server prints it; GPU nodes are p4d-like with 8 GPUs and
    the usual ``nvidia.com/gpu`` taint."""
    zone = ZONES[index % len(ZONES)]
    ip = name.removeprefix("ip-").partition(".")[0].replace("-", ".")
    if gpu:
        instance, nodegroup = "p4d.24xlarge", "gpu-p4d"
        cpu, memory, pods = "96", "1143922804Ki", "737"
        alloc_cpu, alloc_memory = "95690m", "1131376244Ki"
    else:
        instance, nodegroup = "m6i.8xlarge", "cpu-m6i"
        cpu, memory, pods = "32", "130289436Ki", "234"
        alloc_cpu, alloc_memory = "31850m", "124612380Ki"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance,
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": nodegroup,
        "failure-domain.beta.kubernetes.io/region": REGION,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance,
        "topology.kubernetes.io/region": REGION,
        "topology.kubernetes.io/zone": zone,
    }
    capacity = {"cpu": cpu, "ephemeral-storage": "524275692Ki", "hugepages-1Gi": "0",
                "hugepages-2Mi": "0", "memory": memory, "pods": pods}
    allocatable = {"cpu": alloc_cpu, "ephemeral-storage": "482098735124",
                   "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": alloc_memory,
                   "pods": pods}
    spec: Obj = {"providerID": f"aws:///{zone}/i-0{_suffix(name, 16)}"}
    if gpu:
        labels["nvidia.com/gpu.present"] = "true"
        capacity[GPU_RESOURCE] = "8"
        allocatable[GPU_RESOURCE] = "8"
        spec["taints"] = [{"effect": "NoSchedule", "key": GPU_RESOURCE, "value": "true"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip,
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": T0,
            "labels": labels,
            "name": name,
            "resourceVersion": str(100000 + index),
            "uid": uid_for("Node", "", name),
        },
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": [
                {"lastHeartbeatTime": T0, "lastTransitionTime": T0,
                 "message": "kubelet is posting ready status", "reason": "KubeletReady",
                 "status": "True", "type": "Ready"},
            ],
            "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.22",
                         "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
                         "kubeletVersion": "v1.31.2-eks-94953ac", "operatingSystem": "linux",
                         "osImage": "Amazon Linux 2023.6.20241111"},
        },
    }


# --- Ray objects ------------------------------------------------------------------------


def raycluster() -> Obj:
    """The RayCluster ``ray/bench``: in-tree autoscaling, groups baseline and overflow."""
    groups = []
    for group, sizes in _WORKER_GROUPS.items():
        groups.append({
            "groupName": group,
            **sizes,
            "numOfHosts": 1,
            "rayStartParams": {},
            "template": {"spec": {"containers": [{
                "name": "ray-worker",
                "image": RAY_IMAGE,
                "resources": {"limits": {"cpu": "8", "memory": "32Gi"},
                              "requests": {"cpu": "8", "memory": "32Gi"}},
            }]}},
        })
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "creationTimestamp": T0,
            "generation": 3,
            "name": CLUSTER,
            "namespace": NAMESPACE,
            "resourceVersion": "4711",
            "uid": uid_for("RayCluster", NAMESPACE, CLUSTER),
        },
        "spec": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": {"spec": {"containers": [{
                    "name": "ray-head",
                    "image": RAY_IMAGE,
                    "resources": {"limits": {"cpu": "4", "memory": "16Gi"},
                                  "requests": {"cpu": "4", "memory": "16Gi"}},
                }]}},
            },
            "rayVersion": "2.40.0",
            "workerGroupSpecs": groups,
        },
        "status": {"state": "ready", "availableWorkerReplicas": sum(RUNNING_WORKERS.values())},
    }


def _owner() -> list[Obj]:
    return [{
        "apiVersion": "ray.io/v1",
        "blockOwnerDeletion": True,
        "controller": True,
        "kind": "RayCluster",
        "name": CLUSTER,
        "uid": uid_for("RayCluster", NAMESPACE, CLUSTER),
    }]


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def _worker_env(group: str) -> list[Obj]:
    head = f"{CLUSTER}-head-svc.{NAMESPACE}.svc.cluster.local"
    return [
        _field_env("FQ_RAY_IP", "status.podIP"),
        {"name": "RAY_IP", "value": head},
        _field_env("RAY_CLUSTER_NAME", "metadata.labels['ray.io/cluster']"),
        _field_env("RAY_CLOUD_INSTANCE_ID", "metadata.name"),
        _field_env("RAY_NODE_TYPE_NAME", "metadata.labels['ray.io/group']"),
        {"name": "KUBERAY_GEN_RAY_START_CMD", "value": (
            f"ray start  --address={head}:6379  --block  --dashboard-agent-listen-port=52365 "
            "--memory=34359738368  --metrics-export-port=8080  --num-cpus=8 ")},
        {"name": "RAY_PORT", "value": "6379"},
        {"name": "RAY_ADDRESS", "value": f"{head}:6379"},
        {"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"},
        {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
        {"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"},
        {"name": "RAY_gcs_rpc_server_reconnect_timeout_s", "value": "600"},
        {"name": "RAY_WORKER_GROUP", "value": group},
        _field_env("MY_POD_NAME", "metadata.name"),
        _field_env("MY_POD_NAMESPACE", "metadata.namespace"),
        _field_env("NODE_NAME", "spec.nodeName"),
        {"name": "OMP_NUM_THREADS", "value": "8"},
        {"name": "AWS_STS_REGIONAL_ENDPOINTS", "value": "regional"},
        {"name": "AWS_DEFAULT_REGION", "value": REGION},
        {"name": "AWS_REGION", "value": REGION},
        {"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::123456789012:role/ray-bench-workers"},
        {"name": "AWS_WEB_IDENTITY_TOKEN_FILE",
         "value": "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"},
    ]


def _projected_token(name: str) -> Obj:
    return {
        "name": name,
        "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}],
                           "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1",
                                                     "fieldPath": "metadata.namespace"},
                                        "path": "namespace"}]}},
        ]},
    }


def ray_worker_pod(
    group: str = OVERFLOW_GROUP,
    *,
    index: int = 0,
    node_name: str | None = None,
) -> Obj:
    """A CPU-only KubeRay worker pod of ``group`` in ``ray/bench``, as the API server
    prints it (about 7 KB of JSON).

    Without ``node_name`` it is pending and unschedulable, as kube-scheduler sends it to
    an extender; with one it is running there. ``index`` tells pods of a group apart.
    """
    generate = f"{CLUSTER}-{group}-worker-"
    name = generate + _suffix(f"{group}/{index}")
    token = "kube-api-access-" + _suffix(name)
    resources = {
        "limits": {"cpu": "8", "ephemeral-storage": "20Gi", "memory": "32Gi"},
        "requests": {"cpu": "8", "ephemeral-storage": "20Gi", "memory": "32Gi"},
    }
    mounts = [
        {"mountPath": "/dev/shm", "name": "shared-mem"},
        {"mountPath": "/tmp/ray", "name": "ray-logs"},
        {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": token,
         "readOnly": True},
        {"mountPath": "/var/run/secrets/eks.amazonaws.com/serviceaccount",
         "name": "aws-iam-token", "readOnly": True},
    ]
    probe_cmd = ("wget -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | "
                 "grep success")
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": {
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                "karpenter.sh/do-not-disrupt": "true",
                "prometheus.io/path": "/metrics",
                "prometheus.io/port": "8080",
                "prometheus.io/scrape": "true",
                "ray.io/ft-enabled": "false",
            },
            "creationTimestamp": T_PENDING if node_name is None else T0,
            "generateName": generate,
            "labels": {
                "app.kubernetes.io/created-by": "kuberay-operator",
                "app.kubernetes.io/instance": CLUSTER,
                "app.kubernetes.io/name": "kuberay",
                "app.kubernetes.io/part-of": "ray-bench",
                "ray.io/cluster": CLUSTER,
                "ray.io/group": group,
                "ray.io/identifier": f"{CLUSTER}-worker",
                "ray.io/is-ray-node": "yes",
                "ray.io/node-type": "worker",
            },
            "name": name,
            "namespace": NAMESPACE,
            "ownerReferences": _owner(),
            "resourceVersion": str(900000 + index),
            "uid": uid_for("Pod", NAMESPACE, name),
        },
        "spec": {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "eks.amazonaws.com/capacityType", "operator": "In",
                         "values": ["ON_DEMAND", "SPOT"]},
                    ]}],
                }},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"ray.io/cluster": CLUSTER,
                                                          "ray.io/group": group}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                    "weight": 100,
                }]},
            },
            "containers": [{
                "args": ["ulimit -n 65536; ray start  --address="
                         f"{CLUSTER}-head-svc.{NAMESPACE}.svc.cluster.local:6379  --block  "
                         "--dashboard-agent-listen-port=52365  --memory=34359738368  "
                         "--metrics-export-port=8080  --num-cpus=8 "],
                "command": ["/bin/bash", "-lc", "--"],
                "env": _worker_env(group),
                "image": RAY_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
                "livenessProbe": {
                    "exec": {"command": ["bash", "-c", probe_cmd]},
                    "failureThreshold": 120, "initialDelaySeconds": 30, "periodSeconds": 5,
                    "successThreshold": 1, "timeoutSeconds": 2,
                },
                "name": "ray-worker",
                "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
                "readinessProbe": {
                    "exec": {"command": ["bash", "-c", probe_cmd]},
                    "failureThreshold": 10, "initialDelaySeconds": 10, "periodSeconds": 5,
                    "successThreshold": 1, "timeoutSeconds": 2,
                },
                "resources": resources,
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": mounts,
            }],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "initContainers": [{
                "args": [
                    "SECONDS=0; while true; do if (( SECONDS <= 120 )); then if ray health-check "
                    f"--address {CLUSTER}-head-svc.{NAMESPACE}.svc.cluster.local:6379 > "
                    "/dev/null 2>&1; then echo \"GCS is ready.\"; break; fi; echo "
                    "\"$SECONDS seconds elapsed: Waiting for GCS to be ready.\"; else echo "
                    "\"GCS not ready after 120 s\"; fi; sleep 5; done",
                ],
                "command": ["/bin/bash", "-lc", "--"],
                "env": [_field_env("FQ_RAY_IP", "status.podIP"),
                        {"name": "RAY_IP",
                         "value": f"{CLUSTER}-head-svc.{NAMESPACE}.svc.cluster.local"}],
                "image": RAY_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "name": "wait-gcs-ready",
                "resources": {"limits": {"cpu": "200m", "memory": "256Mi"},
                              "requests": {"cpu": "200m", "memory": "256Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [mounts[2]],
            }],
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 100, "runAsNonRoot": True, "runAsUser": 1000},
            "serviceAccount": "ray-bench",
            "serviceAccountName": "ray-bench",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready",
                 "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable",
                 "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoSchedule", "key": "ray.io/dedicated", "operator": "Equal",
                 "value": "ray"},
            ],
            "volumes": [
                {"emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}, "name": "shared-mem"},
                {"emptyDir": {}, "name": "ray-logs"},
                {"name": "aws-iam-token", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"audience": "sts.amazonaws.com",
                                             "expirationSeconds": 86400, "path": "token"}},
                ]}},
                _projected_token(token),
            ],
        },
    }
    if node_name is None:
        pod["status"] = {
            "conditions": [{
                "lastProbeTime": None,
                "lastTransitionTime": T_PENDING,
                "message": ("0/5000 nodes are available: 1 node(s) were unschedulable, "
                            "4999 Insufficient cpu. preemption: 0/5000 nodes are available: "
                            "5000 No preemption victims found for incoming pod."),
                "reason": "Unschedulable",
                "status": "False",
                "type": "PodScheduled",
            }],
            "phase": "Pending",
            "qosClass": "Guaranteed",
        }
    else:
        pod["spec"]["nodeName"] = node_name
        pod["status"] = _running_status(index)
    return pod


def _running_status(index: int) -> Obj:
    conditions = [
        {"lastProbeTime": None, "lastTransitionTime": T0, "status": "True", "type": kind}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                     "PodScheduled")
    ]
    ip = f"10.200.{index // 250}.{index % 250 + 1}"
    return {"conditions": conditions, "phase": "Running", "podIP": ip,
            "podIPs": [{"ip": ip}], "qosClass": "Guaranteed", "startTime": T0}


def ray_head_pod(node_name: str) -> Obj:
    """The running head pod of ``ray/bench``."""
    name = f"{CLUSTER}-head-" + _suffix("head")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "creationTimestamp": T0,
            "generateName": f"{CLUSTER}-head-",
            "labels": {
                "app.kubernetes.io/created-by": "kuberay-operator",
                "app.kubernetes.io/name": "kuberay",
                "ray.io/cluster": CLUSTER,
                "ray.io/group": "headgroup",
                "ray.io/identifier": f"{CLUSTER}-head",
                "ray.io/is-ray-node": "yes",
                "ray.io/node-type": "head",
            },
            "name": name,
            "namespace": NAMESPACE,
            "ownerReferences": _owner(),
            "uid": uid_for("Pod", NAMESPACE, name),
        },
        "spec": {
            "containers": [{
                "image": RAY_IMAGE,
                "name": "ray-head",
                "resources": {"limits": {"cpu": "4", "memory": "16Gi"},
                              "requests": {"cpu": "4", "memory": "16Gi"}},
            }],
            "nodeName": node_name,
        },
        "status": _running_status(999),
    }


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

_IMAGE_NAMES = (
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni",
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni-init",
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy",
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns",
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause",
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-ebs-csi-driver",
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/csi-node-driver-registrar",
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/livenessprobe",
    "public.ecr.aws/aws-observability/aws-for-fluent-bit",
    "quay.io/prometheus/node-exporter",
    "registry.k8s.io/metrics-server/metrics-server",
    "docker.io/rayproject/ray",
    "docker.io/rayproject/ray-ml",
    "quay.io/kuberay/operator",
    "nvcr.io/nvidia/k8s-device-plugin",
    "nvcr.io/nvidia/cloud-native/dcgm-exporter",
    "ghcr.io/example/feature-store",
    "ghcr.io/example/batch-inference",
)


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
        for i, image in enumerate(_IMAGE_NAMES[:images])
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
    config volume): about 3.5 KB, the usual neighbour of a Ray worker."""
    app = f"svc-{index % 17}"
    name = f"{app}-7d9f8c6b5-{_suffix(f'app/{index}')}"
    namespace = f"team-{index % 5}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/restartedAt": T0,
                            "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "creationTimestamp": T0,
            "generateName": f"{app}-7d9f8c6b5-",
            "labels": {"app": app, "pod-template-hash": "7d9f8c6b5", "team": namespace},
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": True,
                                 "controller": True, "kind": "ReplicaSet",
                                 "name": f"{app}-7d9f8c6b5",
                                 "uid": uid_for("ReplicaSet", namespace, app)}],
            "resourceVersion": str(500000 + index),
            "uid": uid_for("Pod", namespace, name),
        },
        "spec": {
            "containers": [
                {"env": [{"name": "LOG_LEVEL", "value": "info"},
                         {"name": "PORT", "value": "8080"},
                         _field_env("POD_NAME", "metadata.name"),
                         _field_env("POD_IP", "status.podIP")],
                 "image": f"ghcr.io/example/{app}:1.{index % 9}.0",
                 "imagePullPolicy": "IfNotPresent",
                 "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080,
                                               "scheme": "HTTP"},
                                   "periodSeconds": 10, "timeoutSeconds": 1},
                 "name": app,
                 "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080,
                                                "scheme": "HTTP"},
                                    "periodSeconds": 5, "timeoutSeconds": 1},
                 "resources": {"limits": {"memory": "1Gi"},
                               "requests": {"cpu": "500m", "memory": "1Gi"}},
                 "volumeMounts": [{"mountPath": "/etc/app", "name": "config"}]},
                {"args": ["--config=/etc/fluent-bit/fluent-bit.conf"],
                 "image": "public.ecr.aws/aws-observability/aws-for-fluent-bit:2.32.2",
                 "name": "log-shipper",
                 "resources": {"limits": {"memory": "128Mi"},
                               "requests": {"cpu": "50m", "memory": "64Mi"}}},
            ],
            "dnsPolicy": "ClusterFirst",
            "nodeName": node_name,
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "volcano",
            "serviceAccountName": app,
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready",
                 "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable",
                 "operator": "Exists", "tolerationSeconds": 300},
            ],
            "volumes": [{"configMap": {"defaultMode": 420, "name": f"{app}-config"},
                         "name": "config"}],
        },
        "status": _running_status(index),
    }


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
