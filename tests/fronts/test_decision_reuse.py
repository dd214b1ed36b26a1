"""kube-scheduler's prioritize reusing filter's decision for the same pod on the same
snapshot (``raygate.server.fronts.decisions.DecisionMemo``): the replies are those of an
extender that decides every request anew, whatever the pods, snapshots and clock; any
publish of the cache, a changed pod or a clock-dependent decision is a miss."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.config import GpuNodesForSurplus, PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import SnapshotEditor, build_snapshot
from raygate.server.cache.snapshot import Snapshot
from raygate.server.cache.snapshot_files import load_text
from raygate.server.fronts.scheduler import SchedulerExtender
from raygate.server.metrics.registry import Metrics
from testkit.builders import T0_EPOCH, Obj, iso, make_node, make_pod, make_raycluster, object_list

NOW = T0_EPOCH + 3600
NAMES = ["cpu-1", "gpu-1", "cpu-2", "gpu-2", "never-seen"]
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=4, min=0, max=8).obj()


def base(name: str) -> Obj:
    return make_pod(name).ray("rc", "base").requests(cpu="2").obj()


def over(name: str) -> Obj:
    return make_pod(name).ray("rc", "over").requests(cpu="2").obj()


REQUEST_PODS: dict[str, Obj] = {
    "head": make_pod("h").head("rc").requests(cpu="1").obj(),
    "base pending": base("b3"),
    "base bound": make_pod("b1").ray("rc", "base").requests(cpu="2").on("cpu-1").obj(),
    "over pending": over("o1"),
    "over pending, other text": make_pod("o1").ray("rc", "over").requests(cpu="2")
    .label("extra", "x").obj(),
    "gpu worker": make_pod("g").ray("rc", "gpu").requests(nvidia_com_gpu="1").obj(),
    "not ray": make_pod("web", "default").requests(cpu="1").obj(),
    "unknown cluster": make_pod("u").ray("elsewhere", "base").requests(cpu="1").obj(),
}


@dataclass(frozen=True)
class World:
    """One state of the cluster: which objects the cache holds and under which policy."""

    bound_base: int = 0
    """Floor pods of group ``base`` already on CPU nodes (its floor is 2)."""
    gpu2_labelled: bool = True
    """gpu-2 is a GPU node by its label; otherwise a plain (CPU) node."""
    cpu2_relabelled: bool = False
    """cpu-2 carries the GPU label too."""
    preempted_ago: float | None = None
    """An ``over`` pod lost to scheduler preemption on gpu-1 this many seconds before NOW."""
    mode: GpuNodesForSurplus = GpuNodesForSurplus.SURPLUS
    with_cluster: bool = True

    def snapshot(self) -> Snapshot:
        gpu_label = ("nvidia.com/gpu.present", "true")
        nodes = [make_node("cpu-1").obj(),
                 make_node("cpu-2").label(*gpu_label).obj() if self.cpu2_relabelled
                 else make_node("cpu-2").obj(),
                 make_node("gpu-1").gpus(8).obj(),
                 make_node("gpu-2").label(*gpu_label).obj() if self.gpu2_labelled
                 else make_node("gpu-2").obj()]
        pods = [make_pod(f"b{i + 1}").ray("rc", "base").requests(cpu="2").on("cpu-1").obj()
                for i in range(self.bound_base)]
        if self.preempted_ago is not None:
            pods.append(make_pod("victim").ray("rc", "over").requests(cpu="2").on("gpu-1")
                        .preempted(iso(NOW - self.preempted_ago)).obj())
        objects = [*nodes, *pods, *([CLUSTER] if self.with_cluster else [])]
        config = PolicyConfig(gpu_nodes_for_surplus=self.mode)
        return build_snapshot(load_text(json.dumps(object_list(*objects)), "test"), config)


def body(pod: str, names: list[str]) -> bytes:
    return json.dumps({"Pod": REQUEST_PODS[pod], "NodeNames": names}).encode()


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def extender(world: World = World()) -> tuple[SchedulerExtender, ClusterCache, Metrics, Clock]:
    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(world.snapshot())
    metrics, clock = Metrics(), Clock()
    return SchedulerExtender(cache, clock, metrics), cache, metrics, clock


def reuse(metrics: Metrics, verb: str) -> tuple[float, float]:
    """(hits, misses) of ``scheduler/<verb>``."""
    series = metrics.decision_reuse.series
    return (series[(f"scheduler/{verb}", "hit")].value,
            series[(f"scheduler/{verb}", "miss")].value)


def counts(family: Any) -> dict[tuple[str, ...], float]:
    return {labels: cell.value for labels, cell in family.series.items() if cell.value}


def refused(reply: bytes) -> set[str]:
    return set(json.loads(reply)["FailedAndUnresolvableNodes"] or {})


# --- byte-identical to deciding every request anew -------------------------------------------

worlds = st.builds(
    World,
    bound_base=st.integers(0, 2),
    gpu2_labelled=st.booleans(),
    cpu2_relabelled=st.booleans(),
    preempted_ago=st.sampled_from([None, 10.0, 10.0, 299.0, 300.0, 1000.0]),
    # Mostly the default policy and a known RayCluster, where most rules (and the thrash
    # guard) apply.
    mode=st.sampled_from([GpuNodesForSurplus.SURPLUS] * 3 + list(GpuNodesForSurplus)),
    with_cluster=st.sampled_from([True, True, True, False]),
)
# Mostly the pending workers kube-scheduler sends, whose decisions depend on the most.
request_pods = st.sampled_from(["base pending", "over pending"] * 3 + list(REQUEST_PODS))
calls = st.tuples(st.sampled_from(["filter", "prioritize"]), request_pods,
                  st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
steps = st.one_of(
    calls.map(lambda call: ("call", call)),
    calls.map(lambda call: ("call", call)),
    worlds.map(lambda world: ("publish", world)),
    st.sampled_from([0.5, 1.0, 1.0, 300.0]).map(lambda seconds: ("tick", seconds)),
)


@settings(max_examples=500, deadline=None)
@given(first=worlds, script=st.lists(steps, min_size=1, max_size=25))
def test_replies_are_those_of_an_extender_that_never_reuses(
        first: World, script: list[tuple[str, Any]]) -> None:
    """Any sequence of requests, publishes and clock steps: every reply equals, byte for
    byte, the reply of a new extender (an empty memo) asked the same on the same cache,
    and the decisions are counted the same."""
    scheduler, cache, metrics, clock = extender(first)
    fresh_metrics = Metrics()
    for kind, arg in script:
        if kind == "publish":
            cache.publish(arg.snapshot())
        elif kind == "tick":
            clock.now += arg
        else:
            verb, pod, names = arg
            request = body(pod, names)
            fresh = SchedulerExtender(cache, clock, fresh_metrics)
            assert getattr(scheduler, verb)(request) == getattr(fresh, verb)(request), arg
    for counted in ("decisions", "gpu_nodes_refused", "fail_open"):
        assert counts(getattr(metrics, counted)) == counts(getattr(fresh_metrics, counted))


# --- hits ---------------------------------------------------------------------------------

def test_prioritize_after_filter_of_the_same_pod_reuses_its_decision() -> None:
    scheduler, _, metrics, _ = extender()
    scheduler.filter(body("over pending", NAMES))
    scheduler.prioritize(body("over pending", ["cpu-1", "gpu-1"]))
    scheduler.filter(body("over pending", NAMES))  # kube-scheduler's retry
    assert reuse(metrics, "filter") == (1, 1)
    assert reuse(metrics, "prioritize") == (1, 0)
    # A reused decision is still counted as the request's decision.
    assert metrics.decisions.series[("scheduler/prioritize", "surplus-prefers-cpu")].value == 1


def test_the_hit_rate_is_exported() -> None:
    scheduler, _, metrics, _ = extender()
    scheduler.filter(body("base pending", NAMES))
    scheduler.prioritize(body("base pending", NAMES))
    text = metrics.exposition().decode()
    assert 'raygate_decision_reuse_total{result="hit",verb="scheduler/prioritize"} 1.0' in text
    assert 'raygate_decision_reuse_total{result="miss",verb="scheduler/filter"} 1.0' in text


# --- misses -------------------------------------------------------------------------------

def test_the_group_floor_reached_in_between_is_a_new_decision() -> None:
    """A pending base pod is floor while fewer than 2 are scheduled, surplus after."""
    scheduler, cache, metrics, _ = extender(World(bound_base=1))
    assert refused(scheduler.filter(body("base pending", NAMES))) == {"gpu-1", "gpu-2"}
    cache.publish(World(bound_base=2).snapshot())
    assert refused(scheduler.filter(body("base pending", NAMES))) == set()
    scheduler.prioritize(body("base pending", NAMES))
    assert reuse(metrics, "filter") == (0, 2)
    assert reuse(metrics, "prioritize") == (1, 0)
    assert metrics.decisions.series[("scheduler/prioritize", "surplus-prefers-cpu")].value == 1


def test_a_node_relabelled_or_added_in_between_is_seen() -> None:
    scheduler, cache, metrics, _ = extender(World(gpu2_labelled=False))
    assert refused(scheduler.filter(body("head", NAMES))) == {"gpu-1"}
    cache.publish(World(gpu2_labelled=True, cpu2_relabelled=True).snapshot())
    assert refused(scheduler.filter(body("head", NAMES))) == {"gpu-1", "gpu-2", "cpu-2"}
    assert reuse(metrics, "filter") == (0, 2)


def test_any_publish_is_a_miss_even_when_nothing_changed() -> None:
    scheduler, cache, metrics, _ = extender()
    scheduler.filter(body("head", NAMES))
    cache.publish(SnapshotEditor(cache.snapshot).finish())  # a new snapshot with the same objects
    scheduler.prioritize(body("head", NAMES))
    assert reuse(metrics, "prioritize") == (0, 1)


def test_a_policy_change_is_a_miss() -> None:
    scheduler, cache, metrics, _ = extender()
    assert refused(scheduler.filter(body("over pending", NAMES))) == set()
    cache.set_policy(PolicyConfig(gpu_nodes_for_surplus=GpuNodesForSurplus.NEVER))
    assert refused(scheduler.filter(body("over pending", NAMES))) == {"gpu-1", "gpu-2"}
    assert reuse(metrics, "filter") == (0, 2)


def test_a_different_pod_never_hits() -> None:
    """Another pod, or the same pod (uid, name) whose text changed in any way."""
    scheduler, _, metrics, _ = extender()
    scheduler.filter(body("over pending", NAMES))
    scheduler.prioritize(body("over pending, other text", NAMES))
    scheduler.prioritize(body("base pending", NAMES))
    assert reuse(metrics, "prioritize") == (0, 2)


def test_a_decision_that_read_the_clock_is_never_reused() -> None:
    """The thrash guard's reason counts seconds, and the guard ends: decided every time."""
    scheduler, _, metrics, clock = extender(World(preempted_ago=10.0))
    first = scheduler.filter(body("over pending", NAMES))
    clock.now += 1
    second = scheduler.filter(body("over pending", NAMES))
    assert refused(first) == refused(second) == {"gpu-1", "gpu-2"}
    assert "10s ago" in first.decode() and "11s ago" in second.decode()
    clock.now += 300
    assert refused(scheduler.filter(body("over pending", NAMES))) == set()
    assert reuse(metrics, "filter") == (0, 3)


def test_the_memo_keeps_a_few_pods_only() -> None:
    scheduler, _, _, _ = extender()
    for i in range(100):
        scheduler.filter(json.dumps({"Pod": over(f"o{i}"), "NodeNames": NAMES}).encode())
    assert len(scheduler.decisions) == scheduler.decisions.limit
