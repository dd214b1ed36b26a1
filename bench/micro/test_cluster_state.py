"""Work that reads or writes much of the cache: preempt with substitution on a crowded
node, the admission status of a large RayCluster, one watch event applied to the cache."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from bench.micro.conftest import NOW, Benchmark, Cluster, cache_of, snapshot_of
from bench.payloads import OVERFLOW_GROUP, app_pod, ray_worker_pod
from bench.scenarios import MICRO
from raygate.server.cache import convert
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.fronts.scheduler import SchedulerExtender
from raygate.server.wire import kube
from testkit.builders import Obj, iso, make_node, make_pod, make_raycluster

# --- preempt -------------------------------------------------------------------------------


def _preempt_case(pods_on_node: int) -> tuple[list[Obj], bytes, set[str]]:
    """A GPU node (96 CPU, 8 GPUs) full of Ray workers: ``floor`` of them hold group
    ``base``'s floor, the rest are ``over`` surplus at priorities 0..9. A trainer (8 CPU,
    4 GPUs, priority 1000) preempts; kube-scheduler proposes 4 floor workers, which
    raygate protects and replaces by enough low-priority surplus workers."""
    floor = 10
    cluster = make_raycluster("rc").autoscaling() \
        .group("base", replicas=floor, min=floor, max=floor) \
        .group("over", replicas=pods_on_node - floor, min=0, max=pods_on_node).obj()
    node = make_node("gpu-1").allocatable(cpu="96", pods="250").gpus(8).obj()
    base = [make_pod(f"b{i}").ray("rc", "base").requests(cpu="1").on("gpu-1").obj()
            for i in range(floor)]
    over = [make_pod(f"o{i}").ray("rc", "over").requests(cpu="900m").on("gpu-1")
            .priority(i % 10).created(iso(NOW - 3600 + i)).obj()
            for i in range(pods_on_node - floor)]
    preemptor = make_pod("trainer", "ml").requests(cpu="8", nvidia_com_gpu="4") \
        .priority(1000).obj()
    proposed = [p["metadata"]["uid"] for p in base[:4]]
    body = json.dumps({"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        "gpu-1": {"Pods": [{"UID": u} for u in proposed], "NumPDBViolations": 0}}}).encode()
    return [node, cluster, *base, *over], body, {p["metadata"]["uid"] for p in over}


def test_preempt_with_substitution(benchmark: Benchmark) -> None:
    objects, body, surplus = _preempt_case(MICRO.preempt_node_pods)
    scheduler = SchedulerExtender(cache_of(snapshot_of(objects)), clock=lambda: NOW)
    out = benchmark(scheduler.preempt, body)
    victims = json.loads(out)["NodeNameToMetaVictims"]["gpu-1"]["Pods"]
    assert victims and {v["UID"] for v in victims} <= surplus  # floor kept, surplus taken
    benchmark.extra_info["victims"] = len(victims)


# --- admission status ----------------------------------------------------------------------


def _big_raycluster(pods: int) -> list[Obj]:
    """A RayCluster of ``pods`` workers in one group on 100 CPU nodes: 60 % running,
    25 % refused by the scheduler, 10 % not judged yet, 5 % preempted lately."""
    nodes = [make_node(f"cpu-{i}").allocatable(cpu="64", pods="250").obj() for i in range(100)]
    cluster = make_raycluster("big").autoscaling() \
        .group("workers", replicas=pods, min=pods // 2, max=pods).obj()
    head = make_pod("big-head").head("big").on("cpu-0").phase("Running") \
        .condition("Ready", "True").obj()
    out = [*nodes, cluster, head]
    for i in range(pods):
        pod = make_pod(f"big-w{i}").ray("big", "workers").requests(cpu="2") \
            .created(iso(NOW - 7200 + i))
        share = i % 20
        if share < 12:
            pod.on(f"cpu-{i % 100}").phase("Running").condition("Ready", "True")
        elif share < 17:
            pod.condition("PodScheduled", "False", reason="Unschedulable",
                          message="0/100 nodes are available: 100 Insufficient cpu.")
        elif share < 19:
            pass
        else:
            pod.on(f"cpu-{i % 100}").phase("Running").preempted(at=iso(NOW - 60))
        out.append(pod.obj())
    return out


def test_admission_status(benchmark: Benchmark) -> None:
    from raygate.policy.admission import admission_status

    snapshot = snapshot_of(_big_raycluster(MICRO.admission_pods))
    cluster = snapshot.raycluster("ray", "big")
    assert cluster is not None
    derivation = benchmark(admission_status, cluster, snapshot, snapshot.config, NOW)
    assert derivation.status.pods
    benchmark.extra_info["pods_not_running"] = len(derivation.status.pods)


# --- cache events --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crowded(cluster: Cluster) -> Any:
    """The benchmark cluster plus one application pod on every node."""
    objects = [*cluster.objects["items"],
               *(app_pod(i, n["metadata"]["name"]) for i, n in enumerate(cluster.nodes))]
    return snapshot_of(objects)


@pytest.mark.parametrize("kind", ["pod", "node"])
def test_cache_event_apply(benchmark: Benchmark, cluster: Cluster, crowded: Any,
                           kind: str) -> None:
    """One MODIFIED event applied to a cache of 5,000 nodes and 5,000+ pods, published as
    a new snapshot: ``SnapshotEditor(snapshot)``, ``upsert(view)``, ``finish()``."""
    if kind == "pod":
        where = cluster.nodes[3]["metadata"]["name"]
        pod = ray_worker_pod(OVERFLOW_GROUP, index=7, node_name=where)
        view: Any = convert.pod_view(msgspec.convert(pod, kube.Pod))
    else:
        node = json.loads(json.dumps(cluster.nodes[3]))
        node["metadata"]["labels"]["example.com/touched"] = "yes"
        view = convert.node_view(msgspec.convert(node, kube.Node))

    def apply() -> Any:
        editor = SnapshotEditor(crowded)
        editor.upsert(view, "999999")
        return editor.finish()

    after = benchmark(apply)
    assert after is not crowded
