"""The HTTP front: raw ASGI on uvicorn, no framework, and a fast path beside it.

Measured on this machine class (docs/benchmarks.md), a raw ASGI callable on
uvicorn with uvloop and httptools, with msgspec doing the JSON, is the fastest Python
stack for the extender's small-request, latency-bound pattern; frameworks cost 2-5x.
Routes map a path to a function ``bytes -> bytes`` (``Route``); ``SyncRoutes`` runs them
and maps their errors to replies through ``routes.reply_for``, in the shape each route's
front gave it, for both the ASGI app and ``raygate.server.http.fast_path``, which answers
most of their requests inside the protocol without ASGI. Routes that need the query, the
headers, path parameters (``/v1/namespaces/{namespace}/...``) or to wait (long-poll) are
``AsyncRoute``s: looked up only after the exact-path table misses, so the scheduler's hot
routes pay nothing for them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from time import perf_counter
from urllib.parse import parse_qsl

from raygate.contract.errors import (
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RaygateError,
    Unavailable,
)
from raygate.server.http.routes import (
    API_MAX_BODY,
    DEFAULT_MAX_BODY,
    OTHER_ROUTE,
    AsyncRoute,
    Gate,
    Receive,
    Reply,
    Request,
    Response,
    Route,
    RouteObserver,
    RouteTimer,
    Scope,
    Send,
    reply_for,
)

__all__ = [
    "HttpApp",
    "SyncRoutes",
]

log = logging.getLogger("raygate.http")


@dataclass(frozen=True, slots=True)
class _AsyncRoutes:
    # Each route with the path it was registered under: the ``route`` label of its metrics.
    exact: dict[str, AsyncRoute] = field(default_factory=dict)
    patterns: list[tuple[re.Pattern[str], AsyncRoute, str]] = field(default_factory=list)

    @classmethod
    def of(cls, routes: Mapping[str, AsyncRoute]) -> _AsyncRoutes:
        table = cls()
        for path, route in routes.items():
            if "{" not in path:
                table.exact[path] = route
                continue
            regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path))
            table.patterns.append((re.compile(regex + r"\Z"), route, path))
        return table

    def match(self, path: str) -> tuple[AsyncRoute, dict[str, str], str] | None:
        """(route, path parameters, the path the route was registered under)."""
        route = self.exact.get(path)
        if route is not None:
            return route, {}, path
        for pattern, route, registered in self.patterns:
            found = pattern.match(path)
            if found is not None:
                return route, found.groupdict(), registered
        return None


class SyncRoutes:
    """The exact-path ``Route``s, their metrics and the one place their handlers run:
    shared by the ASGI app and the protocol's fast path (``raygate.server.http.fast_path``)."""

    def __init__(self, routes: Mapping[str, Route], max_body: int,
                 metrics: RouteObserver | None) -> None:
        self.routes = dict(routes)
        self.by_raw_path = {path.encode(): route for path, route in routes.items()}
        """The same routes under the request target's raw bytes, for the fast path."""
        self.max_body = max_body
        # Label children bound once per route here, not per request.
        self.timers: dict[str, RouteTimer] = {}
        self.other: RouteTimer | None = None
        if metrics is not None:
            self.timers = {path: metrics.route(path) for path in routes}
            self.other = metrics.route(OTHER_ROUTE)
            for path, route in routes.items():
                if route.gate is not None:
                    metrics.watch_gate(path, route.gate)

    def limit(self, route: Route) -> int:
        """The most body ``route`` reads."""
        return self.max_body if route.max_body is None else min(route.max_body, self.max_body)

    def answer(self, route: Route, method: str, path: str, body: bytes,
               timer: RouteTimer | None) -> Reply:
        """``route``'s handler on ``body``, errors mapped to replies."""
        try:
            result = route.handler(body)
        except Exception as exc:  # every failure becomes a reply
            return self.failed(exc, route, method, path, timer)
        if isinstance(result, bytes):
            return 200, result, route.content_type
        return result

    @staticmethod
    def failed(exc: Exception, route: Route | None, method: str, path: str,
               timer: RouteTimer | None) -> Reply:
        """The reply to ``exc``: a ``RaygateError`` in the route's protocol, anything else
        a bug — logged with its traceback, and the peer still gets an answer."""
        if isinstance(exc, RaygateError):
            reply = reply_for(exc, route.encode_error if route else None)
            log.warning("%s %s: %s %s", method, path, reply[0], exc)
            if timer is not None:
                timer.error(exc.reason)
            return reply
        log.error("%s %s failed", method, path, exc_info=exc)
        if timer is not None:
            timer.error(RaygateError.reason)
        return _internal(route)


class HttpApp:
    """The ASGI application serving raygate's routes (exact paths; ``AsyncRoute`` paths
    may have parameters), counting and timing every request in the metrics when given.
    ``sync`` is also read by the protocol's fast path."""

    def __init__(self, routes: Mapping[str, Route | AsyncRoute],
                 max_body: int = DEFAULT_MAX_BODY, metrics: RouteObserver | None = None) -> None:
        self.sync = SyncRoutes({p: r for p, r in routes.items() if isinstance(r, Route)},
                               max_body, metrics)
        self.async_routes = _AsyncRoutes.of(
            {p: r for p, r in routes.items() if isinstance(r, AsyncRoute)})
        self.async_timers = {} if metrics is None else {
            path: metrics.route(path) for path, r in routes.items() if isinstance(r, AsyncRoute)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # websockets are not served
            return
        started = perf_counter()
        sync = self.sync
        path = scope["path"]
        route = sync.routes.get(path)
        if route is None:
            matched = self.async_routes.match(path)
            if matched is not None:
                async_route, params, registered = matched
                await _serve_async(async_route, params, scope, receive, send,
                                   max_body=min(sync.max_body, API_MAX_BODY),
                                   timer=self.async_timers.get(registered))
                return
        timer = sync.timers.get(path, sync.other)
        try:
            if route is None:
                raise NotFound(f"no route {path}")
            _check_method(scope, route.method)
            gate = route.gate
            if gate is None:
                body = await _read_body(scope, receive,
                                        None if route.discard_body else sync.limit(route))
            elif gate.busy >= gate.limit:
                await _shed(gate, scope, send, timer, started)
                return
            else:
                gate.busy += 1
                try:
                    body = await _read_body(scope, receive, sync.max_body)
                finally:
                    gate.busy -= 1
        except ClientGone:
            return
        except Exception as exc:  # a RaygateError, or a bug: either way the peer gets a reply
            status, reply, content_type = sync.failed(exc, route, scope["method"], path, timer)
            extra = exc.headers if isinstance(exc, RaygateError) else ()
            head = [*_head(content_type, reply), *extra]
        else:
            status, reply, content_type = sync.answer(route, scope["method"], path, body, timer)
            head = _head(content_type, reply)
        await _send(send, status, head, reply, timer=timer, started=started)


def _check_method(scope: Scope, method: bytes) -> None:
    if scope["method"].encode() != method and not (
        scope["method"] == "HEAD" and method == b"GET"
    ):
        # HEAD is answered wherever GET is (uvicorn sends the head without the body).
        allow = "GET, HEAD" if method == b"GET" else method.decode()
        raise MethodNotAllowed(f"{scope['path']} accepts {method.decode()}", allow)


def _head(content_type: bytes, body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes,
                *, timer: RouteTimer | None, started: float) -> None:
    """The reply, then its count and time in the route's metrics."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    if timer is not None:
        timer.done(status, perf_counter() - started)


async def _serve_async(
    route: AsyncRoute, params: dict[str, str], scope: Scope, receive: Receive, send: Send,
    *, max_body: int, timer: RouteTimer | None = None,
) -> None:
    # A long-poll's time includes its wait (up to timeoutSeconds): read these routes'
    # latency with that in mind.
    started = perf_counter()
    try:
        _check_method(scope, route.method)
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers[name] = headers[name] + b", " + value if name in headers else value
        request = Request(
            method=scope["method"], path=scope["path"], params=params,
            query=dict(reversed(parse_qsl(scope["query_string"].decode("latin-1"),
                                          keep_blank_values=True))),
            headers=headers, body=await _read_body(scope, receive, max_body), receive=receive)
        response = await route.handler(request)
    except ClientGone:
        return
    except RaygateError as exc:
        status, body, content_type = reply_for(exc, route.encode_error)
        # An API client asking for what does not exist (yet) is routine, not a warning.
        log.log(logging.DEBUG if isinstance(exc, NotFound) else logging.WARNING,
                "%s %s: %s %s", scope["method"], scope["path"], status, exc)
        response = Response(status, body, content_type, exc.headers)
        if timer is not None:
            timer.error(exc.reason)
    except Exception:
        log.exception("%s %s failed", scope["method"], scope["path"])
        response = Response(*_internal(route))
        if timer is not None:
            timer.error(RaygateError.reason)
    # 304 carries no body (RFC 9110 §15.4.5), and so no content type or length.
    head = [] if response.status == 304 else _head(response.content_type, response.body)
    await _send(send, response.status, [*head, *response.headers], response.body,
                timer=timer, started=started)


RETRY_AFTER_SECONDS = 1
"""What a refused request is told to wait: about one Volcano scheduling period."""


async def _shed(gate: Gate, scope: Scope, send: Send,
                timer: RouteTimer | None, started: float) -> None:
    """503 at once, in plain HTTP whatever the route's protocol: Volcano's extender client
    reads only the status of a non-200 (``send`` in pkg/scheduler/plugins/extender), so a
    predicate refused here fails this node for the task in this session, or — with
    ``extender.ignorable: true`` — passes it, as any raygate error does."""
    gate.shed += 1
    if gate.shed == 1 or gate.shed % 1000 == 0:  # a storm must not become a log storm
        log.warning("%s: %d requests in flight, the limit; refused %d so far",
                    scope["path"], gate.limit, gate.shed)
    error = Unavailable(f"{gate.limit} requests to {scope['path']} are in flight, the "
                        f"limit; retry after {RETRY_AFTER_SECONDS}s")
    status, body, content_type = reply_for(error, None)
    # The unread body is parsed and dropped by the server as it arrives; the connection
    # stays usable for the next request.
    headers = [*_head(content_type, body), (b"retry-after", str(RETRY_AFTER_SECONDS).encode())]
    await _send(send, status, headers, body, timer=timer, started=started)


def _internal(route: Route | AsyncRoute | None) -> Reply:
    error = RaygateError("internal error; see raygate's log")
    return reply_for(error, route.encode_error if route else None)


class ClientGone(Exception):
    """The client disconnected before its request was complete: nobody to answer."""


async def _read_body(scope: Scope, receive: Receive, limit: int | None) -> bytes:
    """The whole body, or with ``limit`` None, nothing (the body is drained and dropped)."""
    for name, value in scope["headers"]:
        if (limit is not None and name == b"content-length" and value.isdigit()
                and int(value) > limit):
            raise PayloadTooLarge(f"body of {int(value)} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            # The peer went away mid-upload: never act on half a body.
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk and limit is not None:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
