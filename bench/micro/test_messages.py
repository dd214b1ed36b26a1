"""The API's messages made and read: a large RayCluster's admission status from the
policy's result to its JSON (``Entry``: the reply of every GET), to its protobuf message
(every gRPC Get and Watch) and back (the client); an explanation over every node to JSON,
to protobuf and back."""

from __future__ import annotations

import msgspec
import pytest

from bench.micro.conftest import NOW, Benchmark, Cluster, snapshot_of
from bench.micro.test_cluster_state import _big_raycluster
from bench.scenarios import MICRO
from raygate.contract.admission_status import AdmissionStatus
from raygate.contract.explain import ExplainReply
from raygate.contract.messages import from_proto, to_proto
from raygate.contract.proto.raygate.v1 import admission_pb2, explain_pb2
from raygate.policy.admission import Derivation, admission_status
from raygate.policy.explain import Explanation, explain
from raygate.server.cache import convert
from raygate.server.fronts.admission.state import Entry
from raygate.server.fronts.explain.service import to_wire
from raygate.server.wire import kube


@pytest.fixture(scope="module")
def derivation() -> Derivation:
    snapshot = snapshot_of(_big_raycluster(MICRO.admission_pods))
    cluster = snapshot.raycluster("ray", "big")
    assert cluster is not None
    return admission_status(cluster, snapshot, snapshot.config, NOW)


@pytest.fixture(scope="module")
def explanation(cluster: Cluster) -> Explanation:
    pod = convert.pod_view(msgspec.convert(cluster.floor_pod, kube.Pod))
    return explain(pod, cluster.snapshot, cluster.snapshot.config, NOW, cluster.names)


def test_admission_to_json(benchmark: Benchmark, derivation: Derivation) -> None:
    entry = benchmark(Entry, derivation, (), NOW)
    benchmark.extra_info["pods"] = len(entry.status.pods)
    benchmark.extra_info["body_bytes"] = len(entry.body)


def test_admission_to_proto(benchmark: Benchmark, derivation: Derivation) -> None:
    status = Entry(derivation, (), NOW).status
    message = benchmark(to_proto, status, admission_pb2.AdmissionStatus)
    assert len(message.pods) == len(status.pods)


def test_admission_from_proto(benchmark: Benchmark, derivation: Derivation) -> None:
    status = Entry(derivation, (), NOW).status
    message = to_proto(status, admission_pb2.AdmissionStatus)
    assert benchmark(from_proto, message, AdmissionStatus) == status


def test_explain_to_json(benchmark: Benchmark, explanation: Explanation) -> None:
    def encode() -> bytes:
        return msgspec.json.encode(to_wire(explanation))

    body = benchmark(encode)
    benchmark.extra_info["nodes"] = len(explanation.nodes)
    benchmark.extra_info["body_bytes"] = len(body)


def test_explain_to_proto(benchmark: Benchmark, explanation: Explanation) -> None:
    message = benchmark(to_proto, to_wire(explanation), explain_pb2.Explanation)
    assert len(message.nodes) == len(explanation.nodes)


def test_explain_from_proto(benchmark: Benchmark, explanation: Explanation) -> None:
    reply = to_wire(explanation)
    message = to_proto(reply, explain_pb2.Explanation)
    assert benchmark(from_proto, message, ExplainReply) == reply
