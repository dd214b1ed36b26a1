"""When the API server cannot answer a review: every caller is refused (503 /
UNAVAILABLE), the server serves on, and no token reaches a log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import grpc
import pytest
from kubernetes.config.config_exception import ConfigException

from raygate.contract.errors import Unavailable
from raygate.contract.proto.raygate.v1 import admission_pb2 as apb
from raygate.server.kube.client import Connection
from raygate.server.kube.reviews import Access, KubeReviewer, User
from testkit.apiserver import (
    ACCESS_REVIEWS,
    TOKEN_REVIEWS,
)
from tests.server.authz.harness import (
    A_STATUS,
    B_STATUS,
    CACHE_SECONDS,
    GET_A,
    OK,
    TOKENS,
    Env,
    GrpcCase,
    call,
    on_server_loop,
)


def test_api_server_down_fails_closed_and_serves_on(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    assert env.get(A_STATUS, "Bearer alice-token").status_code == 200
    env.double.stop()
    with caplog.at_level(logging.WARNING, "raygate.authz"):
        reply = env.get(B_STATUS, "Bearer bob-token")
        assert reply.status_code == 503
        assert reply.json()["error"]["message"].startswith("cannot verify the caller")
        code, details = call(env, GrpcCase("", "Get", GET_A, "Bearer bob-token", OK))
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
    call(env, GrpcCase("", "List", apb.ListRequest(), "Bearer bob-token", OK))
    call(env, GrpcCase("", "Get", GET_A, "Bearer nobody-token", OK))
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
        code, details = call(env, GrpcCase("", "Get", GET_A, "Bearer alice-token", OK))
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
