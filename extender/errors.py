"""raygate's exception tree and the one place that maps it to replies.

    RaygateError
    ├── BadRequest            the body is not what the route expects (HTTP 400)
    │   └── MissingField      a required key is absent or null
    ├── PayloadTooLarge       the body exceeds the route's limit (HTTP 413)
    ├── NotFound              no such route or object (HTTP 404)
    └── MethodNotAllowed      (HTTP 405)

``reply_for`` decides, per protocol, how an error reaches the peer: kube-scheduler's
filter has an ``Error`` field in a 200 reply (with ``ignorable: true`` kube-scheduler
then skips raygate for that pod: fail open); prioritize and preempt have none, so they
get a non-200 with a JSON body, which kube-scheduler treats as "no opinion" (prioritize)
or, for an ignorable extender, skips (preempt).
"""

from __future__ import annotations

from enum import Enum

import msgspec

from extender.wire.scheduler import FilterResult

__all__ = [
    "BadRequest",
    "MethodNotAllowed",
    "MissingField",
    "NotFound",
    "PayloadTooLarge",
    "Protocol",
    "RaygateError",
    "Reply",
    "reply_for",
]


class RaygateError(Exception):
    status = 500
    reason = "InternalError"


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


class MethodNotAllowed(RaygateError):
    status = 405
    reason = "MethodNotAllowed"


class Protocol(Enum):
    """Who is on the other end of a route, which decides the error shape."""

    RAYGATE = "raygate"  # our own API: status code + JSON error
    SCHEDULER_FILTER = "scheduler-filter"  # ExtenderFilterResult.Error in a 200


class _ErrorBody(msgspec.Struct):
    code: int
    reason: str
    message: str


class _ErrorReply(msgspec.Struct):
    error: _ErrorBody


JSON = b"application/json"
Reply = tuple[int, bytes, bytes]
"""(HTTP status, body, content type)."""


def reply_for(error: RaygateError, protocol: Protocol) -> Reply:
    message = str(error) or error.reason
    # kube-scheduler always POSTs; a wrong method or path is a human at the door.
    if protocol is Protocol.SCHEDULER_FILTER and not isinstance(error, NotFound | MethodNotAllowed):
        body = msgspec.json.encode(FilterResult(error=f"raygate: {message}"))
        return 200, body, JSON
    body = msgspec.json.encode(_ErrorReply(_ErrorBody(error.status, error.reason, message)))
    return error.status, body, JSON
