"""The authorizer's cache and its reviews in flight: answers kept for their time, denials
and rejected tokens shorter, bounded; identical reviews share one call; a cap on the
reviews waiting on a slow API server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raygate.contract.errors import Unavailable
from raygate.server.kube.reviews import Access, User
from testkit.apiserver import (
    TOKEN_REVIEWS,
)
from tests.server.authz.harness import (
    A_STATUS,
    AUTOSCALER,
    B_STATUS,
    BOB,
    CACHE_SECONDS,
    GET_A,
    OK,
    RAYCLUSTERS,
    WAIT,
    Env,
    GrpcCase,
    call,
    make_env,
    on_server_loop,
)


def test_answers_are_cached_for_their_time(env: Env) -> None:
    alice = "Bearer alice-token"
    for _ in range(5):
        assert env.get(A_STATUS, alice).status_code == 200
    assert env.reviews() == (1, 1)
    # The same user and access over gRPC: the same cache.
    assert call(env, GrpcCase("", "Get", GET_A, alice, OK))[0] == OK
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
