"""The HTTP side of the admission-status API: conditional GETs (ETag, ``If-None-Match``),
the long-poll's ``waitForChange`` timeout, and the OpenAPI document."""

from __future__ import annotations

import math
import re
from importlib import resources

from raygate.contract.errors import BadRequest
from raygate.server.http.routes import JSON, Request, Response

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
