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
or, for an ignorable extender, skips (preempt). Each Volcano verb has its own error
field or vote; see ``_PEER_ERRORS``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import msgspec

from extender.wire import volcano
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
    VOLCANO_PREDICATE = "volcano-predicate"  # PredicateResponse.status (a string) + code 1
    VOLCANO_PRIORITIZE = "volcano-prioritize"  # PrioritizeResponse.errorMessage
    VOLCANO_VICTIMS = "volcano-victims"  # a reject vote with no victims: the floor holds
    VOLCANO_VOTE = "volcano-vote"  # jobEnqueueable: abstain


_PEER_ERRORS: dict[Protocol, Callable[[str], bytes]] = {
    Protocol.SCHEDULER_FILTER: lambda m: msgspec.json.encode(FilterResult(error=m)),
    # Error (1): the node fails with the message as its reason, visible in the pod's
    # events; Volcano's preempt also leaves such nodes alone.
    Protocol.VOLCANO_PREDICATE: lambda m: msgspec.json.encode(
        volcano.PredicateResponse(status=m, code=1)),
    # Volcano chooses no node from this candidate group, and logs the message.
    Protocol.VOLCANO_PRIORITIZE: lambda m: msgspec.json.encode(
        volcano.PrioritizeResponse(error_message=m)),
    # raygate cannot tell whether floor pods are among the evictees: veto (the safe side).
    Protocol.VOLCANO_VICTIMS: lambda m: msgspec.json.encode(
        volcano.VictimsResponse(status=-1, victims=[])),
    Protocol.VOLCANO_VOTE: lambda m: msgspec.json.encode(volcano.VoteResponse(status=0)),
}


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
    # The schedulers always POST to the right path; a wrong method or path is a human at
    # the door and gets plain HTTP. Everything else answers in the peer's own shape, with
    # 200, since neither scheduler reads a body that comes with another status.
    if protocol is not Protocol.RAYGATE and not isinstance(error, NotFound | MethodNotAllowed):
        return 200, _PEER_ERRORS[protocol](f"raygate: {message}"), JSON
    body = msgspec.json.encode(_ErrorReply(_ErrorBody(error.status, error.reason, message)))
    return error.status, body, JSON
