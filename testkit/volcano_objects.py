"""Volcano's api.TaskInfo / api.NodeInfo / api.JobInfo as its Go encoding/json prints
them: untagged PascalCase, every exported field present, nil as null, CPU in milli-cores,
memory in bytes, scalar resources in milli-units, TaskStatus as a bit-flag number, and the
PodGroup's metadata flattened next to PascalCase Spec/Status."""

from __future__ import annotations

from typing import Any

from raygate.policy.quantity import parse_milli
from testkit.builders import Obj

PENDING, ALLOCATED, BOUND, RUNNING, RELEASING = 1, 2, 16, 32, 64


def resource(requests: dict[str, Any] | None) -> Obj:
    requests = requests or {}
    # float64 fields; Go prints whole floats without a fraction ("8000", not "8000.0").
    scalars = {k: parse_milli(v) for k, v in requests.items()
               if k not in ("cpu", "memory", "pods")}
    return {
        "MilliCPU": parse_milli(requests.get("cpu", 0)),
        "Memory": parse_milli(requests.get("memory", 0)) // 1000,
        "ScalarResources": scalars or None,
        "MaxTaskNum": 0,
    }


def task_info(pod: Obj, status: int | None = None, node_name: str | None = None) -> Obj:
    meta, spec = pod["metadata"], pod["spec"]
    requests = spec["containers"][0].get("resources", {}).get("requests")
    group = (meta.get("annotations") or {}).get("scheduling.k8s.io/group-name", "")
    node = node_name if node_name is not None else spec.get("nodeName", "")
    return {
        "UID": meta["uid"],
        "Job": f"{meta['namespace']}/{group}" if group else "",
        "Name": meta["name"],
        "Namespace": meta["namespace"],
        "TaskRole": (meta.get("labels") or {}).get("ray.io/group", ""),
        "Resreq": resource(requests),
        "InitResreq": resource(requests),
        "DRAResreq": None,
        "ResourceClaimKeys": None,
        "ResourceClaimDRAResreq": None,
        "NodeName": node,
        "EvictionOccurred": False,
        "JobAllocatedHyperNode": "",
        "Status": status if status is not None else (RUNNING if node else PENDING),
        "LastTransaction": None,
        "Priority": spec.get("priority", 0),
        "VolumeReady": False,
        "Preemptable": (meta.get("annotations") or {}).get("volcano.sh/preemptable") == "true",
        "BestEffort": not requests,
        "HasRestartableInitContainer": False,
        "SchGated": False,
        "RevocableZone": "",
        "NumaInfo": None,
        "Pod": pod,
        "CustomBindErrHandlerSucceeded": False,
    }


def node_info(node: Obj, tasks: list[Obj] = ()) -> Obj:  # type: ignore[assignment]
    allocatable = node["status"]["allocatable"]
    return {
        "Name": node["metadata"]["name"],
        "Node": node,
        "State": {"Phase": 1, "Reason": ""},
        "Releasing": resource({}),
        "Pipelined": resource({}),
        "Idle": resource(allocatable),
        "Used": resource({}),
        "Allocatable": resource(allocatable),
        "Capacity": resource(allocatable),
        "OversubscriptionResource": resource({}),
        "ResourceUsage": {"MetricsTime": "0001-01-01T00:00:00Z", "CPUUsageAvg": {},
                          "MEMUsageAvg": {}},
        "Tasks": {t["UID"]: t for t in tasks},
        "NumaInfo": None,
        "UnassignedNumaPods": None,
        "NumaSchedulerInfo": None,
        "RevocableZone": "",
        "Others": {"GPUSharePool": {}},
        "OversubscriptionNode": False,
        "OfflineJobEvicting": False,
        "ImageStates": {},
        "Generation": 7,
        "BindGeneration": 7,
    }


def job_info(namespace: str, podgroup: str, queue: str = "default", min_available: int = 3,
             tasks: list[Obj] = ()) -> Obj:  # type: ignore[assignment]
    return {
        "UID": f"{namespace}/{podgroup}",
        "PgUID": "7f000000-0000-4000-8000-00000000ce01",
        "Name": podgroup,
        "Namespace": namespace,
        "Queue": queue,
        "Priority": 0,
        "MinAvailable": min_available,
        "WaitingTime": None,
        "JobFitErrors": "",
        "NodesFitErrors": {},
        "TaskStatusIndex": {"1": {t["UID"]: t for t in tasks}},
        "Tasks": {t["UID"]: t for t in tasks},
        "TaskMinAvailable": {},
        "TaskMinAvailableTotal": 0,
        "Allocated": resource({}),
        "TotalRequest": resource({}),
        "CreationTimestamp": "2026-11-30T04:20:00Z",
        "PodGroup": {
            "kind": "PodGroup", "apiVersion": "scheduling.volcano.sh/v1beta1",
            "name": podgroup, "namespace": namespace, "uid": "7f000000-0000-4000-8000-00000000ce01",
            "Spec": {"MinMember": min_available, "MinTaskMember": None, "Queue": queue,
                     "PriorityClassName": "", "MinResources": None, "NetworkTopology": None},
            "Status": {"Phase": "Inqueue", "Conditions": None, "Running": 0, "Succeeded": 0,
                       "Failed": 0},
            "Version": "v1beta1",
        },
        "ScheduleStartTimestamp": "0001-01-01T00:00:00Z",
        "Preemptable": False,
        "RevocableZone": "",
        "Budget": {"MinAvailable": str(min_available), "MaxUnavilable": ""},
    }
