"""How an error reaches each peer of raygate's HTTP routes (``reply_for``).

kube-scheduler's filter has an ``Error`` field in a 200 reply (with ``ignorable: true``
kube-scheduler then skips raygate for that pod: fail open); prioritize and preempt have
none, so they get a non-200 with a JSON body, which kube-scheduler treats as "no opinion"
(prioritize) or, for an ignorable extender, skips (preempt). Each Volcano verb has its own
error field or vote; see ``_PEER_ERRORS``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import msgspec

from raygate.contract.errors import (
    ErrorBody,
    ErrorReply,
    MethodNotAllowed,
    NotFound,
    RayClusterNotFound,
    RaygateError,
)
from raygate.server.wire import volcano
from raygate.server.wire.scheduler import FilterResult

__all__ = ["JSON", "Peer", "Reply", "reply_for"]


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
        ErrorReply(ErrorBody(error.status, error.reason, message, synced)))
    return error.status, body, JSON


