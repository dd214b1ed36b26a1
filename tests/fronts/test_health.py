"""gRPC health follows the cache: NOT_SERVING until the first snapshot is published (a
live cluster lists after the server starts), SERVING after."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import make_node
from tests.conftest import FakeClock, ServerThread


@pytest.fixture
def unsynced() -> Iterator[ServerThread]:
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock())
    thread.start()
    yield thread
    thread.stop()


def test_grpc_health_turns_serving_when_the_cache_is_published(unsynced: ServerThread) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{unsynced.server.grpc_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        services = ("", "raygate.v1.Admission", "raygate.v1.Explain")
        for service in services:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        unsynced.publish(make_node("n1").obj())
        deadline = time.monotonic() + 30  # generous: an event, not a speed check
        for service in services:
            while True:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    break
                assert time.monotonic() < deadline, service
                time.sleep(0.01)
