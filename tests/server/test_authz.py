"""Delegated authentication and authorization of the status endpoints (raygate/server/authz/):
raygate's real HTTP and gRPC servers (``build_server(..., authorizer=...)``) on loopback,
the real ``kubernetes`` client through a generated kubeconfig, and the API-server double
answering TokenReviews and SubjectAccessReviews from its token and grant tables.

No test waits for time to pass: cache expiry moves an injected clock, and a review held
back by the double is released by the test.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from kubernetes.config.config_exception import ConfigException

from raygate.client import connect, token_file
from raygate.contract.errors import Forbidden, Unauthorized, Unavailable
from raygate.contract.proto.raygate.v1 import admission_pb2 as apb
from raygate.contract.proto.raygate.v1 import admission_pb2_grpc, explain_pb2_grpc
from raygate.contract.proto.raygate.v1 import explain_pb2 as epb
from raygate.policy.config import PolicyConfig
from raygate.server.authz.authorizer import Authorizer, bearer_token
from raygate.server.cache.cluster import ClusterCache
from raygate.server.fronts.admission.servicer import SERVICE_NAME as ADMISSION_SERVICE
from raygate.server.fronts.explain.servicer import SERVICE_NAME as EXPLAIN_SERVICE
from raygate.server.kube.client import Connection, load_connection
from raygate.server.kube.reviews import Access, KubeReviewer, User
from testkit.apiserver import (
    ACCESS_REVIEWS,
    API_AUDIENCES,
    TOKEN_REVIEWS,
    ApiServerDouble,
    ReviewUser,
)
from testkit.builders import Obj, make_node, make_pod, make_raycluster
from tests.conftest import FakeClock, ServerThread, snapshot_of

WAIT = 20.0  # seconds: generous, only spent when something is broken
CACHE_SECONDS = 10.0
RAYCLUSTERS = "rayclusters.ray.io"

ALICE = ReviewUser("alice", uid="u-alice", groups=("system:authenticated",),
                   extra={"scopes.example.com": ["status"]})
BOB = ReviewUser("bob", uid="u-bob", groups=("system:authenticated",))
# KubeRay's autoscaler runs as a service account of the RayCluster's namespace; RBAC
# reaches it through its groups too.
AUTOSCALER = ReviewUser("system:serviceaccount:team-b:rc-b", uid="u-sa",
                        groups=("system:serviceaccounts", "system:serviceaccounts:team-b",
                                "system:authenticated"))
# carol may get but not list team-a; dave may get rc-a alone (a Role with resourceNames).
CAROL = ReviewUser("carol", uid="u-carol", groups=("system:authenticated",))
DAVE = ReviewUser("dave", uid="u-dave", groups=("system:authenticated",))
RAYGATE_AUDIENCE = "raygate.example.com"
# alice again, with a token bound to raygate's audience (a projected token): no good
# against the API server itself.
ALICE_FOR_RAYGATE = ReviewUser("alice", uid="u-alice", groups=("system:authenticated",),
                               audiences=(RAYGATE_AUDIENCE,))
USERS = {"alice-token": ALICE, "bob-token": BOB, "autoscaler-token": AUTOSCALER,
         "carol-token": CAROL, "dave-token": DAVE, "alice-raygate-token": ALICE_FOR_RAYGATE}
TOKENS = (*USERS, "nobody-token", "raygate-test-token")
"""Every secret in play, raygate's own included: none may appear in a log or a reply."""

HEAD_A = make_pod("rc-a-head", "team-a").head("rc-a").on("cpu-1").obj()
HEAD_B = make_pod("rc-b-head", "team-b").head("rc-b").on("cpu-1").obj()
OBJECTS: tuple[Obj, ...] = (
    make_node("cpu-1").obj(), make_node("gpu-1").gpus(8).obj(),
    make_raycluster("rc-a", "team-a").obj(), make_raycluster("rc-b", "team-b").obj(),
    HEAD_A, HEAD_B,
)


def populate(double: ApiServerDouble) -> None:
    double.users.update(USERS)
    # As a RoleBinding to deploy/base's raygate-status-reader in team-a: get and list.
    double.grant("alice", "get", RAYCLUSTERS, "team-a")
    double.grant("alice", "list", RAYCLUSTERS, "team-a")
    double.grant("carol", "get", RAYCLUSTERS, "team-a")
    double.grant("dave", "get", RAYCLUSTERS, "team-a", name="rc-a")
    # Cluster-wide, as a ClusterRoleBinding to deploy/base's raygate-status-reader: list
    # does not imply get in RBAC, so the role has both.
    double.grant("bob", "get", RAYCLUSTERS)
    double.grant("bob", "list", RAYCLUSTERS)
    double.grant("system:serviceaccounts:team-b", "get", RAYCLUSTERS, "team-b")


@dataclass
class Env:
    double: ApiServerDouble
    authorizer: Authorizer
    server: ServerThread
    clock: FakeClock
    http: httpx.Client
    channel: grpc.Channel

    def get(self, path: str, auth: str | None) -> httpx.Response:
        return self.http.get(path, headers=_auth(auth))

    def admission(self) -> admission_pb2_grpc.AdmissionStub:
        return admission_pb2_grpc.AdmissionStub(self.channel)

    def reviews(self) -> tuple[int, int]:
        """(TokenReviews, SubjectAccessReviews) the double has received."""
        return self.double.review_count(TOKEN_REVIEWS), self.double.review_count(ACCESS_REVIEWS)


def _auth(value: str | None) -> dict[str, str]:
    return {} if value is None else {"Authorization": value}


def _metadata(value: str | None) -> tuple[tuple[str, str], ...]:
    return () if value is None else (("authorization", value),)


def make_env(tmp_path: Path, **options: Any) -> Iterator[Env]:
    double = ApiServerDouble().start()
    populate(double)
    clock = FakeClock(0.0)  # the authorizer's: the cache's expiry, and nothing else
    connection = load_connection(str(double.kubeconfig(tmp_path / "kubeconfig")), None, {})
    authorizer = Authorizer.from_connection(connection, CACHE_SECONDS, clock=clock, **options)
    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(*OBJECTS))
    server = ServerThread(cache, FakeClock(), authorizer=authorizer)
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=WAIT) as http, \
                grpc.insecure_channel(server.grpc_target) as channel:
            yield Env(double, authorizer, server, clock, http, channel)
    finally:
        server.stop()
        authorizer.close()
        double.stop()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One environment for the tables: their answers do not depend on the cache."""
    yield from make_env(tmp_path_factory.mktemp("authz"))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A fresh environment: empty caches, review counts from zero."""
    yield from make_env(tmp_path)


# --- HTTP -------------------------------------------------------------------------------

A_STATUS = "/v1/namespaces/team-a/rayclusters/rc-a/admission"
B_STATUS = "/v1/namespaces/team-b/rayclusters/rc-b/admission"
A_EXPLAIN = "/v1/namespaces/team-a/pods/rc-a-head/explain"
B_EXPLAIN = "/v1/namespaces/team-b/pods/rc-b-head/explain"


@dataclass(frozen=True)
class HttpCase:
    id: str
    path: str
    auth: str | None
    status: int
    method: str = "GET"
    body: bytes = b""
    denied: str = ""
    """For a 403: the access the message must name."""


EXPLAIN_BODY = json.dumps({"pod": HEAD_A}).encode()
HTTP_CASES = [
    # Who you are.
    HttpCase("no-token", A_STATUS, None, 401),
    HttpCase("unknown-token", A_STATUS, "Bearer nobody-token", 401),
    HttpCase("basic-auth", A_STATUS, "Basic YWxpY2U6cHc=", 401),
    HttpCase("empty-bearer", A_STATUS, "Bearer", 401),
    HttpCase("two-tokens", A_STATUS, "Bearer alice-token, Bearer bob-token", 401),
    HttpCase("scheme-any-case", A_STATUS, "bearer alice-token", 200),
    # One namespace: get on rayclusters there.
    HttpCase("own-namespace", A_STATUS, "Bearer alice-token", 200),
    HttpCase("other-namespace", B_STATUS, "Bearer alice-token", 403,
             denied='user "alice" may not get rayclusters.ray.io "rc-b" in namespace "team-b"'),
    HttpCase("cluster-wide-grant-covers-a-namespace", B_STATUS, "Bearer bob-token", 200),
    HttpCase("service-account-by-group", B_STATUS, "Bearer autoscaler-token", 200),
    HttpCase("service-account-elsewhere", A_STATUS, "Bearer autoscaler-token", 403,
             denied='get rayclusters.ray.io "rc-a" in namespace "team-a"'),
    HttpCase("unknown-cluster-still-checked", "/v1/namespaces/team-c/rayclusters/x/admission",
             "Bearer alice-token", 403),
    HttpCase("allowed-unknown-cluster", "/v1/namespaces/team-a/rayclusters/x/admission",
             "Bearer alice-token", 404),
    # One cluster is a get of its name: a Role with resourceNames allows that name only.
    HttpCase("resource-names", A_STATUS, "Bearer dave-token", 200),
    HttpCase("resource-names-other-cluster", "/v1/namespaces/team-a/rayclusters/x/admission",
             "Bearer dave-token", 403,
             denied='user "dave" may not get rayclusters.ray.io "x" in namespace "team-a"'),
    HttpCase("get-without-list", A_STATUS, "Bearer carol-token", 200),
    # Every namespace: list on rayclusters cluster-wide.
    HttpCase("list-all-needs-cluster-wide", "/v1/admission", "Bearer alice-token", 403,
             denied='user "alice" may not list rayclusters.ray.io cluster-wide'),
    HttpCase("list-all", "/v1/admission", "Bearer bob-token", 200),
    HttpCase("list-own-namespace", "/v1/admission?namespace=team-a", "Bearer alice-token", 200),
    # Enumerating a namespace is RBAC's list there: get is not enough.
    HttpCase("list-namespace-needs-list", "/v1/admission?namespace=team-a", "Bearer carol-token",
             403, denied='user "carol" may not list rayclusters.ray.io in namespace "team-a"'),
    HttpCase("list-namespace-not-by-name", "/v1/admission?namespace=team-a",
             "Bearer dave-token", 403),
    HttpCase("list-other-namespace", "/v1/admission?namespace=team-b", "Bearer alice-token",
             403),
    HttpCase("list-empty-namespace-is-all", "/v1/admission?namespace=", "Bearer alice-token",
             403),
    HttpCase("list-first-namespace-counts", "/v1/admission?namespace=team-b&namespace=team-a",
             "Bearer alice-token", 403),
    # Explain.
    HttpCase("explain-own", A_EXPLAIN, "Bearer alice-token", 200),
    HttpCase("explain-other", B_EXPLAIN, "Bearer alice-token", 403),
    HttpCase("explain-no-token", A_EXPLAIN, None, 401),
    # A pod's name is not a RayCluster's: explain asks get in the namespace, unnamed.
    HttpCase("explain-with-get", A_EXPLAIN, "Bearer carol-token", 200),
    HttpCase("explain-not-by-cluster-name", A_EXPLAIN, "Bearer dave-token", 403,
             denied='user "dave" may not get rayclusters.ray.io in namespace "team-a"'),
    HttpCase("post-explain-needs-cluster-wide", "/v1/explain", "Bearer alice-token", 403,
             method="POST", body=EXPLAIN_BODY, denied="list rayclusters.ray.io cluster-wide"),
    # The query is not the handler's: it cannot narrow what the check asks for.
    HttpCase("post-explain-query-ignored", "/v1/explain?namespace=team-a",
             "Bearer alice-token", 403, method="POST", body=EXPLAIN_BODY),
    HttpCase("post-explain", "/v1/explain", "Bearer bob-token", 200, method="POST",
             body=EXPLAIN_BODY),
    HttpCase("post-explain-bad-body", "/v1/explain", "Bearer bob-token", 400, method="POST",
             body=b"{"),
    HttpCase("post-explain-unchecked-body-first", "/v1/explain", None, 401, method="POST",
             body=b"{"),
    HttpCase("post-explain-wrong-method", "/v1/explain", "Bearer bob-token", 405),
    # Not guarded: probes, the API's description, metrics, and the schedulers' verbs
    # (kube-scheduler and Volcano present no token).
    HttpCase("healthz", "/healthz", None, 200),
    HttpCase("metrics", "/metrics", None, 200),
    HttpCase("scheduler-filter", "/scheduler/filter", None, 200, method="POST", body=b"{}"),
    HttpCase("readyz", "/readyz", None, 200),
    HttpCase("openapi", "/openapi.json", None, 200),
]


@pytest.mark.parametrize("case", HTTP_CASES, ids=[c.id for c in HTTP_CASES])
def test_http(shared: Env, case: HttpCase) -> None:
    reply = shared.http.request(case.method, case.path, headers=_auth(case.auth),
                                content=case.body)
    assert reply.status_code == case.status, reply.text
    for token in TOKENS:
        assert token not in reply.text
    if case.status == 401:
        assert reply.headers["www-authenticate"] == 'Bearer realm="raygate"'
    else:
        assert "www-authenticate" not in reply.headers
    if case.status in (401, 403):
        error = reply.json()["error"]
        assert (error["code"], error["reason"]) == (
            case.status, {401: "Unauthorized", 403: "Forbidden"}[case.status])
        assert case.denied in error["message"]


def test_http_answers_are_the_handlers_own(shared: Env) -> None:
    """Guarded, a route answers exactly as it does unguarded: ETags and 304s included."""
    alice = _auth("Bearer alice-token")
    first = shared.http.get(A_STATUS, headers=alice)
    assert first.status_code == 200 and first.json()["metadata"]["name"] == "rc-a"
    etag = first.headers["etag"]
    again = shared.http.get(A_STATUS, headers={**alice, "If-None-Match": etag})
    assert again.status_code == 304
    listed = shared.http.get("/v1/admission?namespace=team-a", headers=alice).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["rc-a"]
    everything = shared.http.get("/v1/admission", headers=_auth("Bearer bob-token")).json()
    assert [i["metadata"]["name"] for i in everything["items"]] == ["rc-a", "rc-b"]
    explained = shared.http.post("/v1/explain", content=EXPLAIN_BODY,
                                 headers=_auth("Bearer bob-token")).json()
    assert explained["pod"] == "team-a/rc-a-head"


def test_reviews_carry_what_rbac_needs(env: Env) -> None:
    assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
    assert env.get("/v1/admission", "Bearer alice-token").status_code == 403
    assert env.get("/v1/admission?namespace=team-a", "Bearer alice-token").status_code == 200
    assert env.get(A_EXPLAIN, "Bearer alice-token").status_code == 200
    (_, token_review), = [r for r in env.double.reviews if r[0] == TOKEN_REVIEWS]
    assert token_review == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                            "spec": {"token": "alice-token"}}
    specs = [body["spec"] for path, body in env.double.reviews if path == ACCESS_REVIEWS]
    who = {"user": "alice", "uid": "u-alice", "groups": ["system:authenticated"],
           "extra": {"scopes.example.com": ["status"]}}
    rayclusters = {"group": "ray.io", "resource": "rayclusters"}
    assert specs == [
        # One cluster: get, named (so a Role's resourceNames can match).
        {"resourceAttributes": {"verb": "get", **rayclusters, "namespace": "team-a",
                                "name": "rc-a"}, **who},
        # A SubjectAccessReview's empty namespace is "all namespaces": left out.
        {"resourceAttributes": {"verb": "list", **rayclusters}, **who},
        {"resourceAttributes": {"verb": "list", **rayclusters, "namespace": "team-a"}, **who},
        # A pod explained: get in its namespace, no name (a pod's is not a RayCluster's).
        {"resourceAttributes": {"verb": "get", **rayclusters, "namespace": "team-a"}, **who},
    ]


# --- gRPC -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrpcCase:
    id: str
    method: str
    request: Any
    auth: str | None
    code: grpc.StatusCode


OK = grpc.StatusCode.OK
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED
GET_A = apb.GetRequest(namespace="team-a", name="rc-a")
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


def _call(env: Env, case: GrpcCase) -> tuple[grpc.StatusCode, str]:
    metadata = _metadata(case.auth)
    try:
        if case.method == "Explain":
            explain_pb2_grpc.ExplainStub(env.channel).Explain(
                case.request, metadata=metadata, timeout=WAIT)
        elif case.method == "Watch":
            stream = env.admission().Watch(case.request, metadata=metadata, timeout=WAIT)
            first = next(stream)
            stream.cancel()
            assert first.type == apb.WatchEvent.ADDED
        else:
            getattr(env.admission(), case.method)(case.request, metadata=metadata,
                                                  timeout=WAIT)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return OK, ""


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c.id for c in GRPC_CASES])
def test_grpc(shared: Env, case: GrpcCase) -> None:
    code, details = _call(shared, case)
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
    status = shared.admission().Get(GET_A, metadata=_metadata("Bearer alice-token"),
                                    timeout=WAIT)
    assert (status.metadata.namespace, status.metadata.name) == ("team-a", "rc-a")
    # The servicer's own errors come through unchanged once the caller is let in.
    code, details = _call(shared, GrpcCase("unknown", "Get",
                                           apb.GetRequest(namespace="team-a", name="nope"),
                                           "Bearer alice-token", OK))
    assert code == grpc.StatusCode.NOT_FOUND and "team-a/nope" in details


# --- the cache --------------------------------------------------------------------------


def test_answers_are_cached_for_their_time(env: Env) -> None:
    alice = "Bearer alice-token"
    for _ in range(5):
        assert env.get(A_STATUS, alice).status_code == 200
    assert env.reviews() == (1, 1)
    # The same user and access over gRPC: the same cache.
    assert _call(env, GrpcCase("", "Get", GET_A, alice, OK))[0] == OK
    assert env.reviews() == (1, 1)
    # Another namespace: the user is known, the access is new. Denials are cached too.
    for _ in range(3):
        assert env.get(B_STATUS, alice).status_code == 403
    assert env.reviews() == (1, 2)
    # Denials expire first (half the time): a new RoleBinding works sooner.
    env.clock.now += CACHE_SECONDS / 2 + 0.1
    assert env.get(B_STATUS, alice).status_code == 403
    assert env.get(A_STATUS, alice).status_code == 200
    assert env.reviews() == (1, 3)
    env.double.grant("alice", "get", RAYCLUSTERS, "team-b")
    env.clock.now += CACHE_SECONDS / 2 + 0.1
    assert env.get(B_STATUS, alice).status_code == 200
    assert env.get(A_STATUS, alice).status_code == 200
    assert env.reviews() == (2, 5)
    assert env.authorizer.counts.cache_hits["tokenreview"] == 11
    assert env.authorizer.counts.decisions == {"allowed": 9, "forbidden": 4}


def test_rejected_tokens_are_cached_briefly(env: Env) -> None:
    for _ in range(3):
        assert env.get(A_STATUS, "Bearer nobody-token").status_code == 401
    assert env.reviews() == (1, 0)
    env.double.users["nobody-token"] = BOB  # the token becomes valid (a new account)
    env.clock.now += CACHE_SECONDS / 2 + 0.1
    assert env.get(B_STATUS, "Bearer nobody-token").status_code == 200
    assert env.reviews() == (2, 1)


def test_nothing_is_cached_with_zero_seconds(tmp_path: Path) -> None:
    for env in make_env(tmp_path, denied_cache_seconds=0.0):
        env.authorizer.cache_seconds = 0.0
        for _ in range(3):
            assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
        assert env.reviews() == (3, 3)


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    for env in make_env(tmp_path, max_entries=2):
        for token in ("alice-token", "bob-token", "autoscaler-token", "alice-token"):
            env.get(B_STATUS, f"Bearer {token}")
        # alice was the least recently used of three: evicted, reviewed again.
        assert env.double.review_count(TOKEN_REVIEWS) == 4
        env.get(B_STATUS, "Bearer autoscaler-token")
        assert env.double.review_count(TOKEN_REVIEWS) == 4


R = TypeVar("R")


def on_server_loop(env: Env, work: Coroutine[Any, Any, R]) -> R:
    """Run ``work`` on the event loop the servers (and so the authorizer) run on."""
    return asyncio.run_coroutine_threadsafe(work, env.server.loop).result(WAIT)


def test_identical_reviews_in_flight_share_one_call(env: Env) -> None:
    """Eight callers at once with the same token, while the API server holds the first
    review: one TokenReview, one SubjectAccessReview, eight answers."""
    env.double.review_gate.clear()
    authorizer = env.authorizer

    async def burst() -> list[User]:
        calls = [asyncio.ensure_future(authorizer.authorize("alice-token", Access.to("team-a")))
                 for _ in range(8)]
        await asyncio.sleep(0)  # every call has started and found no cached answer
        loop = asyncio.get_running_loop()
        # Only the first review has reached the double; then let it answer.
        while env.double.review_count(TOKEN_REVIEWS) < 1:
            await asyncio.sleep(0.005)
        await loop.run_in_executor(None, env.double.review_gate.set)
        return await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    users = on_server_loop(env, burst())
    assert {u.name for u in users} == {"alice"} and len(users) == 8
    assert env.reviews() == (1, 1)
    assert authorizer.counts.reviews == {("tokenreview", "ok"): 1,
                                         ("subjectaccessreview", "ok"): 1}


# --- the API server cannot answer -------------------------------------------------------


def test_api_server_down_fails_closed_and_serves_on(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
    env.double.stop()
    with caplog.at_level(logging.WARNING, "raygate.authz"):
        reply = env.get(B_STATUS, "Bearer bob-token")
        assert reply.status_code == 503
        assert reply.json()["error"]["message"].startswith("cannot verify the caller")
        code, details = _call(env, GrpcCase("", "Get", GET_A, "Bearer bob-token", OK))
        assert code == grpc.StatusCode.UNAVAILABLE and "cannot verify" in details
    assert any("cannot verify a caller" in r.getMessage() for r in caplog.records)
    # Still serving: unguarded routes, and callers verified before the outage.
    assert env.get("/healthz", None).status_code == 200
    assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
    counts = env.authorizer.counts
    assert counts.decisions["unavailable"] == 2
    assert counts.reviews[("tokenreview", "error")] == 2
    # Back: nothing unavailable was cached.
    env.double.start()
    assert env.get(B_STATUS, "Bearer bob-token").status_code == 200


@pytest.mark.parametrize(("failure", "hint"), [
    ((TOKEN_REVIEWS, 403, "Forbidden"), "ClusterRole needs create on tokenreviews"),
    ((ACCESS_REVIEWS, 403, "Forbidden"), "ClusterRole needs create on tokenreviews"),
    ((TOKEN_REVIEWS, 500, "InternalError"), "500: injected failure"),
    ((ACCESS_REVIEWS, 429, "TooManyRequests"), "429: injected failure"),
], ids=["no-rbac-tokenreviews", "no-rbac-sar", "server-error", "throttled"])
def test_api_server_errors_fail_closed(env: Env, caplog: pytest.LogCaptureFixture,
                                       failure: tuple[str, int, str], hint: str) -> None:
    path, code, reason = failure
    env.double.fail_path(path, code, reason=reason)
    with caplog.at_level(logging.WARNING, "raygate.authz"):
        assert env.get(A_STATUS, "Bearer alice-token").status_code == 503
    (record,) = [r for r in caplog.records if r.name == "raygate.authz"]
    assert hint in record.getMessage()
    assert env.get(A_STATUS, "Bearer alice-token").status_code == 200


def test_the_token_is_never_logged(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    env.get(A_STATUS, "Bearer alice-token")
    env.get(B_STATUS, "Bearer alice-token")
    env.get(A_STATUS, "Bearer nobody-token")
    env.get(A_STATUS, "Bearer autoscaler-token")
    _call(env, GrpcCase("", "List", apb.ListRequest(), "Bearer bob-token", OK))
    _call(env, GrpcCase("", "Get", GET_A, "Bearer nobody-token", OK))
    env.double.fail_path(TOKEN_REVIEWS, 500)
    env.clock.now += 2 * CACHE_SECONDS
    env.get(A_STATUS, "Bearer alice-token")
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert "denied" in logged and "cannot verify a caller" in logged  # something was logged
    for token in TOKENS:
        assert token not in logged
    # Nor kept: the cache is keyed by the token's SHA-256.
    users = env.authorizer._users
    keys = [*users.positive._entries, *users.negative._entries]
    assert keys and all(len(k) == 32 for k in keys)
    assert not {t.encode() for t in TOKENS} & set(keys)


class _ExplodingReviewer(KubeReviewer):
    """The real reviewer, but its TokenReview fails in a way nobody foresaw, with the
    caller's token in the exception's message."""

    def review_token(self, token: str, audiences: tuple[str, ...] = ()) -> User | None:
        raise ValueError(f"cannot encode {token!r}")


def _failing_refresh(_: Any) -> None:
    # What the kubernetes client's in-cluster loader raises when raygate's own service
    # account token cannot be read again.
    raise ConfigException("Token file exists but empty.")


@pytest.mark.parametrize("failure", ["token-refresh", "unforeseen"])
def test_any_review_failure_fails_closed(env: Env, caplog: pytest.LogCaptureFixture,
                                         failure: str) -> None:
    """Whatever breaks while reviewing (here: the client's refresh of raygate's own token,
    in ``param_serialize``; an unexpected exception) is a 503 / UNAVAILABLE for every
    caller waiting on that review, logged once, never with the token."""
    reviewer = cast(KubeReviewer, env.authorizer.reviewer)
    if failure == "token-refresh":
        reviewer.api.configuration.refresh_api_key_hook = _failing_refresh
    else:
        env.authorizer.reviewer = _ExplodingReviewer(
            Connection(reviewer.api.configuration, reviewer.where))
        reviewer.close()
    authorizer = env.authorizer

    async def burst() -> list[BaseException | User]:
        return await asyncio.gather(
            *(authorizer.authorize("alice-token", Access.one("team-a", "rc-a"))
              for _ in range(4)), return_exceptions=True)

    with caplog.at_level(logging.DEBUG, "raygate.authz"):
        answers = on_server_loop(env, burst())
        reply = env.get(A_STATUS, "Bearer alice-token")
        code, details = _call(env, GrpcCase("", "Get", GET_A, "Bearer alice-token", OK))
    assert all(isinstance(a, Unavailable) for a in answers), answers
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["message"].startswith("cannot verify the caller")
    assert code == grpc.StatusCode.UNAVAILABLE and "cannot verify" in details
    # One review for the four callers at once, then one per request.
    records = [r for r in caplog.records if "cannot verify a caller" in r.getMessage()]
    assert len(records) == 3
    assert ("Token file exists but empty" if failure == "token-refresh"
            else "ValueError") in records[0].getMessage()
    for record in records:
        assert "alice-token" not in record.getMessage()
    assert authorizer.counts.decisions == {"unavailable": 6}
    assert authorizer.counts.reviews == {("tokenreview", "error"): 3}


def test_reviews_in_flight_are_capped(tmp_path: Path) -> None:
    """With ``max_reviews`` reviews held by a slow API server, a new token is refused at
    once (503) instead of queueing; a caller already known is still answered from the
    cache; the held ones finish once the server answers."""
    for env in make_env(tmp_path, max_reviews=2):
        assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
        env.double.review_gate.clear()
        users, refused, known = on_server_loop(env, _flood(env))
        assert [u.name for u in users] == ["bob", AUTOSCALER.username]
        assert isinstance(refused, Unavailable) and "too many" in str(refused)
        assert known.name == "alice"
        assert env.double.review_count(TOKEN_REVIEWS) == 3  # alice, bob, autoscaler
        assert env.authorizer.counts.decisions == {"allowed": 4, "unavailable": 1}
        # Shed, not remembered: carol is reviewed once there is room.
        assert env.get(A_STATUS, "Bearer carol-token").status_code == 200


async def _flood(env: Env) -> tuple[list[User], BaseException | None, User]:
    """Two new tokens held in review, then a third, then one already known."""
    authorizer = env.authorizer
    held = [asyncio.ensure_future(authorizer.authorize(t, Access.one("team-b", "rc-b")))
            for t in ("bob-token", "autoscaler-token")]
    while len(authorizer._inflight) < 2:
        await asyncio.sleep(0.005)
    refused: BaseException | None = None
    try:
        await authorizer.authorize("carol-token", Access.one("team-a", "rc-a"))
    except Unavailable as exc:
        refused = exc
    known = await authorizer.authorize("alice-token", Access.one("team-a", "rc-a"))
    await asyncio.get_running_loop().run_in_executor(None, env.double.review_gate.set)
    return await asyncio.wait_for(asyncio.gather(*held), WAIT), refused, known


def test_rejected_tokens_do_not_evict_real_users(tmp_path: Path) -> None:
    for env in make_env(tmp_path, max_entries=2, max_negative=2):
        assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
        for i in range(10):
            assert env.get(A_STATUS, f"Bearer forged-{i}").status_code == 401
        assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
        assert env.double.review_count(TOKEN_REVIEWS) == 11  # alice once, from the cache after
        users = env.authorizer._users
        assert (len(users.positive._entries), len(users.negative._entries)) == (1, 2)


# --- a Watch outliving its access -------------------------------------------------------


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
                                   metadata=_metadata("Bearer alice-token"), timeout=WAIT)
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


# --- token audiences --------------------------------------------------------------------


@dataclass(frozen=True)
class AudienceCase:
    id: str
    audiences: tuple[str, ...]
    """raygate's ``audiences``."""
    token: str
    status: int
    aware: bool = True
    """False: the authenticator ignores spec.audiences (no status.audiences)."""


AUDIENCE_CASES = [
    AudienceCase("none-api-server-token", (), "alice-token", 200),
    # Without audiences raygate asks for the API server's own: a raygate-only token fails.
    AudienceCase("none-raygate-token", (), "alice-raygate-token", 401),
    AudienceCase("raygate-token", (RAYGATE_AUDIENCE,), "alice-raygate-token", 200),
    # A full API-server token is not one raygate accepts once it names its audience.
    AudienceCase("api-server-token-refused", (RAYGATE_AUDIENCE,), "alice-token", 401),
    AudienceCase("one-of-several", ("other", RAYGATE_AUDIENCE), "alice-raygate-token", 200),
    # An authenticator that ignored the audiences vouches only for the API server's.
    AudienceCase("unaware-authenticator", (RAYGATE_AUDIENCE,), "alice-raygate-token", 401,
                 aware=False),
    AudienceCase("unaware-authenticator-api-token", (RAYGATE_AUDIENCE,), "alice-token", 401,
                 aware=False),
]


@pytest.mark.parametrize("case", AUDIENCE_CASES, ids=[c.id for c in AUDIENCE_CASES])
def test_token_audiences(tmp_path: Path, case: AudienceCase) -> None:
    for env in make_env(tmp_path, audiences=case.audiences):
        env.double.audience_aware = case.aware
        reply = env.get(A_STATUS, f"Bearer {case.token}")
        assert reply.status_code == case.status, reply.text
        (_, review), = [r for r in env.double.reviews if r[0] == TOKEN_REVIEWS]
        spec: dict[str, Any] = {"token": case.token}
        if case.audiences:
            spec["audiences"] = list(case.audiences)
        assert review["spec"] == spec


def test_the_double_answers_audiences_as_kube_apiserver() -> None:
    """status.audiences: those asked for (the API server's own when none) that the token
    is valid for; none in common is unauthenticated, with the reason in status.error."""
    double = ApiServerDouble().start()
    try:
        populate(double)
        answers = []
        for token, audiences in (("alice-token", []), ("alice-raygate-token",
                                                       ["x", RAYGATE_AUDIENCE]),
                                 ("alice-raygate-token", [])):
            spec: dict[str, Any] = {"token": token}
            if audiences:
                spec["audiences"] = audiences
            reply = httpx.post(f"{double.url}{TOKEN_REVIEWS}", json={
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": spec}, headers={"Authorization": f"Bearer {double.token}"})
            answers.append(reply.json()["status"])
        assert answers[0]["authenticated"] and answers[0]["audiences"] == list(API_AUDIENCES)
        assert answers[1]["authenticated"] and answers[1]["audiences"] == [RAYGATE_AUDIENCE]
        assert "authenticated" not in answers[2] and "audiences" not in answers[2]
        assert "invalid for the target audiences" in answers[2]["error"]
    finally:
        double.stop()


# --- pieces -----------------------------------------------------------------------------


@pytest.mark.parametrize(("header", "token"), [
    (None, None),
    (b"Bearer abc", "abc"),
    ("Bearer abc", "abc"),
    (b"bearer abc", "abc"),
    (b"BEARER  abc ", "abc"),
    (b"Bearer", None),
    (b"Bearer ", None),
    (b"Basic abc", None),
    (b"abc", None),
    (b"Bearer a b", None),
    (b"Bearer a, Bearer b", None),  # two headers, joined
    (b"Bearer \xff\xfe", "\xff\xfe"),  # opaque bytes: the API server judges them
])
def test_bearer_token(header: bytes | str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize(("made", "access", "words"), [
    (Access.one("team-a", "rc-a"), Access("get", "team-a", "rc-a"),
     'get rayclusters.ray.io "rc-a" in namespace "team-a"'),
    # No namespace: no single cluster to name.
    (Access.one("", "rc-a"), Access("list", ""), "list rayclusters.ray.io cluster-wide"),
    (Access.listing("team-a"), Access("list", "team-a"),
     'list rayclusters.ray.io in namespace "team-a"'),
    (Access.listing(""), Access("list", ""), "list rayclusters.ray.io cluster-wide"),
    (Access.to("team-a"), Access("get", "team-a"), 'get rayclusters.ray.io in namespace "team-a"'),
    (Access.to(""), Access("list", ""), "list rayclusters.ray.io cluster-wide"),
], ids=["one", "one-without-namespace", "listing", "listing-all", "to", "to-all"])
def test_access(made: Access, access: Access, words: str) -> None:
    assert made == access
    assert access.describe() == words


# --- raygate's own clients --------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_the_clients_send_the_token_of_their_file_read_on_every_call(
    shared: Env, tmp_path: Path, transport: str
) -> None:
    """The autoscaler's client reads its service account token from a file (rotated by
    the kubelet) and sends it; without one, raygate's refusal is a typed error."""
    token = tmp_path / "token"
    token.write_text("autoscaler-token\n")
    target = (shared.server.url if transport == "http"
              else f"grpc://{shared.server.grpc_target}")
    with connect(target, timeout=WAIT, token=token_file(str(token))) as client:
        assert client.get("team-b", "rc-b").metadata.name == "rc-b"
        with pytest.raises(Forbidden, match="team-a"):
            client.get("team-a", "rc-a")
        token.write_text("alice-token")  # rotated: the next call sends the new one
        assert client.get("team-a", "rc-a").metadata.name == "rc-a"
        token.unlink()
        with pytest.raises(Unauthorized):
            client.get("team-a", "rc-a")
