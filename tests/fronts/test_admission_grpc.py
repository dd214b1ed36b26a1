"""``raygate.v1.Admission`` on a real gRPC server over loopback: Get, List and Watch for
the snapshot fixtures, the same answers as HTTP, errors, health, reflection, many
watchers, and shutdown."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from raygate.client import GrpcAdmissionClient, HttpAdmissionClient
from raygate.contract.admission_status import AdmissionStatus, WatchEvent
from raygate.contract.errors import BadRequest, RayClusterNotFound, Unavailable
from raygate.contract.messages import from_proto, to_proto
from raygate.contract.proto.raygate.v1 import admission_pb2 as pb
from raygate.contract.proto.raygate.v1 import admission_pb2_grpc
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, ServerThread

WAIT = 10.0
"""Seconds to wait for what takes milliseconds: generous, so a loaded machine never fails
a test (the latency itself is measured by bench/admission_watchers.py)."""


@pytest.fixture
def target(server: ServerThread) -> str:
    return f"127.0.0.1:{server.server.grpc_port}"


@pytest.fixture
def api(target: str) -> Iterator[GrpcAdmissionClient]:
    with GrpcAdmissionClient(target, timeout=WAIT) as client:
        yield client


class Watcher:
    """A Watch stream read by a thread into a queue, so the test can wait with a timeout."""

    def __init__(self, api: GrpcAdmissionClient, namespace: str | None = None,
                 name: str | None = None) -> None:
        self.events: queue.Queue[WatchEvent | BaseException] = queue.Queue()
        self.received: list[float] = []
        self._stream = api.watch(namespace, name)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._stream:
                self.received.append(time.monotonic())
                self.events.put(event)
        except BaseException as exc:  # handed to the test
            self.events.put(exc)

    def next(self) -> WatchEvent:
        item = self.events.get(timeout=WAIT)
        if isinstance(item, BaseException):
            raise item
        return item

    def take(self, n: int) -> list[tuple[str, str]]:
        return [(e.type, e.status.metadata.name if e.status else "")
                for e in (self.next() for _ in range(n))]

    def close(self) -> None:
        self._stream.close()


# --- Get and List -----------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(sc.SCENARIOS))
def test_get_each_scenario_same_as_http(server: ServerThread, api: GrpcAdmissionClient,
                                        scenario: str) -> None:
    server.publish(*sc.SCENARIOS[scenario]())
    name = sc.CLUSTERS[scenario]
    status = api.get("ray", name)
    assert {p.name: (p.state, p.advice.action) for p in status.pods} == {
        pod: (state, advice) for s, pod, state, _, advice in sc.EXPECTED_PODS if s == scenario}
    with HttpAdmissionClient(server.url) as http:
        assert http.get("ray", name) == status  # one content, two transports


def test_raw_messages(server: ServerThread, target: str) -> None:
    server.publish(*sc.preempted())
    with grpc.insecure_channel(target) as channel:
        stub = admission_pb2_grpc.AdmissionStub(channel)
        status = stub.Get(pb.GetRequest(namespace="ray", name="demo"), timeout=WAIT)
        listing = stub.List(pb.ListRequest(), timeout=WAIT)
    assert status.metadata.name == "demo" and len(status.metadata.version) == 16
    assert status.gang.source.kind == "PodGroup"
    old = next(p for p in status.pods if p.name == "demo-overflow-old")
    assert old.state == pb.Pod.PREEMPTED
    assert old.advice.action == pb.PodAdvice.KEEP
    assert old.since.ToJsonString() == "2026-11-30T03:59:50Z"
    overflow = next(g for g in status.groups if g.name == "overflow")
    assert (overflow.preempted, overflow.scale_up.action) == (1, pb.GroupAdvice.HOLD)
    (gate,) = overflow.scale_gates
    assert (gate.name, gate.writer, gate.since.ToJsonString(), gate.wanted, gate.present) == (
        "raygate.io/thrash-guard", "raygate", "2026-11-30T03:59:50Z", True, False)
    assert list(listing.items) == [status]
    assert to_proto(from_proto(status, AdmissionStatus), pb.AdmissionStatus) == status


def test_list_by_namespace(server: ServerThread, api: GrpcAdmissionClient) -> None:
    server.publish(*sc.inqueue_gang(), make_raycluster("x", "team-b").obj())
    assert [s.metadata.name for s in api.list().items] == ["queued", "x"]
    assert [s.metadata.name for s in api.list("team-b").items] == ["x"]
    assert api.list("nobody").items == []


def test_errors(server: ServerThread, api: GrpcAdmissionClient, target: str) -> None:
    server.publish(*sc.stuck())
    with pytest.raises(RayClusterNotFound) as missing:
        api.get("ray", "nope")
    assert missing.value.synced is True
    with pytest.raises(BadRequest):
        api.get("", "nope")
    with grpc.insecure_channel(target) as channel:
        stub = admission_pb2_grpc.AdmissionStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            next(iter(stub.Watch(pb.WatchRequest(name="lonely"), timeout=WAIT)))
        assert isinstance(err.value, grpc.Call)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_not_found_before_sync() -> None:
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock())
    thread.start()
    try:
        with GrpcAdmissionClient(f"127.0.0.1:{thread.server.grpc_port}", timeout=WAIT) as api:
            with pytest.raises(RayClusterNotFound) as missing:
                api.get("ray", "demo")
            assert missing.value.synced is False
    finally:
        thread.stop()


# --- Watch ------------------------------------------------------------------------------------


def test_watch_one_cluster(server: ServerThread, api: GrpcAdmissionClient) -> None:
    server.publish(*sc.inqueue_gang())
    watcher = Watcher(api, "ray", "queued")
    try:
        first = watcher.next()
        assert first.type == "ADDED" and first.status is not None
        assert watcher.take(1) == [("SYNCED", "")]
        admitted = sc.make_podgroup("ray-queued-pg").owned_by("queued").phase("Running")
        published = time.monotonic()
        server.publish(sc.inqueue_gang()[0], admitted.min_member(3).obj(),
                       *sc.inqueue_gang()[2:])
        changed = watcher.next()
        latency = watcher.received[-1] - published
        assert changed.type == "MODIFIED" and changed.status is not None
        assert changed.status.gang.admitted
        assert changed.status.metadata.version != first.status.metadata.version
        # Arrives at all (bench/admission_watchers.py measures how fast: ~1 ms here).
        assert latency < WAIT
        server.publish(*sc.stuck())
        assert watcher.take(1) == [("DELETED", "queued")]
        server.publish(*sc.inqueue_gang())
        assert watcher.take(1) == [("ADDED", "queued")]
    finally:
        watcher.close()


def test_watch_a_namespace_and_everything(server: ServerThread,
                                          api: GrpcAdmissionClient) -> None:
    other = make_raycluster("x", "team-b").group("w", replicas=1).obj()
    server.publish(*sc.inqueue_gang(), other)
    in_ray, everywhere = Watcher(api, "ray"), Watcher(api)
    try:
        assert in_ray.take(2) == [("ADDED", "queued"), ("SYNCED", "")]
        assert everywhere.take(3) == [("ADDED", "queued"), ("ADDED", "x"), ("SYNCED", "")]
        # A change in team-b only: the namespace watcher hears nothing of it.
        server.publish(*sc.inqueue_gang(), other,
                       make_pod("x-head", "team-b").head("x").obj())
        assert everywhere.take(1) == [("MODIFIED", "x")]
        server.publish(*sc.inqueue_gang()[:-1], other,
                       make_pod("x-head", "team-b").head("x").obj())
        assert in_ray.take(1) == [("MODIFIED", "queued")]
        assert everywhere.take(1) == [("MODIFIED", "queued")]
    finally:
        in_ray.close()
        everywhere.close()


def test_many_watchers_all_hear_a_change(server: ServerThread, target: str) -> None:
    server.publish(*sc.inqueue_gang())
    count = 100
    with grpc.insecure_channel(target) as channel:
        stub = admission_pb2_grpc.AdmissionStub(channel)
        streams = [stub.Watch(pb.WatchRequest(namespace="ray", name="queued"))
                   for _ in range(count)]
        try:
            for stream in streams:
                assert [next(stream).type, next(stream).type] == [pb.WatchEvent.ADDED,
                                                                  pb.WatchEvent.SYNCED]
            server.publish(*sc.inqueue_gang()[:-1])
            versions = {next(stream).status.metadata.version for stream in streams}
            assert len(versions) == 1
        finally:
            for stream in streams:
                stream.cancel()


def test_shutdown_ends_watches_with_unavailable() -> None:
    cache = ClusterCache(PolicyConfig(), "test")
    thread = ServerThread(cache, FakeClock())
    thread.start()
    thread.publish(*sc.inqueue_gang())
    with GrpcAdmissionClient(f"127.0.0.1:{thread.server.grpc_port}", timeout=WAIT) as api:
        watcher = Watcher(api, "ray")
        assert watcher.take(2) == [("ADDED", "queued"), ("SYNCED", "")]
        started = time.monotonic()
        thread.stop()
        with pytest.raises(Unavailable):
            watcher.next()
        # Well inside the 5 s grace the gRPC server gives streams: the service ended it.
        assert time.monotonic() - started < WAIT


# --- health and reflection --------------------------------------------------------------------


def test_health_and_reflection() -> None:
    # A cache loaded before the server starts, as `raygate serve --snapshot` does (the
    # health status is set when the server starts).
    cache = ClusterCache(PolicyConfig(), "test")
    thread = ServerThread(cache, FakeClock())
    thread.publish(*sc.stuck())
    thread.start()
    try:
        _check_health_and_reflection(f"127.0.0.1:{thread.server.grpc_port}")
    finally:
        thread.stop()


def _check_health_and_reflection(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service="raygate.v1.Admission"),
                             timeout=WAIT)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="raygate.v1.Admission"),
        ]
        services, files = list(reflection.ServerReflectionInfo(iter(requests), timeout=WAIT))
    assert "raygate.v1.Admission" in {s.name for s in services.list_services_response.service}
    assert files.file_descriptor_response.file_descriptor_proto  # what grpcurl reads
