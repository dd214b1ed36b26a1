"""What the authz tests share: raygate's real HTTP and gRPC servers (``build_server(...,
authorizer=...)``) on loopback, the real ``kubernetes`` client through a generated
kubeconfig, and the API-server double answering TokenReviews and SubjectAccessReviews
from its token and grant tables; the users, their grants, and a gRPC call by name.

No test waits for time to pass: cache expiry moves an injected clock, and a review held
back by the double is released by the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx

from raygate.contract.proto.raygate.v1 import admission_pb2 as apb
from raygate.contract.proto.raygate.v1 import admission_pb2_grpc, explain_pb2_grpc
from raygate.policy.config import PolicyConfig
from raygate.server.authz.authorizer import Authorizer
from raygate.server.cache.cluster import ClusterCache
from raygate.server.kube.client import load_connection
from testkit.apiserver import (
    ACCESS_REVIEWS,
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
        return self.http.get(path, headers=auth_headers(auth))

    def admission(self) -> admission_pb2_grpc.AdmissionStub:
        return admission_pb2_grpc.AdmissionStub(self.channel)

    def reviews(self) -> tuple[int, int]:
        """(TokenReviews, SubjectAccessReviews) the double has received."""
        return self.double.review_count(TOKEN_REVIEWS), self.double.review_count(ACCESS_REVIEWS)


def auth_headers(value: str | None) -> dict[str, str]:
    return {} if value is None else {"Authorization": value}


def auth_metadata(value: str | None) -> tuple[tuple[str, str], ...]:
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


A_STATUS = "/v1/namespaces/team-a/rayclusters/rc-a/admission"
B_STATUS = "/v1/namespaces/team-b/rayclusters/rc-b/admission"
A_EXPLAIN = "/v1/namespaces/team-a/pods/rc-a-head/explain"
B_EXPLAIN = "/v1/namespaces/team-b/pods/rc-b-head/explain"


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


def call(env: Env, case: GrpcCase) -> tuple[grpc.StatusCode, str]:
    metadata = auth_metadata(case.auth)
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


R = TypeVar("R")


def on_server_loop(env: Env, work: Coroutine[Any, Any, R]) -> R:
    """Run ``work`` on the event loop the servers (and so the authorizer) run on."""
    return asyncio.run_coroutine_threadsafe(work, env.server.loop).result(WAIT)
