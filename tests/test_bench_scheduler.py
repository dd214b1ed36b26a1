"""The scheduler-throughput benchmark's own arithmetic and objects (bench/scheduler_throughput.py):
the quantiles it reads from kube-scheduler's histograms, and the pods it creates."""

from __future__ import annotations

import math

import pytest

from bench import payloads
from bench.scheduler_objects import rayclusters, worker_pods
from bench.scheduler_report import histograms, quantile

NAME = "scheduler_framework_extension_point_duration_seconds"


def _series(status: str, buckets: dict[str, int]) -> list[str]:
    labels = f'extension_point="Filter",profile="ray-scheduler",status="{status}"'
    lines = [f'{NAME}_bucket{{{labels},le="{le}"}} {n}' for le, n in buckets.items()]
    return [*lines, f"{NAME}_sum{{{labels}}} 0.1", f"{NAME}_count{{{labels}}} {buckets['+Inf']}"]


# As kube-scheduler's /metrics prints it; the Error series must not be counted.
METRICS = "\n".join([f"# HELP {NAME} Latency", f"# TYPE {NAME} histogram",
                      *_series("Success", {"0.001": 10, "0.002": 90, "+Inf": 100}),
                      *_series("Error", {"0.001": 5, "0.002": 5, "+Inf": 5})]) + "\n"


@pytest.mark.parametrize(("buckets", "q", "expected"), [
    ([(0.001, 10.0), (0.002, 90.0), (math.inf, 100.0)], 0.5, 0.0015),  # inside a bucket
    ([(0.001, 10.0), (0.002, 90.0), (math.inf, 100.0)], 0.05, 0.0005),  # the first bucket
    ([(0.001, 10.0), (0.002, 90.0), (math.inf, 100.0)], 0.99, 0.002),  # +Inf: its lower bound
    ([(0.001, 0.0), (math.inf, 0.0)], 0.5, math.nan),  # nothing observed
])
def test_quantile_as_prometheus_histogram_quantile(
        buckets: list[tuple[float, float]], q: float, expected: float) -> None:
    got = quantile(buckets, q)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_histograms_keep_only_the_matching_labels() -> None:
    got = histograms(METRICS, NAME, status="Success")
    assert got == {"Filter": [(0.001, 10.0), (0.002, 90.0), (math.inf, 100.0)]}


def test_worker_pods_are_the_clusters_pending_workers() -> None:
    clusters = rayclusters(450)
    for i, rc in enumerate(clusters):
        rc["metadata"]["uid"] = f"uid-{i}"
    pods = worker_pods(clusters, "r1")
    assert len(pods) == 450 == len({p["metadata"]["name"] for p in pods})
    for rc in clusters:
        name = rc["metadata"]["name"]
        mine = [p for p in pods if p["metadata"]["labels"]["ray.io/cluster"] == name]
        floor = next(g for g in rc["spec"]["workerGroupSpecs"]
                     if g["groupName"] == payloads.FLOOR_GROUP)
        assert sum(p["metadata"]["labels"]["ray.io/group"] == payloads.FLOOR_GROUP
                   for p in mine) == floor["replicas"] == floor["minReplicas"]
        assert {p["metadata"]["ownerReferences"][0]["uid"] for p in mine} == {
            rc["metadata"]["uid"]}
    for pod in pods:
        spec = pod["spec"]
        assert "nodeName" not in spec and "status" not in pod and "uid" not in pod["metadata"]
        assert spec["schedulerName"] == "ray-scheduler"
        assert {"key": payloads.GPU_RESOURCE, "operator": "Exists",
                "effect": "NoSchedule"} in spec["tolerations"]
