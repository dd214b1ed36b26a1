"""The admission-status API's JSON (``raygate.io/v1``), for the server and the client.

Kubernetes-style camelCase keys; every field is always present (``null`` where a value
is absent), so a client reads the same shape whatever the state. ``raygate/server/openapi.json``
describes the same documents; a test checks live replies against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from google.protobuf.timestamp_pb2 import Timestamp

from raygate.contract.proto.raygate.v1 import admission_pb2 as pb

__all__ = [
    "API_VERSION",
    "AdmissionStatus",
    "AdmissionStatusList",
    "Advice",
    "Gang",
    "Group",
    "ListMetadata",
    "Metadata",
    "ObjectReference",
    "Pod",
    "WatchEvent",
    "changes",
    "from_proto",
    "list_from_proto",
    "to_proto",
]

API_VERSION = "raygate.io/v1"


class _Base(msgspec.Struct, rename="camel"):
    """Kubernetes-style camelCase keys."""


class ObjectReference(_Base):
    kind: str
    namespace: str
    name: str


class Gang(_Base):
    source: ObjectReference | None
    phase: str
    admitted: bool
    min_member: int
    running: int
    reason: str


class Advice(_Base):
    action: str
    reason: str


class Group(_Base):
    name: str
    floor: int
    desired: int
    scheduled: int
    running: int
    pending: int
    preempted: int
    scale_up: Advice


class Pod(_Base):
    name: str
    uid: str
    group: str
    node_name: str
    state: str
    reason: str
    since: datetime | None
    """UTC, whole seconds: msgspec writes it in RFC 3339 as Kubernetes writes times
    (``2026-11-30T04:50:52Z``)."""
    advice: Advice


class Metadata(_Base):
    namespace: str
    name: str
    version: str


class AdmissionStatus(_Base, kw_only=True):
    api_version: str = API_VERSION
    kind: str = "AdmissionStatus"
    metadata: Metadata
    gang: Gang
    groups: list[Group]
    pods: list[Pod]


class ListMetadata(_Base):
    version: str


class AdmissionStatusList(_Base, kw_only=True):
    api_version: str = API_VERSION
    kind: str = "AdmissionStatusList"
    metadata: ListMetadata
    items: list[AdmissionStatus]


class WatchEvent(_Base):
    """What ``raygate.client``'s ``watch`` yields, over either transport: ``type`` is
    ``ADDED``, ``MODIFIED``, ``DELETED`` (status: the last one seen) or ``SYNCED`` (the
    initial state is complete; status None)."""

    type: str
    status: AdmissionStatus | None


T = TypeVar("T")


def changes(sent: Mapping[tuple[str, str], T], now: Mapping[tuple[str, str], T],
            version: Callable[[T], str]) -> list[tuple[str, T]]:
    """The watch events that take a watcher from the statuses ``sent`` to those of ``now``
    (by namespace and name): ADDED, MODIFIED when the version differs (in ``now``'s
    order), then DELETED with the last one sent. Both sides of a watch compute them: the
    server on a change, the HTTP client from successive lists."""
    events: list[tuple[str, T]] = []
    for key, item in now.items():
        last = sent.get(key)
        if last is None:
            events.append(("ADDED", item))
        elif version(last) != version(item):
            events.append(("MODIFIED", item))
    events += [("DELETED", last) for key, last in sent.items() if key not in now]
    return events


# --- the same documents as raygate.v1 protobuf messages ---------------------------------
# JSON spells enum values as the API documents them ("WaitingForCapacity", "keep"); the
# protos as buf style asks (WAITING_FOR_CAPACITY, KEEP). An enum value one side does not
# know becomes 0 (…_UNSPECIFIED) in a message, and "Unknown" in JSON.


def _proto_name(value: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", value).upper()


def _json_name(names: Iterable[str], proto: str) -> str:
    for name in names:
        if _proto_name(name) == proto:
            return name
    return "Unknown"


POD_STATES = (
    "Starting", "WaitingForGangAdmission", "WaitingForCapacity", "Unschedulable",
    "Preempted", "Evicted", "Stuck", "NodeProvisioning", "NoNodeComing",
)
POD_ACTIONS = ("keep", "replace")
SCALE_UP_ACTIONS = ("proceed", "hold")


def _enum(enum: Any, value: str) -> int:
    try:
        number: int = enum.Value(_proto_name(value))
    except ValueError:
        return 0
    return number


def _name(enum: Any, number: int, names: Iterable[str]) -> str:
    try:
        proto: str = enum.Name(number)
    except ValueError:
        return "Unknown"
    return _json_name(names, proto)


def to_proto(status: AdmissionStatus) -> pb.AdmissionStatus:
    gang = status.gang
    return pb.AdmissionStatus(
        metadata=pb.Metadata(namespace=status.metadata.namespace, name=status.metadata.name,
                             version=status.metadata.version),
        gang=pb.Gang(
            source=None if gang.source is None else pb.ObjectReference(
                kind=gang.source.kind, namespace=gang.source.namespace, name=gang.source.name),
            phase=gang.phase, admitted=gang.admitted, min_member=gang.min_member,
            running=gang.running, reason=gang.reason),
        groups=[pb.Group(
            name=g.name, floor=g.floor, desired=g.desired, scheduled=g.scheduled,
            running=g.running, pending=g.pending, preempted=g.preempted,
            scale_up=pb.GroupAdvice(
                action=pb.GroupAdvice.Action.ValueType(
                    _enum(pb.GroupAdvice.Action, g.scale_up.action)),
                reason=g.scale_up.reason))
            for g in status.groups],
        pods=[pb.Pod(
            name=p.name, uid=p.uid, group=p.group, node_name=p.node_name,
            state=pb.Pod.State.ValueType(_enum(pb.Pod.State, p.state)), reason=p.reason,
            since=None if p.since is None else Timestamp(seconds=int(p.since.timestamp())),
            advice=pb.PodAdvice(
                action=pb.PodAdvice.Action.ValueType(_enum(pb.PodAdvice.Action, p.advice.action)),
                reason=p.advice.reason))
            for p in status.pods],
    )


def from_proto(message: pb.AdmissionStatus) -> AdmissionStatus:
    gang = message.gang
    return AdmissionStatus(
        metadata=Metadata(message.metadata.namespace, message.metadata.name,
                          message.metadata.version),
        gang=Gang(
            source=ObjectReference(gang.source.kind, gang.source.namespace, gang.source.name)
            if gang.HasField("source") else None,
            phase=gang.phase, admitted=gang.admitted, min_member=gang.min_member,
            running=gang.running, reason=gang.reason),
        groups=[Group(
            name=g.name, floor=g.floor, desired=g.desired, scheduled=g.scheduled,
            running=g.running, pending=g.pending, preempted=g.preempted,
            scale_up=Advice(_name(pb.GroupAdvice.Action, g.scale_up.action, SCALE_UP_ACTIONS),
                            g.scale_up.reason))
            for g in message.groups],
        pods=[Pod(
            name=p.name, uid=p.uid, group=p.group, node_name=p.node_name,
            state=_name(pb.Pod.State, p.state, POD_STATES), reason=p.reason,
            since=p.since.ToDatetime(UTC) if p.HasField("since") else None,
            advice=Advice(_name(pb.PodAdvice.Action, p.advice.action, POD_ACTIONS),
                          p.advice.reason))
            for p in message.pods],
    )


def list_from_proto(message: pb.AdmissionStatusList) -> AdmissionStatusList:
    return AdmissionStatusList(metadata=ListMetadata(message.metadata.version),
                               items=[from_proto(item) for item in message.items])
