"""Tokens: their audiences, the bearer header, the access each route asks for, and
raygate's own clients sending the token of their file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from raygate.client import connect, token_file
from raygate.contract.errors import Forbidden, Unauthorized
from raygate.server.authz.authorizer import bearer_token
from raygate.server.kube.reviews import Access
from testkit.apiserver import (
    API_AUDIENCES,
    TOKEN_REVIEWS,
    ApiServerDouble,
)
from tests.server.authz.harness import A_STATUS, RAYGATE_AUDIENCE, WAIT, Env, make_env, populate


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
