"""Volcano verbs in-process: decode of predicate and prioritize requests (NodeInfos with
their tasks' full Pods) and the whole verbs."""

from __future__ import annotations

import json

import msgspec
import pytest

from bench.micro.conftest import Benchmark, Cluster
from bench.payloads import volcano_node_info, volcano_predicate, volcano_prioritize
from bench.scenarios import MICRO
from raygate.server.wire import volcano as wire


def predicate_body(cluster: Cluster, pods: int) -> bytes:
    gpu = next(n for n in cluster.nodes if n["metadata"]["name"] in cluster.gpu)
    return volcano_predicate(cluster.floor_pod, volcano_node_info(gpu, pods))


def prioritize_body(cluster: Cluster, nodes: int, pods: int) -> bytes:
    infos = [volcano_node_info(n, pods, i * pods) for i, n in enumerate(cluster.nodes[:nodes])]
    return volcano_prioritize(cluster.overflow_pod, infos)


@pytest.mark.parametrize("pods", MICRO.predicate_pods)
def test_decode_predicate(benchmark: Benchmark, cluster: Cluster, pods: int) -> None:
    body = predicate_body(cluster, pods)
    benchmark.extra_info["body_bytes"] = len(body)
    decoder = msgspec.json.Decoder(wire.PredicateRequest)
    request = benchmark(decoder.decode, body)
    assert isinstance(request.node, wire.NodeInfo)


@pytest.mark.parametrize(("nodes", "pods"), MICRO.prioritize_nodeinfos)
def test_decode_prioritize(benchmark: Benchmark, cluster: Cluster, nodes: int,
                           pods: int) -> None:
    body = prioritize_body(cluster, nodes, pods)
    benchmark.extra_info["body_bytes"] = len(body)
    decoder = msgspec.json.Decoder(wire.PrioritizeRequest)
    request = benchmark(decoder.decode, body)
    assert isinstance(request.nodes, list) and len(request.nodes) == nodes


@pytest.mark.parametrize("pods", MICRO.predicate_pods)
def test_verb_predicate(benchmark: Benchmark, cluster: Cluster, pods: int) -> None:
    """The floor pod on a GPU node: refused (code 3)."""
    out = benchmark(cluster.volcano.predicate, predicate_body(cluster, pods))
    assert json.loads(out)["code"] == 3


@pytest.mark.parametrize(("nodes", "pods"), MICRO.prioritize_nodeinfos)
def test_verb_prioritize(benchmark: Benchmark, cluster: Cluster, nodes: int, pods: int) -> None:
    out = benchmark(cluster.volcano.prioritize, prioritize_body(cluster, nodes, pods))
    assert len(json.loads(out)["nodeScore"]) == nodes
