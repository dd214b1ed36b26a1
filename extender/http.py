"""The HTTP front: a raw ASGI application, no framework.

Measured on this machine class (reference/performance.md), a raw ASGI callable on
uvicorn with uvloop and httptools, with msgspec doing the JSON, is the fastest Python
stack for the extender's small-request, latency-bound pattern; frameworks cost 2-5x.
Routes map a path to a function ``bytes -> bytes``; errors are mapped to replies by
``extender.errors.reply_for`` and nowhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import msgspec

from extender.cache import ClusterCache
from extender.errors import (
    JSON,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Protocol,
    RaygateError,
    Reply,
    reply_for,
)
from extender.scheduler_api import SchedulerExtender
from extender.volcano_api import VolcanoExtender
from extender.webhook import mutate_ray_pods

__all__ = [
    "DEFAULT_MAX_BODY",
    "Route",
    "create_app",
    "health_routes",
    "scheduler_routes",
    "volcano_routes",
    "webhook_routes",
]

log = logging.getLogger("raygate.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# A 5,000-node NodeList (nodeCacheCapable: false) is about 36 MB; leave room above it.
DEFAULT_MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Route:
    method: bytes
    handler: Callable[[bytes], bytes | Reply]
    """Returns the body of a 200 reply, or a whole ``Reply`` when the status varies."""
    protocol: Protocol = Protocol.RAYGATE
    content_type: bytes = JSON
    discard_body: bool = False
    """Read the body past any size limit and drop it unparsed (Volcano's session hooks
    send the whole cluster; raygate answers them without looking)."""


class _Health(msgspec.Struct):
    status: str
    source: str = ""
    objects: dict[str, int] = msgspec.field(default_factory=dict)


def health_routes(cache: ClusterCache) -> dict[str, Route]:
    """``/healthz`` (the process is alive) and ``/readyz`` (the cache is loaded)."""

    def healthz(_: bytes) -> bytes:
        return b'{"status":"ok"}'

    def readyz(_: bytes) -> Reply:
        status = "ready" if cache.ready else "not-ready"
        body = _Health(status=status, source=cache.source, objects=cache.snapshot.counts())
        return (200 if cache.ready else 503), msgspec.json.encode(body), JSON

    return {"/healthz": Route(b"GET", healthz), "/readyz": Route(b"GET", readyz)}


def scheduler_routes(scheduler: SchedulerExtender) -> dict[str, Route]:
    """kube-scheduler's extender verbs under ``/scheduler/``."""
    return {
        "/scheduler/filter": Route(b"POST", scheduler.filter, Protocol.SCHEDULER_FILTER),
        "/scheduler/prioritize": Route(b"POST", scheduler.prioritize),
        "/scheduler/preempt": Route(b"POST", scheduler.preempt),
    }


def volcano_routes(volcano: VolcanoExtender) -> dict[str, Route]:
    """Volcano's extender plugin verbs under ``/volcano/``, named as the verbs in the
    README's volcano-scheduler.conf."""
    return {
        "/volcano/onSessionOpen": Route(b"POST", volcano.session, discard_body=True),
        "/volcano/onSessionClose": Route(b"POST", volcano.session, discard_body=True),
        "/volcano/predicate": Route(b"POST", volcano.predicate, Protocol.VOLCANO_PREDICATE),
        "/volcano/prioritize": Route(b"POST", volcano.prioritize, Protocol.VOLCANO_PRIORITIZE),
        "/volcano/preemptable": Route(b"POST", volcano.victims, Protocol.VOLCANO_VICTIMS),
        "/volcano/reclaimable": Route(b"POST", volcano.victims, Protocol.VOLCANO_VICTIMS),
        "/volcano/jobEnqueueable": Route(b"POST", volcano.job_enqueueable,
                                         Protocol.VOLCANO_VOTE),
    }


def webhook_routes() -> dict[str, Route]:
    """The admission webhook, served on the HTTPS listener (``--webhook-addr``)."""
    return {"/mutate/ray-pods": Route(b"POST", mutate_ray_pods)}


def create_app(
    routes: Mapping[str, Route],
    max_body: int = DEFAULT_MAX_BODY,
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI application serving ``routes`` (exact paths)."""
    routes = dict(routes)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # websockets are not served
            return
        route = routes.get(scope["path"])
        status, body, content_type = 500, b"", JSON
        try:
            if route is None:
                raise NotFound(f"no route {scope['path']}")
            if scope["method"].encode() != route.method and not (
                scope["method"] == "HEAD" and route.method == b"GET"
            ):
                raise MethodNotAllowed(f"{scope['path']} accepts {route.method.decode()}")
            request = await _read_body(scope, receive, None if route.discard_body else max_body)
            result = route.handler(request)
            if isinstance(result, bytes):
                status, body, content_type = 200, result, route.content_type
            else:
                status, body, content_type = result
        except RaygateError as exc:
            status, body, content_type = reply_for(
                exc, route.protocol if route else Protocol.RAYGATE)
            log.warning("%s %s: %s %s", scope["method"], scope["path"], status, exc)
        except Exception:
            # A bug, not bad input: log it with its traceback and still answer the peer.
            log.exception("%s %s failed", scope["method"], scope["path"])
            status, body, content_type = _internal(route)
        await send({
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type),
                        (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "http.response.body", "body": body})

    return app


def _internal(route: Route | None) -> Reply:
    error = RaygateError("internal error; see raygate's log")
    return reply_for(error, route.protocol if route else Protocol.RAYGATE)


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
            break
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
