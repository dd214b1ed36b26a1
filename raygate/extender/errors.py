"""raygate's exception tree and the one place that maps it to replies.

    RaygateError
    ├── BadRequest            the body is not what the route expects (HTTP 400)
    │   └── MissingField      a required key is absent or null
    ├── PayloadTooLarge       the body exceeds the route's limit (HTTP 413)
    ├── NotFound              no such route or object (HTTP 404)
    │   └── RayClusterNotFound   the admission status of an unknown RayCluster
    ├── MethodNotAllowed      (HTTP 405)
    ├── Unauthorized          no bearer token, or one the API server rejects (401)
    ├── Forbidden             authenticated, but RBAC does not allow the read (403)
    └── Unavailable           shutting down, (extender.client) raygate unreachable, or
                              (raygate.extender.authz) the caller cannot be verified (503)

``reply_for`` decides, per protocol, how an error reaches the peer: kube-scheduler's
filter has an ``Error`` field in a 200 reply (with ``ignorable: true`` kube-scheduler
then skips raygate for that pod: fail open); prioritize and preempt have none, so they
get a non-200 with a JSON body, which kube-scheduler treats as "no opinion" (prioritize)
or, for an ignorable extender, skips (preempt). Each Volcano verb has its own error
field or vote; see ``_PEER_ERRORS``. ``grpc_status_for`` gives the gRPC status code of
an error for raygate's own gRPC API.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import grpc
import msgspec

from raygate.extender.wire import volcano
from raygate.extender.wire.scheduler import FilterResult

__all__ = [
    "GRPC_SYNCED_KEY",
    "BadRequest",
    "Forbidden",
    "MethodNotAllowed",
    "MissingField",
    "NotFound",
    "PayloadTooLarge",
    "Peer",
    "RayClusterNotFound",
    "RaygateError",
    "Reply",
    "Unauthorized",
    "Unavailable",
    "grpc_status_for",
    "reply_for",
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


class Peer(Enum):
    """Who is on the other end of a route, which decides the error shape."""

    RAYGATE = "raygate"  # our own API: status code + JSON error
    SCHEDULER_FILTER = "scheduler-filter"  # ExtenderFilterResult.Error in a 200
    VOLCANO_PREDICATE = "volcano-predicate"  # PredicateResponse.status (a string) + code 1
    VOLCANO_PRIORITIZE = "volcano-prioritize"  # PrioritizeResponse.errorMessage
    VOLCANO_VICTIMS = "volcano-victims"  # a reject vote with no victims: the floor holds
    VOLCANO_VOTE = "volcano-vote"  # jobEnqueueable: abstain


_PEER_ERRORS: dict[Peer, Callable[[str], bytes]] = {
    Peer.SCHEDULER_FILTER: lambda m: msgspec.json.encode(FilterResult(error=m)),
    # Error (1): the node fails with the message as its reason, visible in the pod's
    # events; Volcano's preempt also leaves such nodes alone.
    Peer.VOLCANO_PREDICATE: lambda m: msgspec.json.encode(
        volcano.PredicateResponse(status=m, code=1)),
    # Volcano chooses no node from this candidate group, and logs the message.
    Peer.VOLCANO_PRIORITIZE: lambda m: msgspec.json.encode(
        volcano.PrioritizeResponse(error_message=m)),
    # raygate cannot tell whether floor pods are among the evictees: veto (the safe side).
    Peer.VOLCANO_VICTIMS: lambda m: msgspec.json.encode(
        volcano.VictimsResponse(status=-1, victims=[])),
    Peer.VOLCANO_VOTE: lambda m: msgspec.json.encode(volcano.VoteResponse(status=0)),
}


class _ErrorBody(msgspec.Struct, omit_defaults=True):
    code: int
    reason: str
    message: str
    synced: bool | None = None  # RayClusterNotFound only


class _ErrorReply(msgspec.Struct):
    error: _ErrorBody


JSON = b"application/json"
Reply = tuple[int, bytes, bytes]
"""(HTTP status, body, content type)."""


def reply_for(error: RaygateError, peer: Peer) -> Reply:
    message = str(error) or error.reason
    # The schedulers always POST to the right path; a wrong method or path is a human at
    # the door and gets plain HTTP. Everything else answers in the peer's own shape, with
    # 200, since neither scheduler reads a body that comes with another status.
    if peer is not Peer.RAYGATE and not isinstance(error, NotFound | MethodNotAllowed):
        return 200, _PEER_ERRORS[peer](f"raygate: {message}"), JSON
    synced = error.synced if isinstance(error, RayClusterNotFound) else None
    body = msgspec.json.encode(
        _ErrorReply(_ErrorBody(error.status, error.reason, message, synced)))
    return error.status, body, JSON


# gRPC status codes of our own API (raygate.v1), by error type; the most specific wins.
_GRPC_CODES: tuple[tuple[type[RaygateError], grpc.StatusCode], ...] = (
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (BadRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (PayloadTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Unauthorized, grpc.StatusCode.UNAUTHENTICATED),
    (Forbidden, grpc.StatusCode.PERMISSION_DENIED),
)


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
