"""The HTTP vocabulary: routes and what their handlers get and give, how an error becomes
a reply, the concurrency gate, body limits, and the observer each request is reported to.
Nothing here serves."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from raygate.contract.errors import (
    ErrorBody,
    ErrorReply,
    MethodNotAllowed,
    NotFound,
    RayClusterNotFound,
    RaygateError,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
OTHER_ROUTE = "other"
"""The ``route`` every request to a path no route serves is counted under."""

JSON = b"application/json"
Reply = tuple[int, bytes, bytes]
"""(HTTP status, body, content type)."""
ErrorEncoder = Callable[[str], bytes]
"""Makes the body of a 200 reply carrying an error message, in the shape of the protocol
a route speaks (a scheduler's): each front defines its own beside its wire types."""


def reply_for(error: RaygateError, encode_error: ErrorEncoder | None) -> Reply:
    """The reply to ``error`` on a route whose errors ``encode_error`` shapes (None:
    raygate's own API, a status code and a JSON error)."""
    message = str(error) or error.reason
    # The schedulers always POST to the right path; a wrong method or path is a human at
    # the door and gets plain HTTP. Everything else answers in the peer's own shape, with
    # 200, since neither scheduler reads a body that comes with another status.
    if encode_error is not None and not isinstance(error, NotFound | MethodNotAllowed):
        return 200, encode_error(f"raygate: {message}"), JSON
    synced = error.synced if isinstance(error, RayClusterNotFound) else None
    body = msgspec.json.encode(
        ErrorReply(ErrorBody(error.status, error.reason, message, synced)))
    return error.status, body, JSON


class RouteTimer(Protocol):
    """What one route's requests are reported to (``raygate.server.metrics`` binds one
    per route): the HTTP layer knows no metrics library, only this."""

    def done(self, status: int, seconds: float) -> None: ...

    def error(self, reason: str) -> None: ...


class RouteObserver(Protocol):
    """Hands out a ``RouteTimer`` per route and watches the gates of gated routes."""

    def route(self, path: str) -> RouteTimer: ...

    def watch_gate(self, route: str, gate: Gate) -> None: ...


# A 5,000-node NodeList (nodeCacheCapable: false) is about 36 MB; leave room above it.
DEFAULT_MAX_BODY = 64 * 1024 * 1024
API_MAX_BODY = 1024 * 1024
"""raygate's own API (admission status, explain) takes at most one Pod: its routes read
no more than this, whatever the server's limit, so no caller — authorized or not yet —
makes raygate hold a scheduler-sized body."""


@dataclass(slots=True)
class Gate:
    """At most ``limit`` requests of a route in flight; the next ones are answered 503
    at once, with ``Retry-After``, without reading their bodies.

    A route's handler is synchronous, so two requests overlap only while their bodies
    arrive: the gate is held from the request's start to its whole body, and a small
    body that came in one piece holds it for no time at all. What it bounds is the
    half-arrived bodies buffered at once — Volcano's predicate carries the node's whole
    NodeInfo, every pod on it included, so a storm of them is a storm of large uploads.
    """

    limit: int
    busy: int = 0
    shed: int = 0
    """Requests refused so far."""


@dataclass(frozen=True, slots=True)
class Route:
    method: bytes
    handler: Callable[[bytes], bytes | Reply]
    """Returns the body of a 200 reply, or a whole ``Reply`` when the status varies."""
    encode_error: ErrorEncoder | None = None
    """The shape of this route's error replies; None: raygate's own (``reply_for``)."""
    content_type: bytes = JSON
    discard_body: bool = False
    """Read the body past any size limit and drop it unparsed (Volcano's session hooks
    send the whole cluster; raygate answers them without looking)."""
    gate: Gate | None = None
    """Bounds the requests in flight on this route (Volcano's predicate storm)."""
    max_body: int | None = None
    """A lower body limit than the server's for this route (``API_MAX_BODY``)."""


@dataclass(frozen=True, slots=True)
class Request:
    """What an ``AsyncRoute`` handler gets."""

    method: str
    path: str
    params: Mapping[str, str]
    """Path parameters: ``{namespace}`` in the route's path gives ``params["namespace"]``."""
    query: Mapping[str, str]
    """Query parameters, the first value of each."""
    headers: Mapping[bytes, bytes]
    """Header names lower-case, as ASGI gives them; repeated headers joined by ``, ``."""
    body: bytes
    receive: Receive

    async def disconnected(self) -> None:
        """Returns when the client goes away (the body has been read already)."""
        while (await self.receive())["type"] != "http.disconnect":
            continue  # nothing else arrives after the body; wait for the disconnect


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: bytes = JSON
    headers: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class AsyncRoute:
    """A route whose handler is a coroutine taking a ``Request``; its path may hold
    ``{name}`` parameters, each matching one non-empty path segment."""

    method: bytes
    handler: Callable[[Request], Awaitable[Response]]
    encode_error: ErrorEncoder | None = None
    """As ``Route.encode_error``."""
