"""The admission-status API's JSON (``raygate.io/v1``), for the server and the client.

Kubernetes-style camelCase keys; every field is always present (``null`` where a value
is absent), so a client reads the same shape whatever the state. ``raygate/server/openapi.json``
describes the same documents; a test checks live replies against it. The same fields, by
the same names, are ``raygate.v1``'s protobuf messages (protos/raygate/v1/admission.proto),
which ``raygate.contract.messages`` maps to and from these structs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TypeVar

import msgspec

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
    "ScaleGate",
    "WatchEvent",
    "changes",
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


class ScaleGate(_Base):
    name: str
    writer: str
    """``raygate`` (a name under ``raygate.io/``) or ``other``."""
    reason: str
    since: datetime | None
    """When its reason began; null when unknown and for another writer's gate."""
    wanted: bool
    present: bool


class Group(_Base):
    name: str
    floor: int
    desired: int
    scheduled: int
    running: int
    pending: int
    preempted: int
    scale_up: Advice
    scale_gates: list[ScaleGate] = msgspec.field(default_factory=list)
    """Always sent; a default so that a reply of a server before it still reads."""


class Pod(_Base):
    name: str
    uid: str
    group: str
    node_name: str
    state: str
    """One of the policy's ``PodState`` values (``raygate.policy.admission.states``, the
    names' one definition; a test holds the proto enum and openapi.json to them)."""
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
