"""One definition per API message: the state names (the policy's enums) against the proto
enums and openapi.json, and the one struct<->protobuf mapping (``raygate.contract.messages``)
on what the hand-written converters it replaced handled: absent messages and times,
optional scalars, empty strings read as None, enum values one side does not know."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum

import msgspec
import pytest
from google.protobuf import struct_pb2
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.message import Message

from raygate.contract.admission_status import (
    AdmissionStatus,
    AdmissionStatusList,
    Advice,
    Gang,
    Group,
    ListMetadata,
    Metadata,
    ObjectReference,
    Pod,
    ScaleGate,
    WatchEvent,
)
from raygate.contract.explain import ExplainReply, NodeReply
from raygate.contract.messages import enum_names, from_proto, to_proto
from raygate.contract.proto.raygate.v1 import admission_pb2 as pb
from raygate.contract.proto.raygate.v1 import explain_pb2 as epb
from raygate.policy.admission import PodAction, PodState, ScaleUp
from raygate.policy.admission.states import GATE_OTHER, GATE_RAYGATE
from tools.openapi_document import DOCUMENT

SCHEMAS = json.loads(DOCUMENT.read_text())["components"]["schemas"]
T = datetime(2026, 11, 30, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(("names", "proto", "schema", "field"), [
    (PodState, pb.Pod.State, "Pod", "state"),
    (PodAction, pb.PodAdvice.Action, "PodAdvice", "action"),
    (ScaleUp, pb.GroupAdvice.Action, "GroupAdvice", "action"),
])
def test_the_names_are_the_policys_in_the_proto_and_the_openapi_document(
        names: type[StrEnum], proto: EnumTypeWrapper, schema: str, field: str) -> None:
    spelled = [member.value for member in names]
    assert list(enum_names(proto.DESCRIPTOR)) == spelled
    assert SCHEMAS[schema]["properties"][field]["enum"] == spelled


def test_a_scale_gates_writer_is_the_policys_in_the_openapi_document() -> None:
    assert SCHEMAS["ScaleGate"]["properties"]["writer"]["enum"] == [GATE_RAYGATE, GATE_OTHER]
    info = msgspec.inspect.type_info(ScaleGate)
    assert isinstance(info, msgspec.inspect.StructType)
    fields = [f.encode_name for f in info.fields]
    assert SCHEMAS["ScaleGate"]["required"] == fields == list(
        SCHEMAS["ScaleGate"]["properties"])
    assert "scaleGates" in SCHEMAS["Group"]["required"]


def _status(pod_state: str, since: datetime | None, source: ObjectReference | None,
            ) -> AdmissionStatus:
    return AdmissionStatus(
        metadata=Metadata("ray", "rc", "v1"),
        gang=Gang(source, "Inqueue", False, 3, 1, "waits"),
        groups=[Group("headgroup", 1, 1, 1, 1, 0, 0, Advice("hold", "the head")),
                Group("w", 2, 2, 0, 0, 2, 1, Advice("hold", "no node"), [
                    ScaleGate("raygate.io/no-node-coming", "raygate", "pod p: none", since,
                              wanted=True, present=False),
                    ScaleGate("kueue.k8s.io/quota-exceeded", "other",
                              "set by another controller", None, wanted=False,
                              present=True)])],
        pods=[Pod("rc-w-a", "uid-a", "w", "", pod_state, "no room", since,
                  Advice("keep", "wait"))])


def _explanation(until: datetime | None, state: str | None, score: int | None,
                 gates: tuple[ScaleGate, ...] = ()) -> ExplainReply:
    return ExplainReply(
        pod="ray/p", verdict="avoid-gpu", rule="floor-avoids-gpu", role="floor",
        reason="why", thrash_guard_until=until, thrash_guard_active=False,
        admission_state=state, admission_reason=state and "in words", native_placement=None,
        nodes=[NodeReply("cpu-1", "cpu", "no GPU", True, "", "passes", score),
               NodeReply("gpu-1", "gpu", "label", False, "floor-avoids-gpu", "no", 0)],
        scale_gates=list(gates))


@pytest.mark.parametrize(("value", "message"), [
    (_status("WaitingForCapacity", T, ObjectReference("PodGroup", "ray", "rc-pg")),
     pb.AdmissionStatus),
    (_status("Stuck", None, None), pb.AdmissionStatus),
    (AdmissionStatusList(metadata=ListMetadata("l1"),
                         items=[_status("Preempted", T, None)]), pb.AdmissionStatusList),
    (WatchEvent("SYNCED", None), pb.WatchEvent),
    (WatchEvent("MODIFIED", _status("Evicted", None, None)), pb.WatchEvent),
    (_explanation(T, "WaitingForCapacity", 10), epb.Explanation),
    (_explanation(None, "NoNodeComing", 10, (
        ScaleGate("raygate.io/no-node-coming", "raygate", "pod p: none", T, wanted=True,
                  present=True),
        ScaleGate("kueue.k8s.io/quota-exceeded", "other", "set by another controller", None,
                  wanted=False, present=True))), epb.Explanation),
    (_explanation(None, None, None), epb.Explanation),
])
def test_a_struct_through_its_message_and_back(value: msgspec.Struct,
                                               message: type[Message]) -> None:
    made = to_proto(value, message)
    assert from_proto(made, type(value)) == value
    assert from_proto(message.FromString(made.SerializeToString()), type(value)) == value


def test_absent_values_on_the_wire() -> None:
    status = to_proto(_status("Starting", None, None), pb.AdmissionStatus)
    assert not status.gang.HasField("source") and not status.pods[0].HasField("since")
    assert status.pods[0].state == pb.Pod.STARTING
    assert status.groups[1].scale_up.action == pb.GroupAdvice.HOLD
    gates = status.groups[1].scale_gates
    assert not gates[0].HasField("since") and not gates[1].HasField("since")
    assert [(g.name, g.wanted, g.present) for g in gates] == [
        ("raygate.io/no-node-coming", True, False), ("kueue.k8s.io/quota-exceeded", False, True)]
    assert list(status.groups[0].scale_gates) == []
    assert to_proto(_status("Starting", T, None), pb.AdmissionStatus).pods[0].since.seconds \
        == int(T.timestamp())
    reply = to_proto(_explanation(None, None, None), epb.Explanation)
    assert not reply.HasField("thrash_guard_until") and not reply.nodes[0].HasField("score")
    assert reply.nodes[1].HasField("score")  # a score of 0 is a score
    assert (reply.admission_state, reply.native_placement) == ("", "")  # no presence


def test_enum_values_one_side_does_not_know() -> None:
    assert to_proto(_status("Levitating", None, None),
                    pb.AdmissionStatus).pods[0].state == pb.Pod.STATE_UNSPECIFIED
    future = pb.AdmissionStatus(pods=[pb.Pod(state=pb.Pod.State.ValueType(42)),
                                      pb.Pod(state=pb.Pod.STATE_UNSPECIFIED)])
    assert [p.state for p in from_proto(future, AdmissionStatus).pods] == ["Unknown"] * 2


def test_a_pair_that_does_not_match_is_refused() -> None:
    class NoScore(msgspec.Struct):
        name: str

    class Fields(msgspec.Struct):
        fields: dict[str, str]

    with pytest.raises(TypeError, match="has fields NoScore lacks"):
        to_proto(NoScore("n"), epb.NodeExplanation)
    with pytest.raises(TypeError, match="a map field"):
        to_proto(Fields({}), struct_pb2.Struct)
