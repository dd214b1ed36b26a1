"""Inputs of the micro-benchmarks, built once per session from ``bench.payloads`` and
``bench.scenarios.MICRO``: the same cluster and request bytes as the HTTP benchmarks."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pytest

from bench.payloads import (
    FLOOR_GROUP,
    OVERFLOW_GROUP,
    Obj,
    cluster_snapshot,
    extender_args,
    node_list_args,
    node_with_status,
    ray_worker_pod,
    request_node_names,
    snapshot_gpu_node_names,
)
from bench.scenarios import CLUSTER_NODES
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot import Snapshot
from raygate.server.cache.snapshot_files import load_text
from raygate.server.fronts.scheduler import SchedulerExtender
from raygate.server.fronts.volcano import VolcanoExtender

T = TypeVar("T")

NOW = 1796011200.0 + 3600  # an hour after the payloads' timestamps


class Benchmark(Protocol):
    """pytest-benchmark's ``benchmark`` fixture, as far as these modules use it."""

    extra_info: dict[str, Any]

    def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


@dataclass(frozen=True)
class Cluster:
    objects: Obj
    snapshot: Snapshot
    cache: ClusterCache
    names: list[str]
    gpu: frozenset[str]
    nodes: list[Obj]
    floor_pod: Obj
    overflow_pod: Obj

    def names_body(self, pod: Obj, count: int) -> bytes:
        return extender_args(pod, self.names[:count])

    def nodelist_body(self, pod: Obj, count: int) -> bytes:
        return node_list_args(pod, [node_with_status(n) for n in self.nodes[:count]])

    @property
    def scheduler(self) -> SchedulerExtender:
        return SchedulerExtender(self.cache, clock=lambda: NOW)

    @property
    def volcano(self) -> VolcanoExtender:
        return VolcanoExtender(self.cache, clock=lambda: NOW)


def snapshot_of(objects: list[Obj]) -> Snapshot:
    """Objects through raygate's own loader into a snapshot, as ``raygate serve`` does."""
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    return build_snapshot(load_text(text, "bench"), PolicyConfig())


def cache_of(snapshot: Snapshot) -> ClusterCache:
    cache = ClusterCache(snapshot.config, "bench")
    cache.publish(snapshot)
    return cache


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    objects = cluster_snapshot(CLUSTER_NODES)
    snapshot = snapshot_of(objects["items"])
    return Cluster(
        objects=objects,
        snapshot=snapshot,
        cache=cache_of(snapshot),
        names=request_node_names(objects),
        gpu=snapshot_gpu_node_names(objects),
        nodes=[o for o in objects["items"] if o["kind"] == "Node"],
        floor_pod=ray_worker_pod(FLOOR_GROUP),
        overflow_pod=ray_worker_pod(OVERFLOW_GROUP),
    )
