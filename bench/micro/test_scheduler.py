"""kube-scheduler verbs in-process: each step of filter and prioritize on its own, then
the whole verb (bytes in, bytes out) as the HTTP layer calls it.

filter and prioritize receive the same ``ExtenderArgs`` and share one decoder, so the
decode rows stand for both verbs."""

from __future__ import annotations

import itertools
import json

import msgspec
import pytest

from bench.micro.conftest import NOW, Benchmark, Cluster, cache_of
from bench.payloads import extender_args
from bench.scenarios import MICRO
from raygate.policy.placement import Placement, decide, filter_names
from raygate.server.cache import convert
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.fronts.scheduler import HostPriorities, SchedulerExtender
from raygate.server.metrics.registry import Metrics
from raygate.server.wire import kube
from raygate.server.wire import scheduler as wire

SHAPES = [f"names-{n}" for n in MICRO.names] + [f"nodelist-{n}" for n in MICRO.nodelist]


def body_of(cluster: Cluster, shape: str, floor: bool = True) -> bytes:
    kind, count = shape.rsplit("-", 1)
    pod = cluster.floor_pod if floor else cluster.overflow_pod
    if kind == "names":
        return cluster.names_body(pod, int(count))
    return cluster.nodelist_body(pod, int(count))


@pytest.mark.parametrize("shape", SHAPES)
def test_decode_extender_args(benchmark: Benchmark, cluster: Cluster, shape: str) -> None:
    body = body_of(cluster, shape)
    benchmark.extra_info["body_bytes"] = len(body)
    args = benchmark(wire.decode_filter_args, body)
    assert isinstance(args.pod, msgspec.Raw)  # decoded once per distinct pod: test_pod_view


def test_pod_view(benchmark: Benchmark, cluster: Cluster) -> None:
    """The request's Pod, decoded, into the policy's view: what a pod's first request
    pays (``RequestPods`` keeps the view for the next requests with the same Pod)."""
    args = wire.decode_filter_args(cluster.names_body(cluster.floor_pod, 1))
    assert isinstance(args.pod, msgspec.Raw)
    text = bytes(args.pod)
    view = benchmark(lambda: convert.pod_view(wire.decode_pod(text), "$.Pod"))
    assert view.is_ray


@pytest.mark.parametrize("pod", ["floor", "overflow"])
def test_policy_decision(benchmark: Benchmark, cluster: Cluster, pod: str) -> None:
    """``decide`` alone: the pod's role from the cache, the placement and the message."""
    obj = cluster.floor_pod if pod == "floor" else cluster.overflow_pod
    view = convert.pod_view(msgspec.convert(obj, kube.Pod))
    snap = cluster.snapshot
    decision = benchmark(decide, view, snap, snap.config, NOW)
    want = Placement.AVOID_GPU if pod == "floor" else Placement.PREFER_CPU
    assert decision.placement is want


@pytest.mark.parametrize("count", MICRO.names)
def test_policy_filter_names(benchmark: Benchmark, cluster: Cluster, count: int) -> None:
    """The per-node part of filter: split the names into passed and refused."""
    view = convert.pod_view(msgspec.convert(cluster.floor_pod, kube.Pod))
    snap = cluster.snapshot
    decision = decide(view, snap, snap.config, NOW)
    names = cluster.names[:count]
    passed, failed = benchmark(filter_names, decision, names, snap.gpu_node_names)
    assert len(passed) + len(failed) == count


@pytest.mark.parametrize("count", MICRO.names)
def test_encode_filter_reply(benchmark: Benchmark, cluster: Cluster, count: int) -> None:
    names = cluster.names[:count]
    message = "raygate: floor-avoids-gpu: GPU node refused to a CPU-only floor worker"
    result = wire.FilterResult(
        node_names=[n for n in names if n not in cluster.gpu],
        failed_and_unresolvable_nodes={n: message for n in names if n in cluster.gpu})
    out = benchmark(msgspec.json.encode, result)
    benchmark.extra_info["reply_bytes"] = len(out)


@pytest.mark.parametrize("count", MICRO.names)
def test_encode_prioritize_reply(benchmark: Benchmark, cluster: Cluster, count: int) -> None:
    """The prioritize reply from the front's pre-encoded per-node entries."""
    entries = HostPriorities().of(cluster.snapshot)
    names = cluster.names[:count]

    def encode() -> bytes:
        return b"[" + b",".join(e for e in map(entries.get, names) if e is not None) + b"]"

    out = benchmark(encode)
    benchmark.extra_info["reply_bytes"] = len(out)


def note_reuse(benchmark: Benchmark, metrics: Metrics, verb: str) -> None:
    """The share of ``verb``'s decisions reused: one pod on one snapshot, as these rows
    repeat, hits from the second call on."""
    series = metrics.decision_reuse.series
    hits = series[(f"scheduler/{verb}", "hit")].value
    misses = series[(f"scheduler/{verb}", "miss")].value
    benchmark.extra_info["reuse_hit_pct"] = round(100 * hits / (hits + misses))


@pytest.mark.parametrize("shape", SHAPES)
def test_verb_filter(benchmark: Benchmark, cluster: Cluster, shape: str) -> None:
    """The whole verb for the floor pod: GPU nodes refused (one pod, repeated: the
    decision is reused, as on kube-scheduler's retry of a pod)."""
    body = body_of(cluster, shape)
    metrics = Metrics()
    out = benchmark(SchedulerExtender(cluster.cache, lambda: NOW, metrics).filter, body)
    reply = json.loads(out)
    assert not reply["Error"] and reply["FailedAndUnresolvableNodes"]
    note_reuse(benchmark, metrics, "filter")


@pytest.mark.parametrize("shape", SHAPES)
def test_verb_prioritize(benchmark: Benchmark, cluster: Cluster, shape: str) -> None:
    """The whole verb for the overflow pod: CPU nodes 10, GPU nodes 0 (one pod, repeated:
    the decision is reused, as after filter of the same pod)."""
    body = body_of(cluster, shape, floor=False)
    metrics = Metrics()
    out = benchmark(SchedulerExtender(cluster.cache, lambda: NOW, metrics).prioritize, body)
    assert {e["Score"] for e in json.loads(out)} == {0, 10}
    note_reuse(benchmark, metrics, "prioritize")


@pytest.mark.parametrize("count", MICRO.names)
@pytest.mark.parametrize("snapshot", ["unchanged", "republished"])
def test_verb_cycle(benchmark: Benchmark, cluster: Cluster, count: int, snapshot: str) -> None:
    """kube-scheduler's cycle for one pod: filter, then prioritize over the names that
    passed. The cache publishes a snapshot before each filter (the same objects, another
    serial), so filter decides anew, as for a new pod; ``unchanged``: prioritize reuses
    filter's decision; ``republished``: the cache publishes again before prioritize, which
    decides anew too. Both publish twice per cycle: they differ only in the reuse."""
    snapshots = [cluster.snapshot]
    for _ in range(3):
        snapshots.append(SnapshotEditor(snapshots[-1]).finish())
    cache = cache_of(snapshots[0])
    metrics = Metrics()
    scheduler = SchedulerExtender(cache, clock=lambda: NOW, metrics=metrics)
    filter_body = cluster.names_body(cluster.overflow_pod, count)
    passed = json.loads(scheduler.filter(filter_body))["NodeNames"]
    prioritize_body = extender_args(cluster.overflow_pod, passed)
    # filter on snapshots 0, 2, 0, 2, ...; prioritize on the same one or on 1, 3, 1, 3, ...
    then = 0 if snapshot == "unchanged" else 1
    cycles = itertools.count()

    def cycle() -> bytes:
        first = 2 * (next(cycles) % 2)
        cache.publish(snapshots[first])
        scheduler.filter(filter_body)
        cache.publish(snapshots[first + then])
        return scheduler.prioritize(prioritize_body)

    out = benchmark(cycle)
    assert {e["Score"] for e in json.loads(out)} == {0, 10}
    note_reuse(benchmark, metrics, "prioritize")
