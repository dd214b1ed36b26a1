"""Delegated authentication and authorization of the status endpoints over HTTP: who may
read what (a table), the handlers' own answers once let in, and what each review asks."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from testkit.apiserver import (
    ACCESS_REVIEWS,
    TOKEN_REVIEWS,
)
from tests.server.authz.harness import (
    A_EXPLAIN,
    A_STATUS,
    B_EXPLAIN,
    B_STATUS,
    HEAD_A,
    TOKENS,
    Env,
    auth_headers,
)


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
    reply = shared.http.request(case.method, case.path, headers=auth_headers(case.auth),
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
    alice = auth_headers("Bearer alice-token")
    first = shared.http.get(A_STATUS, headers=alice)
    assert first.status_code == 200 and first.json()["metadata"]["name"] == "rc-a"
    etag = first.headers["etag"]
    again = shared.http.get(A_STATUS, headers={**alice, "If-None-Match": etag})
    assert again.status_code == 304
    listed = shared.http.get("/v1/admission?namespace=team-a", headers=alice).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["rc-a"]
    everything = shared.http.get("/v1/admission", headers=auth_headers("Bearer bob-token")).json()
    assert [i["metadata"]["name"] for i in everything["items"]] == ["rc-a", "rc-b"]
    explained = shared.http.post("/v1/explain", content=EXPLAIN_BODY,
                                 headers=auth_headers("Bearer bob-token")).json()
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
