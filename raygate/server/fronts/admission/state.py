"""The admission statuses of one snapshot, memoised: an ``Entry`` per RayCluster with its
version and its wire forms, a ``Generation`` per snapshot and time, and what a rebuild may
carry over from the one before (what an edit did not touch)."""

from __future__ import annotations

import hashlib

import msgspec

from raygate.contract import admission_status as wire
from raygate.contract.messages import from_attributes, to_proto
from raygate.contract.proto.raygate.v1 import admission_pb2 as pb
from raygate.policy.admission import AdmissionStatus, Derivation
from raygate.server.cache.snapshot import Changes, Snapshot

Key = tuple[str, str]
"""(namespace, name) of a RayCluster."""


Scope = tuple[str | None, str | None]
"""(namespace, name), None for "any": a cluster, a namespace, or everything."""


def to_wire(status: AdmissionStatus, version: str) -> wire.AdmissionStatus:
    """The policy's status as the API's: the metadata the server gives it (the version
    is the server's), the rest by field name."""
    return wire.AdmissionStatus(
        metadata=wire.Metadata(status.namespace, status.name, version),
        gang=from_attributes(status.gang, wire.Gang),
        groups=from_attributes(status.groups, list[wire.Group]),
        pods=from_attributes(status.pods, list[wire.Pod]))


def version_of(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class Entry:
    """One RayCluster's status in every form a reply needs, each built at most once."""

    __slots__ = ("_events", "_proto", "body", "derivation", "derived_at", "inputs", "key",
                 "status", "version")

    def __init__(self, derivation: Derivation, inputs: tuple[object, ...],
                 derived_at: float) -> None:
        status = derivation.status
        self.key: Key = (status.namespace, status.name)
        self.derivation = derivation
        self.inputs = inputs
        self.derived_at = derived_at
        # The version hashes the content alone (an empty version in its place): equal
        # statuses, equal versions, whenever they were derived.
        unversioned = to_wire(status, "")
        self.version = version_of(msgspec.json.encode(unversioned))
        self.status = msgspec.structs.replace(unversioned, metadata=msgspec.structs.replace(
            unversioned.metadata, version=self.version))
        self.body = msgspec.json.encode(self.status)
        self._proto: pb.AdmissionStatus | None = None
        self._events: dict[str, pb.WatchEvent] = {}

    def proto(self) -> pb.AdmissionStatus:
        """The gRPC message, built on first use and shared by every stream."""
        if self._proto is None:
            self._proto = to_proto(self.status, pb.AdmissionStatus)
        return self._proto

    def watch_event(self, kind: str) -> pb.WatchEvent:
        """The Watch message ``kind`` (ADDED, MODIFIED, DELETED) with this status, built
        once for every stream that sends it."""
        event = self._events.get(kind)
        if event is None:
            event = self._events[kind] = pb.WatchEvent(
                type=pb.WatchEvent.Type.Value(kind), status=self.proto())
        return event


class Generation:
    """The statuses of every RayCluster for one snapshot (and one span of time)."""

    def __init__(self, snapshot: Snapshot, entries: dict[Key, Entry], now: float) -> None:
        self.snapshot = snapshot
        self.entries = entries
        self.derived_at = now
        deadlines = [e.derivation.next_change for e in entries.values()
                     if e.derivation.next_change is not None]
        self.next_change = min(deadlines, default=None)
        self._lists: dict[str | None, tuple[str, bytes, list[Entry]]] = {}

    def select(self, scope: Scope) -> list[Entry]:
        namespace, name = scope
        if name is not None and namespace is not None:
            entry = self.entries.get((namespace, name))
            return [] if entry is None else [entry]
        return sorted((e for e in self.entries.values()
                       if namespace is None or e.key[0] == namespace), key=lambda e: e.key)

    def listing(self, namespace: str | None) -> tuple[str, bytes, list[Entry]]:
        """(version, JSON body, entries) of the list of a namespace (None: all), built once
        per generation from the entries' own bodies."""
        cached = self._lists.get(namespace)
        if cached is None:
            entries = self.select((namespace, None))
            version = version_of(b"\n".join(b"%s/%s=%s" % (e.key[0].encode(), e.key[1].encode(),
                                                     e.version.encode()) for e in entries))
            head = msgspec.json.encode(wire.AdmissionStatusList(
                metadata=wire.ListMetadata(version), items=[]))
            # Splice the pre-encoded statuses into `"items":[]`, the last key.
            body = head[:-2] + b",".join(e.body for e in entries) + b"]}"
            cached = self._lists[namespace] = (version, body, entries)
        return cached


class Build:
    """A generation being derived, a chunk of clusters at a time."""

    __slots__ = ("carried", "changes", "clusters", "done", "entries", "now", "snapshot")

    def __init__(self, snapshot: Snapshot, now: float, carried: dict[Key, Entry],
                 changes: Changes | None) -> None:
        self.snapshot = snapshot
        self.now = now
        self.changes = changes
        """What changed since the generation this build follows (None: unknown)."""
        self.clusters = snapshot.rayclusters()
        self.done = 0
        self.entries: dict[Key, Entry] = {}
        self.carried = carried
        """Entries an abandoned rebuild derived: reused where their inputs still match."""


def untouched(entry: Entry, build: Build) -> bool:
    """Does ``entry`` hold for ``build`` without a look at its inputs? Yes when the
    cache says nothing it reads changed since, and its time has not run out. This
    makes a rebuild cost O(changed clusters), not O(clusters)."""
    changes, now = build.changes, build.now
    if changes is None or entry.key in changes.clusters:
        return False
    if changes.podgroups:
        names: tuple[str, ...] = entry.inputs[-1]  # type: ignore[assignment]
        if any((entry.key[0], name) in changes.podgroups for name in names):
            return False
    next_change = entry.derivation.next_change
    return entry.derived_at <= now and (next_change is None or now < next_change)
