"""The explain reply to and from ``raygate.v1.Explanation`` (protobuf): the gRPC
servicer sends it, the client reads it back."""

from __future__ import annotations

from datetime import UTC

from google.protobuf.timestamp_pb2 import Timestamp

from raygate.contract.explain import ExplainReply, NodeReply
from raygate.contract.proto.raygate.v1 import explain_pb2 as pb

__all__ = ["from_proto", "to_proto"]


def to_proto(reply: ExplainReply) -> pb.Explanation:
    until = None
    if reply.thrash_guard_until is not None:
        until = Timestamp(seconds=int(reply.thrash_guard_until.timestamp()))
    return pb.Explanation(
        pod=reply.pod, verdict=reply.verdict, rule=reply.rule, role=reply.role,
        reason=reply.reason, thrash_guard_until=until,
        thrash_guard_active=reply.thrash_guard_active,
        admission_state=reply.admission_state or "",
        admission_reason=reply.admission_reason or "",
        native_placement=reply.native_placement or "",
        nodes=[pb.NodeExplanation(name=n.name, node_class=n.node_class,
                                  class_reason=n.class_reason, passes=n.passes, rule=n.rule,
                                  reason=n.reason, score=n.score)
               for n in reply.nodes],
    )


def from_proto(message: pb.Explanation) -> ExplainReply:
    until = None
    if message.HasField("thrash_guard_until"):
        until = message.thrash_guard_until.ToDatetime(UTC)
    return ExplainReply(
        pod=message.pod, verdict=message.verdict, rule=message.rule, role=message.role,
        reason=message.reason, thrash_guard_until=until,
        thrash_guard_active=message.thrash_guard_active,
        admission_state=message.admission_state or None,
        admission_reason=message.admission_reason or None,
        native_placement=message.native_placement or None,
        nodes=[NodeReply(n.name, n.node_class, n.class_reason, n.passes, n.rule, n.reason,
                         n.score if n.HasField("score") else None) for n in message.nodes],
    )
