"""raygate's exception tree, and how each error travels: the body of an HTTP error reply
and the gRPC status of the ``raygate.v1`` services, one table per direction. The server
replies with these (``RaygateError.status``, ``grpc_status_for``), the clients raise them
(``HTTP_ERRORS``, ``GRPC_ERRORS``); neither side writes its own mapping.

    RaygateError
    ├── BadRequest            the body is not what the route expects (HTTP 400)
    │   └── MissingField      a required key is absent or null
    ├── PayloadTooLarge       the body exceeds the route's limit (HTTP 413)
    ├── NotFound              no such route or object (HTTP 404)
    │   └── RayClusterNotFound   the admission status of an unknown RayCluster
    ├── MethodNotAllowed      (HTTP 405)
    ├── Unauthorized          no bearer token, or one the API server rejects (401)
    ├── Forbidden             authenticated, but RBAC does not allow the read (403)
    └── Unavailable           shutting down, (raygate.client) raygate unreachable, or
                              (raygate.server.authz) the caller cannot be verified (503)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import grpc
import msgspec

__all__ = [
    "GRPC_ERRORS",
    "GRPC_SYNCED_KEY",
    "HTTP_ERRORS",
    "BadRequest",
    "ErrorBody",
    "ErrorReply",
    "Forbidden",
    "MethodNotAllowed",
    "MissingField",
    "NotFound",
    "PayloadTooLarge",
    "RayClusterNotFound",
    "RaygateError",
    "Unauthorized",
    "Unavailable",
    "grpc_status_for",
]


class RaygateError(Exception):
    status = 500
    reason = "InternalError"
    headers: tuple[tuple[bytes, bytes], ...] = ()
    """HTTP headers its reply carries beside the body: those RFC 9110 requires of some
    statuses (``Allow`` on a 405, ``WWW-Authenticate`` on a 401)."""


class BadRequest(RaygateError):
    status = 400
    reason = "BadRequest"


class MissingField(BadRequest):
    def __init__(self, field: str) -> None:
        super().__init__(f"missing or null `{field}`")


class PayloadTooLarge(RaygateError):
    status = 413
    reason = "PayloadTooLarge"


class NotFound(RaygateError):
    status = 404
    reason = "NotFound"


class RayClusterNotFound(NotFound):
    """A RayCluster raygate does not know; ``synced`` tells whether raygate has loaded its
    source yet (before that, every cluster is unknown, and a client should retry)."""

    def __init__(self, namespace: str, name: str, synced: bool) -> None:
        state = ("raygate has synced with its source" if synced else
                 "raygate has not synced with its source yet; retry shortly")
        super().__init__(f"RayCluster {namespace}/{name} is not known: {state}")
        self.synced = synced


class MethodNotAllowed(RaygateError):
    """Sent with ``Allow: <allow>`` (RFC 9110 §15.5.6: a 405 lists the methods the
    resource supports)."""

    status = 405
    reason = "MethodNotAllowed"

    def __init__(self, message: str, allow: str) -> None:
        super().__init__(message)
        self.headers = ((b"allow", allow.encode()),)


class Unauthorized(RaygateError):
    """The caller is not known. Sent with ``WWW-Authenticate`` (RFC 9110 §11.6.1: a 401
    names the scheme the server accepts)."""

    status = 401
    reason = "Unauthorized"
    headers = ((b"www-authenticate", b'Bearer realm="raygate"'),)


class Forbidden(RaygateError):
    status = 403
    reason = "Forbidden"


class Unavailable(RaygateError):
    status = 503
    reason = "Unavailable"


class ErrorBody(msgspec.Struct, omit_defaults=True):
    # The defaults let a client read an error body that is not quite raygate's (a proxy's);
    # raygate's own always has every field but ``synced``.
    code: int = 0
    reason: str = ""
    message: str = ""
    synced: bool | None = None  # RayClusterNotFound only


class ErrorReply(msgspec.Struct):
    error: ErrorBody = msgspec.field(default_factory=ErrorBody)


HTTP_ERRORS: Mapping[int, type[RaygateError]] = MappingProxyType({
    kind.status: kind
    for kind in (BadRequest, Unauthorized, Forbidden, NotFound, PayloadTooLarge, Unavailable)
})
"""The error a client raises for an HTTP status: the reverse of each type's ``status``
(a 404 with ``synced`` is a ``RayClusterNotFound``). Not ``MethodNotAllowed``: the API's
routes are all GETs, which a client never sends elsewhere."""


# gRPC status codes of our own API (raygate.v1), by error type; the most specific wins.
_GRPC_CODES: tuple[tuple[type[RaygateError], grpc.StatusCode], ...] = (
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (BadRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (PayloadTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Unauthorized, grpc.StatusCode.UNAUTHENTICATED),
    (Forbidden, grpc.StatusCode.PERMISSION_DENIED),
)


GRPC_ERRORS: Mapping[grpc.StatusCode, type[RaygateError]] = MappingProxyType({
    **{code: kind for kind, code in _GRPC_CODES},
    # The client's deadline: raygate did not answer in time, as good as unreachable.
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
})
"""The error a client raises for a gRPC status code: the reverse of ``_GRPC_CODES`` (a
NOT_FOUND with the ``GRPC_SYNCED_KEY`` trailer is a ``RayClusterNotFound``)."""

GRPC_SYNCED_KEY = "raygate-synced"
"""Trailing metadata of a NOT_FOUND for an unknown RayCluster: "true" or "false"."""


def grpc_status_for(
    error: RaygateError,
) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The gRPC status code, details and trailing metadata of ``error``, for the
    ``raygate.v1`` services."""
    trailer: tuple[tuple[str, str], ...] = ()
    if isinstance(error, RayClusterNotFound):
        trailer = ((GRPC_SYNCED_KEY, "true" if error.synced else "false"),)
    for kind, code in _GRPC_CODES:
        if isinstance(error, kind):
            return code, str(error) or error.reason, trailer
    return grpc.StatusCode.INTERNAL, str(error) or error.reason, trailer
