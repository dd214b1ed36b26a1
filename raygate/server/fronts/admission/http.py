"""The admission-status API over HTTP: requests parsed (the long-poll's ``waitForChange``
and ``timeoutSeconds``), replies encoded (conditional GETs: ETag, ``If-None-Match``), the
statuses and the waiting ``AdmissionService``'s; and the OpenAPI document."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from importlib import resources

from raygate.contract.errors import BadRequest, RayClusterNotFound
from raygate.server.fronts.admission.service import AdmissionService
from raygate.server.fronts.admission.state import Generation, Scope
from raygate.server.http.routes import JSON, AsyncRoute, Request, Response, Route

__all__ = ["AdmissionHttp", "admission_routes", "openapi_document", "wait_timeout",
           "wait_version"]

MAX_WAIT_SECONDS = 300.0
"""The longest long-poll (``timeoutSeconds``); a client polls again after it."""


DEFAULT_WAIT_SECONDS = 30.0

VERSION = re.compile(r"[0-9a-f]{16}")
"""What every ``metadata.version`` looks like (``admission_state.version_of``)."""


def wait_version(raw: str | None) -> str | None:
    """``waitForChange``: the version of an earlier reply, or None when not given. Any
    other value (empty, a quoted ETag, a typo) is a 400 now rather than a long-poll that
    could only ever end by its timeout."""
    if raw is None:
        return None
    if not VERSION.fullmatch(raw):
        raise BadRequest(f"waitForChange: expected the metadata.version of an earlier reply "
                         f"(16 hex digits), got {raw!r}")
    return raw


def wait_timeout(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_WAIT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_WAIT_SECONDS:  # NaN fails too
        raise BadRequest(f"timeoutSeconds: expected a number of seconds in "
                         f"[0, {MAX_WAIT_SECONDS:g}], got {raw!r}")
    return seconds


def etag_matches(header: bytes | None, etag: bytes) -> bool:
    """``If-None-Match`` (RFC 9110 §13.1.2): ``*`` or a list of entity tags, compared
    weakly (a ``W/`` prefix is ignored)."""
    if header is None:
        return False
    return any(candidate.strip().removeprefix(b"W/") in (b"*", etag)
               for candidate in header.split(b","))


def conditional_reply(request: Request, version: str, body: bytes) -> Response:
    etag = b'"%s"' % version.encode()
    headers = ((b"etag", etag), (b"cache-control", b"no-cache"))
    if etag_matches(request.headers.get(b"if-none-match"), etag):
        return Response(304, b"", JSON, headers)
    return Response(200, body, JSON, headers)


def openapi_document() -> bytes:
    """The OpenAPI 3.1 document of the HTTP API, shipped in the package."""
    return resources.files("raygate.server").joinpath("openapi.json").read_bytes()


class AdmissionHttp:
    """The admission routes' handlers over ``service``: get and list, each a long-poll
    when the request gives ``waitForChange``."""

    def __init__(self, service: AdmissionService) -> None:
        self.service = service

    async def status(self, request: Request) -> Response:
        namespace, name = request.params["namespace"], request.params["name"]
        scope: Scope = (namespace, name)

        def version(generation: Generation) -> str:
            entry = generation.entries.get((namespace, name))
            return "" if entry is None else entry.version

        generation = await self._maybe_wait(request, scope, version)
        entry = generation.entries.get((namespace, name))
        if entry is None:
            raise RayClusterNotFound(namespace, name, self.service.cache.ready)
        return conditional_reply(request, entry.version, entry.body)

    async def statuses(self, request: Request) -> Response:
        namespace = request.query.get("namespace") or None
        generation = await self._maybe_wait(
            request, (namespace, None), lambda g: g.listing(namespace)[0])
        version, body, _ = generation.listing(namespace)
        return conditional_reply(request, version, body)

    async def _maybe_wait(self, request: Request, scope: Scope,
                          version: Callable[[Generation], str]) -> Generation:
        seen = wait_version(request.query.get("waitForChange"))
        timeout = wait_timeout(request.query.get("timeoutSeconds"))
        service = self.service
        generation = service.current()
        # No version: a RayCluster raygate does not know is answered (404) at once, not
        # held for the timeout. A listing always has one.
        if seen is None or not version(generation):
            return generation
        waiting = asyncio.ensure_future(service.wait_for_change(scope, version, seen, timeout))
        gone = asyncio.ensure_future(request.disconnected())
        try:
            await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not waiting.done():  # the client left; nobody reads the answer
            waiting.cancel()
            return service.current()
        return waiting.result()


def admission_routes(service: AdmissionService) -> dict[str, Route | AsyncRoute]:
    """``/v1/...`` admission status (get, list, long-poll) and ``/openapi.json``."""
    http = AdmissionHttp(service)
    document = openapi_document()
    return {
        "/v1/namespaces/{namespace}/rayclusters/{name}/admission": AsyncRoute(b"GET", http.status),
        "/v1/admission": AsyncRoute(b"GET", http.statuses),
        "/openapi.json": Route(b"GET", lambda _: document),
    }
