"""Delegated authentication and authorization over gRPC: who may call what (a table),
what stays open, the servicers' own answers once let in, and a Watch checked again while
it streams."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from raygate.contract.proto.raygate.v1 import admission_pb2 as apb
from raygate.contract.proto.raygate.v1 import explain_pb2 as epb
from raygate.server.fronts.admission.servicer import SERVICE_NAME as ADMISSION_SERVICE
from raygate.server.fronts.explain.servicer import SERVICE_NAME as EXPLAIN_SERVICE
from tests.conftest import snapshot_of
from tests.server.authz.harness import (
    CACHE_SECONDS,
    DENIED,
    GET_A,
    HEAD_A,
    OBJECTS,
    OK,
    RAYCLUSTERS,
    TOKENS,
    UNAUTHENTICATED,
    WAIT,
    Env,
    GrpcCase,
    auth_metadata,
    call,
)

GRPC_CASES = [
    GrpcCase("get-no-token", "Get", GET_A, None, UNAUTHENTICATED),
    GrpcCase("get-unknown-token", "Get", GET_A, "Bearer nobody-token", UNAUTHENTICATED),
    GrpcCase("get-not-bearer", "Get", GET_A, "alice-token", UNAUTHENTICATED),
    GrpcCase("get-own", "Get", GET_A, "Bearer alice-token", OK),
    GrpcCase("get-other", "Get", apb.GetRequest(namespace="team-b", name="rc-b"),
             "Bearer alice-token", DENIED),
    GrpcCase("get-no-namespace-is-cluster-wide", "Get", apb.GetRequest(name="rc-a"),
             "Bearer alice-token", DENIED),
    GrpcCase("get-by-group", "Get", apb.GetRequest(namespace="team-b", name="rc-b"),
             "Bearer autoscaler-token", OK),
    GrpcCase("list-all-alice", "List", apb.ListRequest(), "Bearer alice-token", DENIED),
    GrpcCase("list-all-bob", "List", apb.ListRequest(), "Bearer bob-token", OK),
    GrpcCase("list-own", "List", apb.ListRequest(namespace="team-a"), "Bearer alice-token", OK),
    GrpcCase("list-needs-list", "List", apb.ListRequest(namespace="team-a"),
             "Bearer carol-token", DENIED),
    GrpcCase("get-without-list", "Get", GET_A, "Bearer carol-token", OK),
    GrpcCase("get-by-resource-name", "Get", GET_A, "Bearer dave-token", OK),
    GrpcCase("get-other-resource-name", "Get", apb.GetRequest(namespace="team-a", name="x"),
             "Bearer dave-token", DENIED),
    GrpcCase("watch-own", "Watch", apb.WatchRequest(namespace="team-a"), "Bearer alice-token",
             OK),
    GrpcCase("watch-namespace-needs-list", "Watch", apb.WatchRequest(namespace="team-a"),
             "Bearer carol-token", DENIED),
    GrpcCase("watch-one-by-resource-name", "Watch",
             apb.WatchRequest(namespace="team-a", name="rc-a"), "Bearer dave-token", OK),
    GrpcCase("watch-namespace-not-by-name", "Watch", apb.WatchRequest(namespace="team-a"),
             "Bearer dave-token", DENIED),
    GrpcCase("watch-all-alice", "Watch", apb.WatchRequest(), "Bearer alice-token", DENIED),
    GrpcCase("watch-no-token", "Watch", apb.WatchRequest(namespace="team-a"), None,
             UNAUTHENTICATED),
    GrpcCase("explain-own", "Explain", epb.ExplainRequest(namespace="team-a", name="rc-a-head"),
             "Bearer alice-token", OK),
    GrpcCase("explain-other", "Explain",
             epb.ExplainRequest(namespace="team-b", name="rc-b-head"), "Bearer alice-token",
             DENIED),
    GrpcCase("explain-with-get", "Explain",
             epb.ExplainRequest(namespace="team-a", name="rc-a-head"), "Bearer carol-token", OK),
    GrpcCase("explain-not-by-cluster-name", "Explain",
             epb.ExplainRequest(namespace="team-a", name="rc-a-head"), "Bearer dave-token",
             DENIED),
]


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c.id for c in GRPC_CASES])
def test_grpc(shared: Env, case: GrpcCase) -> None:
    code, details = call(shared, case)
    assert code == case.code, details
    for token in TOKENS:
        assert token not in details
    if code == DENIED:
        assert details.startswith('user "')


def test_grpc_health_and_reflection_are_open(shared: Env) -> None:
    reply = health_pb2_grpc.HealthStub(shared.channel).Check(health_pb2.HealthCheckRequest(),
                                                             timeout=WAIT)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(shared.channel)
    (answer,) = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=WAIT)
    names = {s.name for s in answer.list_services_response.service}
    assert {ADMISSION_SERVICE, EXPLAIN_SERVICE} <= names


def test_grpc_answers_are_the_servicers_own(shared: Env) -> None:
    status = shared.admission().Get(GET_A, metadata=auth_metadata("Bearer alice-token"),
                                    timeout=WAIT)
    assert (status.metadata.namespace, status.metadata.name) == ("team-a", "rc-a")
    # The servicer's own errors come through unchanged once the caller is let in.
    code, details = call(shared, GrpcCase("unknown", "Get",
                                           apb.GetRequest(namespace="team-a", name="nope"),
                                           "Bearer alice-token", OK))
    assert code == grpc.StatusCode.NOT_FOUND and "team-a/nope" in details


def _changed_rc_a(env: Env) -> None:
    """Something for a team-a Watch to send: rc-a's head pod goes."""
    env.server.cache.publish(snapshot_of(*(o for o in OBJECTS if o is not HEAD_A)))


@pytest.mark.parametrize(("revoke", "code"), [
    ("nothing", OK),
    ("rolebinding", DENIED),
    ("token", UNAUTHENTICATED),
])
def test_a_watch_is_checked_again_while_it_streams(env: Env, revoke: str,
                                                   code: grpc.StatusCode) -> None:
    stream = env.admission().Watch(apb.WatchRequest(namespace="team-a"),
                                   metadata=auth_metadata("Bearer alice-token"), timeout=WAIT)
    try:
        assert next(stream).type == apb.WatchEvent.ADDED
        assert next(stream).type == apb.WatchEvent.SYNCED
        if revoke == "rolebinding":
            env.double.revoke("alice", "list", RAYCLUSTERS, "team-a")
        elif revoke == "token":
            del env.double.users["alice-token"]
        # Within cache_seconds, nothing is asked again: the stream goes on.
        env.clock.now += CACHE_SECONDS / 2
        _changed_rc_a(env)
        assert next(stream).type == apb.WatchEvent.MODIFIED
        assert env.reviews() == (1, 1)
        # Then the answers expire, and the next check asks the API server again.
        env.clock.now += CACHE_SECONDS / 2 + 0.1
        env.server.cache.publish(snapshot_of(*OBJECTS))
        if code == OK:
            assert next(stream).type == apb.WatchEvent.MODIFIED
            assert env.reviews() == (2, 2)
        else:
            with pytest.raises(grpc.RpcError) as failed:
                next(stream)
            assert failed.value.code() == code
            assert "alice-token" not in (failed.value.details() or "")
    finally:
        stream.cancel()
