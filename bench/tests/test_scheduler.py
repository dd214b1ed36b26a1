"""The scheduler-throughput benchmark's own arithmetic and objects (bench/scheduler_throughput.py):
the quantiles it reads from kube-scheduler's and raygate's histograms, its pod clock, the
goal it reports, and the nodes and pods it creates."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest

from bench import payloads
from bench.scheduler_clock import GATE, LABEL_RULE, BurstClock, latencies, marked
from bench.scheduler_objects import nodes, rayclusters, worker_pods
from bench.scheduler_report import (
    Run,
    delta_quantiles,
    goal,
    histograms,
    markdown,
    marks_wrong,
    summarise,
)
from bench.stats import histogram_quantile as quantile
from bench.stats import percentile, summarize
from testbed.api import KubeApi

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


def test_gpu_nodes_carry_the_label_the_native_rule_names() -> None:
    made = nodes(70)
    gpu = [n for n in made if payloads.GPU_RESOURCE in n["status"]["allocatable"]]
    assert gpu and len(gpu) < len(made)
    assert all(n["metadata"]["labels"].get("nvidia.com/gpu.present") == "true" for n in gpu)
    assert not any("nvidia.com/gpu.present" in n["metadata"]["labels"]
                   for n in made if n not in gpu)


def _pod(name: str, *, gated: bool = False, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingGates": [{"name": GATE}] if gated else []}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def test_the_clock_sees_added_released_and_bound_once() -> None:
    clock = BurstClock(cast(KubeApi, None), "/pods", expected=2)
    clock.see(_pod("a", gated=True))
    clock.see(_pod("b"))
    clock.see(_pod("a"))  # the gate gone
    clock.see(_pod("a", node="n1"))
    added_a = clock.added["a"]
    clock.see(_pod("a", node="n1"))  # a later event changes nothing
    assert clock.added["a"] == added_a and clock.gated == {"a"}
    assert set(clock.released) == {"a"} and set(clock.bound) == {"a"}
    assert not clock.done.is_set()
    clock.see(_pod("b", node="n2"))
    assert clock.done.is_set() and "b" not in clock.released
    assert latencies({"a": 1.0, "b": 2.0}, {"a": 1.5}) == [0.5]


def test_the_webhook_marks_a_pod_gated_or_decided_at_admission() -> None:
    assert marked(_pod("a", gated=True))
    decided = _pod("b")
    decided["metadata"]["labels"] = {LABEL_RULE: "floor-avoids-gpu"}
    assert marked(decided)
    assert not marked(_pod("c")) and not marked({"metadata": {"labels": None}, "spec": {}})


@pytest.mark.parametrize(("contender", "gated", "released", "rules", "wrong"), [
    # raygate-native deciding at admission: no gate, every pod labelled.
    ("raygate-native", 0, 0, {"floor-avoids-gpu": 2, "surplus-prefers-cpu": 8}, ""),
    # ... or gating them all and releasing them with the label (the gate's path).
    ("raygate-native", 10, 10, {"floor-avoids-gpu": 2, "surplus-prefers-cpu": 8}, ""),
    ("raygate-native", 3, 3, {"floor-avoids-gpu": 2, "surplus-prefers-cpu": 8}, ""),
    ("raygate-native", 0, 0, {"floor-avoids-gpu": 2, "": 8}, "8 of 10 pods without"),
    ("raygate-native", 10, 9, {"floor-avoids-gpu": 2, "surplus-prefers-cpu": 8}, "9 released"),
    ("none", 0, 0, {"": 10}, ""),
    ("raygate", 0, 0, {"": 9, "floor-avoids-gpu": 1}, "1 labelled"),
    ("go-peer", 1, 1, {"": 10}, "1 pods gated"),
])
def test_the_webhooks_marks_are_checked(contender: str, gated: int, released: int,
                                        rules: dict[str, int], wrong: str) -> None:
    run = Run(500, contender, 1, 10, 1.0, 10.0, 1, 2, 1, 2, gated=gated, rules=rules)
    got = marks_wrong(run, released)
    assert (wrong in got and got) if wrong else got == ""


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([0.0, 10.0], 0.5) == 0.0  # an observed value, never a mean of two
    assert percentile([0.0, 10.0], 0.99) == 10.0
    assert percentile(range(1, 101), 0.99) == 99  # the 99th of 100, not the largest
    assert percentile(range(1, 1001), 0.999) == 999
    assert percentile(range(1, 11), 0.0) == 1
    assert math.isnan(percentile([], 0.5)) and percentile([], 0.5, empty=0.0) == 0.0


def test_summarize_scales_every_statistic() -> None:
    got = summarize([3000, 1000, 2000, 4000], 1e-3)
    assert (got.count, got.p50, got.p99, got.max) == (4, 2.0, 4.0, 4.0)
    assert got.mean == pytest.approx(2.5)
    assert summarize([]).count == 0


def test_delta_quantiles_count_only_what_the_run_observed() -> None:
    name = "raygate_placement_gate_seconds"

    def text(fast: int, slow: int) -> str:
        return "\n".join([f"# TYPE {name} histogram",
                          f'{name}_bucket{{le="0.01"}} {fast}',
                          f'{name}_bucket{{le="1.0"}} {fast + slow}',
                          f'{name}_bucket{{le="+Inf"}} {fast + slow}',
                          f"{name}_count {fast + slow}", f"{name}_sum 1"]) + "\n"

    # Before the run 100 fast observations; the run adds 10 slow ones only.
    p50, p99 = delta_quantiles({"raygate": text(100, 0)}, {"raygate": text(100, 10)},
                               "raygate", name)
    assert 10 < p50 < 1000 and 10 < p99 <= 1000
    assert all(math.isnan(v) for v in delta_quantiles({}, {}, "raygate", name))


def _run(contender: str, rate: float, p99: float) -> Run:
    return Run(5000, contender, 1, 1000, 1000 / rate, rate, 1, 2, 1, 2,
               bind_ms=(p99 / 2, p99))


def test_the_goal_compares_native_with_none() -> None:
    rows = summarise([_run("none", 100, 200), _run("raygate", 60, 300),
                      _run("raygate-native", 96, 240)])
    assert goal(rows) == [
        "- 5,000 nodes: raygate-native keeps 96.0 % of none's pods/s (goal ≥ 95 %), its "
        "creation→bind p99 +40 ms (goal ≤ +50 ms): met."]
    rows = summarise([_run("none", 100.0, 200), _run("raygate-native", 96.0, 260)])
    assert goal(rows)[0].endswith("not met.")
    table = markdown(rows, 1000)
    assert "| 5,000 | raygate-native | 96.0 (96.0) | 4.0 % |" in table
    assert "| 130 / 260 | +60 |" in table
