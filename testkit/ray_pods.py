"""The KubeRay objects of the RayCluster ``ray/bench`` as the API server prints them: its
head pod, its worker pods (about 7 KB of JSON each) and the RayCluster itself.

The objects are data (``testkit/fixtures/*.json``) with ``{{placeholders}}`` for what
differs between pods; the builders here fill them in. Every builder is a pure function of
its arguments: names and UIDs come from ``uuid5``, so two runs (and a test and a benchmark)
see byte-identical objects. Tests (``tests/``) and the benchmarks (``bench/``) both build
their Ray pods here.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "CLUSTER",
    "FLOOR_GROUP",
    "NAMESPACE",
    "OVERFLOW_GROUP",
    "RAY_IMAGE",
    "T0",
    "T_PENDING",
    "fill",
    "fixture_text",
    "ray_head_pod",
    "ray_worker_pod",
    "raycluster",
    "running_status",
    "suffix",
    "uid_for",
]

Obj = dict[str, Any]

FIXTURES = Path(__file__).parent / "fixtures"
NAMESPACE = "ray"
CLUSTER = "bench"
FLOOR_GROUP = "baseline"
OVERFLOW_GROUP = "overflow"
RAY_IMAGE = "rayproject/ray:2.40.0-py311"
T0 = "2026-11-30T04:00:00Z"
T_PENDING = "2026-11-30T04:12:31Z"


def uid_for(kind: str, namespace: str, name: str) -> str:
    """A stable UID for an object: the same object gets the same UID in every run."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"raygate-bench/{kind}/{namespace}/{name}"))


def suffix(text: str, length: int = 5) -> str:
    """A stable lower-case suffix, like the random ones generateName appends."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = uuid.uuid5(uuid.NAMESPACE_URL, text).int
    out = []
    for _ in range(length):
        value, digit = divmod(value, len(alphabet))
        out.append(alphabet[digit])
    return "".join(out)


@functools.cache
def fixture_text(path: Path) -> str:
    """A fixture file's text, read once."""
    return path.read_text(encoding="utf-8")


def fill(text: str, **values: str) -> Obj:
    """The JSON object of ``text`` with each ``{{key}}`` replaced by its value (plain
    strings: no quote or backslash to escape)."""
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    obj: Obj = msgspec.json.decode(text)
    return obj


def running_status(index: int) -> Obj:
    """A running pod's status; ``index`` picks its IP."""
    conditions = [
        {"lastProbeTime": None, "lastTransitionTime": T0, "status": "True", "type": kind}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                     "PodScheduled")
    ]
    ip = f"10.200.{index // 250}.{index % 250 + 1}"
    return {"conditions": conditions, "phase": "Running", "podIP": ip,
            "podIPs": [{"ip": ip}], "qosClass": "Guaranteed", "startTime": T0}


def ray_worker_pod(
    group: str = OVERFLOW_GROUP,
    *,
    index: int = 0,
    node_name: str | None = None,
) -> Obj:
    """A CPU-only KubeRay worker pod of ``group`` in ``ray/bench``, as the API server
    prints it (about 7 KB of JSON; ``fixtures/ray_worker_pod.json``).

    Without ``node_name`` it is pending and unschedulable, as kube-scheduler sends it to
    an extender; with one it is running there. ``index`` tells pods of a group apart.
    """
    name = f"{CLUSTER}-{group}-worker-" + suffix(f"{group}/{index}")
    pod = fill(fixture_text(FIXTURES / "ray_worker_pod.json"), name=name,
               token="kube-api-access-" + suffix(name), uid=uid_for("Pod", NAMESPACE, name),
               owner_uid=uid_for("RayCluster", NAMESPACE, CLUSTER),
               resource_version=str(900000 + index), group=group)
    if node_name is not None:
        pod["metadata"]["creationTimestamp"] = T0
        pod["spec"]["nodeName"] = node_name
        pod["status"] = running_status(index)
    return pod


def ray_head_pod(node_name: str) -> Obj:
    """The running head pod of ``ray/bench`` (``fixtures/ray_head_pod.json``)."""
    name = f"{CLUSTER}-head-" + suffix("head")
    pod = fill(fixture_text(FIXTURES / "ray_head_pod.json"), name=name,
               uid=uid_for("Pod", NAMESPACE, name),
               owner_uid=uid_for("RayCluster", NAMESPACE, CLUSTER), node=node_name)
    pod["status"] = running_status(999)
    return pod


def raycluster() -> Obj:
    """The RayCluster ``ray/bench`` (``fixtures/raycluster.json``): in-tree autoscaling,
    worker groups ``baseline`` (replicas = minReplicas = maxReplicas = 4) and
    ``overflow`` (minReplicas 0, maxReplicas 100, replicas 20)."""
    return fill(fixture_text(FIXTURES / "raycluster.json"),
                uid=uid_for("RayCluster", NAMESPACE, CLUSTER))
