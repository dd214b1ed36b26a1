"""Who may read admission status and explanations: delegated authentication and
authorization, as Kubernetes components (kubelet, metrics-server) do it.

A caller presents a bearer token: HTTP ``Authorization: Bearer <token>``, gRPC
``authorization`` metadata of the same form. raygate asks the API server who that is (a
TokenReview) and whether that user may read RayClusters where it asks (a
SubjectAccessReview). The access asked for, on ``rayclusters.ray.io``, is RBAC's:

* one RayCluster (``/v1/namespaces/{ns}/rayclusters/{name}/admission``, gRPC ``Get``,
  ``Watch`` with a name): ``get`` that name in its namespace (a Role with
  ``resourceNames`` can allow it);
* every RayCluster of one namespace (``GET /v1/admission?namespace=ns``, gRPC ``List``
  and ``Watch`` with only a namespace): ``list`` in that namespace;
* one pod explained (``/v1/namespaces/{ns}/pods/{name}/explain``, gRPC ``Explain``):
  ``get`` in the pod's namespace, without a name (the name is a pod's, not a
  RayCluster's; RBAC's resourceNames could not express it);
* everything spanning every namespace (``GET /v1/admission`` without ``?namespace=``,
  ``POST /v1/explain``, whose pod comes in the body and is explained against every node,
  gRPC requests with an empty namespace): ``list`` cluster-wide.

With ``audiences``, the TokenReview asks for tokens meant for raygate
(``spec.audiences``) and a token counts only when the API server says it is valid for
one of them (``status.audiences``): callers need not hand raygate a token that would
also work against the API server.

Replies: no token, or one the TokenReview rejects: 401 (``WWW-Authenticate: Bearer``) /
UNAUTHENTICATED; authenticated but not allowed: 403 / PERMISSION_DENIED, naming the user,
verb, resource and namespace; the API server cannot answer: 503 / UNAVAILABLE (fail
closed: nobody is let in unverified), whatever went wrong; also at once when
``max_reviews`` reviews are already in flight (a flood of new tokens must not queue
without end). A gRPC ``Watch`` is checked again every ``cache_seconds`` while it streams
and ends when the access is gone.

Both answers are cached for ``cache_seconds`` (denials and rejected tokens for half as
long, so a new RoleBinding works sooner), in bounded LRU maps keyed by the SHA-256 of the
token and by (user, verb, namespace, name): the token itself is never a key, never
logged, never in a reply. Negative answers live in maps of their own, smaller, so a flood
of bad tokens evicts only other bad tokens, never a real user. Identical reviews in
flight at once share one API call. The API calls block, so they run on a small thread
pool of their own, off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

import grpc

from raygate.contract.errors import Forbidden, RaygateError, Unauthorized, Unavailable
from raygate.server.authz.answers import Answers, K
from raygate.server.authz.interceptor import Interceptor
from raygate.server.authz.tokens import bearer_token
from raygate.server.http.routes import AsyncRoute, Request, Response, Route, reply_for
from raygate.server.kube.client import Connection
from raygate.server.kube.reviews import (
    Access,
    AccessDecision,
    KubeReviewer,
    Reviewer,
    ReviewUnavailable,
    User,
)
from raygate.server.metrics.collectors import AuthzCounts

__all__ = [
    "Authorizer",
    "bearer_token",
]

log = logging.getLogger("raygate.authz")

NAMESPACE_QUERY_ROUTES = frozenset({"/v1/admission"})
"""HTTP routes whose handler narrows its answer to ``?namespace=`` (and reads it from the
same parsed ``Request``): those need ``list`` in that namespace only. Any other route
without a ``{namespace}`` path parameter needs cluster-wide ``list``, whatever its query
says."""
NAMED_CLUSTER_SEGMENT = "/rayclusters/{name}"
"""An HTTP route whose ``{name}`` follows this names one RayCluster (``get`` with the
name); any other ``{name}`` (a pod's) is not a RayCluster's name."""


# --- the cache --------------------------------------------------------------------------


T = TypeVar("T")

_OUTCOMES: tuple[tuple[type[RaygateError], str], ...] = (
    (Unauthorized, "unauthenticated"), (Forbidden, "forbidden"), (Unavailable, "unavailable"),
)
"""``AuthzCounts.decisions`` key of each refusal."""


# --- the authorizer ---------------------------------------------------------------------


class Authorizer:
    """``raygate.server.app.AccessGuard``: guards HTTP routes and gRPC methods."""

    def __init__(
        self,
        reviewer: Reviewer,
        cache_seconds: float,
        *,
        audiences: tuple[str, ...] = (),
        denied_cache_seconds: float | None = None,
        max_entries: int = 4096,
        max_negative: int = 1024,
        max_reviews: int = 64,
        workers: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reviewer = reviewer
        self.cache_seconds = cache_seconds
        self.audiences = audiences
        """Non-empty: only tokens the API server says are for one of these."""
        self.denied_cache_seconds = (cache_seconds / 2 if denied_cache_seconds is None
                                     else denied_cache_seconds)
        self.max_reviews = max_reviews
        """Reviews in flight at once (each a thread-pool job); beyond: 503 at once."""
        self.clock = clock
        self.counts = AuthzCounts()
        self._users: Answers[bytes, User | None] = Answers(max_entries, max_negative)
        self._access: Answers[tuple[User, Access], AccessDecision] = Answers(max_entries,
                                                                         max_negative)
        self._inflight: dict[Hashable, asyncio.Future[Any]] = {}
        # Its own threads: a slow API server must not hold up the loop's default executor.
        self._executor = ThreadPoolExecutor(max_workers=workers,
                                            thread_name_prefix="raygate-authz")

    @classmethod
    def from_connection(cls, connection: Connection, cache_seconds: float, *,
                        audiences: tuple[str, ...] = (), **options: Any) -> Authorizer:
        return cls(KubeReviewer(connection), cache_seconds, audiences=audiences, **options)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.reviewer.close()

    # --- the decision -------------------------------------------------------------------
    async def authorize(self, token: str | None, access: Access) -> User:
        """The caller, when it may have ``access``; else raises ``Unauthorized``,
        ``Forbidden`` or ``Unavailable``. Counts every outcome."""
        try:
            user = await self._authorize(token, access)
        except (Unauthorized, Forbidden, Unavailable) as exc:
            self.counts.decisions[next(o for t, o in _OUTCOMES if isinstance(exc, t))] += 1
            raise
        self.counts.decisions["allowed"] += 1
        return user

    async def _authorize(self, token: str | None, access: Access) -> User:
        if not token:
            raise Unauthorized("a bearer token is required: `authorization: Bearer <token>` "
                               "(an HTTP header, or gRPC metadata)")
        digest = hashlib.sha256(token.encode()).digest()
        user = await self._cached(
            "tokenreview", self._users, digest,
            lambda: self.reviewer.review_token(token, self.audiences),
            lambda u: u is not None, secret=token)
        if user is None:
            raise Unauthorized("the bearer token was not accepted by the Kubernetes API "
                               "server (TokenReview)")
        decision = await self._cached(
            "subjectaccessreview", self._access, (user, access),
            lambda: self._review_access(user, access), lambda d: d.allowed)
        if not decision.allowed:
            raise Forbidden(f'user "{user.name}" may not {access.describe()}')
        return user

    async def _cached(self, kind: str, cache: Answers[K, T], key: K,
                      review: Callable[[], T], positive: Callable[[T], bool], *,
                      secret: str = "") -> T:
        found, value = cache.get(key, self.clock())
        if found:
            self.counts.cache_hits[kind] += 1
            return cast(T, value)
        flight = (kind, key)
        pending = self._inflight.get(flight)
        if pending is None:
            if len(self._inflight) >= self.max_reviews:
                # Shed at once: queueing would let a flood of new tokens hold every
                # caller (and memory) behind it; a real caller retries.
                log.debug("%d reviews in flight: a new one refused", len(self._inflight))
                raise Unavailable("cannot verify the caller now: too many callers being "
                                  "verified at once; retry shortly")
            pending = asyncio.get_running_loop().create_task(
                self._review(kind, cache, key, review, positive, secret=secret))
            # Retrieved even when every waiter has gone (no "never retrieved" warning).
            pending.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._inflight[flight] = pending
        # Shielded: a caller that goes away does not cancel the review others wait for.
        result: T = await asyncio.shield(pending)
        return result

    async def _review(self, kind: str, cache: Answers[K, T], key: K,
                      review: Callable[[], T], positive: Callable[[T], bool], *,
                      secret: str) -> T:
        try:
            value = await asyncio.get_running_loop().run_in_executor(self._executor, review)
        except Exception as exc:  # fail closed on anything, not only on what we foresaw
            self.counts.reviews[(kind, "error")] += 1
            if isinstance(exc, ReviewUnavailable):
                log.warning("cannot verify a caller: %s", exc)
            else:
                # Unforeseen: the whole traceback, once here rather than in every
                # waiter's reply; scrubbed, as the token may be in a message.
                text = "".join(traceback.format_exception(exc))
                log.warning("cannot verify a caller: %s failed:\n%s", kind,
                            text.replace(secret, "[token]") if secret else text)
            raise Unavailable("cannot verify the caller: the Kubernetes API server did not "
                              "answer; retry shortly") from None
        finally:
            self._inflight.pop((kind, key), None)
        self.counts.reviews[(kind, "ok")] += 1
        good = positive(value)
        cache.put(key, value, good,
                  self.cache_seconds if good else self.denied_cache_seconds, self.clock())
        return value

    def _review_access(self, user: User, access: Access) -> AccessDecision:
        # In the executor's thread: logged once per review, not once per request.
        decision = self.reviewer.review_access(user, access)
        if not decision.allowed:
            log.info('denied: user "%s" may not %s: %s', user.name, access.describe(),
                     decision.reason or "no RBAC rule allows it")
        return decision

    # --- HTTP ---------------------------------------------------------------------------
    def guard_routes(self, routes: dict[str, Route | AsyncRoute]) -> dict[str, Route | AsyncRoute]:
        """The same routes, each checked before its handler runs. A plain ``Route`` becomes
        an ``AsyncRoute`` with the same replies (only those see the headers)."""
        guarded: dict[str, Route | AsyncRoute] = {}
        for path, route in routes.items():
            async_route = route if isinstance(route, AsyncRoute) else as_async(route)
            guarded[path] = AsyncRoute(async_route.method,
                                       self._guard(async_route, route_access(path), path),
                                       async_route.encode_error)
        return guarded

    def _guard(self, route: AsyncRoute, access_of: Callable[[Request], Access],
               path: str) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            access = access_of(request)
            try:
                await self.authorize(bearer_token(request.headers.get(b"authorization")),
                                     access)
            except (Unauthorized, Forbidden, Unavailable) as exc:
                log.debug("%s %s: %s", request.method, path, exc)
                status, body, content_type = reply_for(exc, route.encode_error)
                return Response(status, body, content_type, exc.headers)
            return await route.handler(request)

        return guarded

    # --- gRPC ---------------------------------------------------------------------------
    def grpc_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [Interceptor(self)]




def route_access(path: str) -> Callable[[Request], Access]:
    """What a request to the route ``path`` (a template) asks for."""
    if NAMED_CLUSTER_SEGMENT in path:
        return lambda r: Access.one(r.params.get("namespace", ""), r.params.get("name", ""))
    if "{namespace}" in path:
        return lambda r: Access.to(r.params.get("namespace", ""))
    if path in NAMESPACE_QUERY_ROUTES:
        return lambda r: Access.listing(r.query.get("namespace", ""))
    return lambda _: Access.listing("")


def as_async(route: Route) -> AsyncRoute:
    if route.discard_body:
        raise TypeError("a route that discards its body cannot be guarded")

    async def handler(request: Request) -> Response:
        result = route.handler(request.body)
        if isinstance(result, bytes):
            return Response(200, result, route.content_type)
        status, body, content_type = result
        return Response(status, body, content_type)

    return AsyncRoute(route.method, handler, route.encode_error)


