"""What the API-server double (``testkit.apiserver``) holds, as kube-apiserver over etcd
does: one resourceVersion counter for every write (etcd's revision), each collection's
objects and the history of their changes, the LIST states a continue token points into,
and the watches open on them. No HTTP here: ``testkit.apiserver_http`` serves it.

Objects are kept as JSON bytes, so a benchmark can load 150,000 pods cheaply: a write
given bytes replaces ``"__RV__"`` in them with the new resourceVersion."""

from __future__ import annotations

import base64
import json
import queue
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from testkit.resources import CORE, Collection, Key, Obj, status
from testkit.watch_list import bookmark_object

__all__ = ["RV_PLACEHOLDER", "Store", "Watch"]

RV_PLACEHOLDER = b"__RV__"
KEPT_LISTS = 8
"""LIST states whose continue tokens stay valid (the oldest go first)."""


@dataclass
class Watch:
    """One open watch: the event lines waiting to be written to its connection."""

    collection: Collection
    bookmarks: bool
    lines: queue.SimpleQueue[bytes | None] = field(default_factory=queue.SimpleQueue)
    sock: socket.socket | None = None
    dropped: bool = False


class _Refused(Exception):
    """A LIST the double answers with an error Status."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.body = status(code, reason, message)


@dataclass
class _Kept:
    """One collection's objects and their history."""

    collection: Collection
    objects: dict[Key, bytes] = field(default_factory=dict)
    history: list[tuple[int, bytes]] = field(default_factory=list)
    """(resourceVersion, event line) of every change since ``since``."""
    since: int = 0
    """The oldest version a watch may start from (the history's start)."""


class Store:
    """Every core kind's objects; custom ones only once ``install``ed."""

    def __init__(self, *, gone_as_http: bool = False) -> None:
        self.gone_as_http = gone_as_http
        """Answer a too-old watch version with HTTP 410 instead of an ERROR event."""
        self.watch_list = True
        """Serve the streaming list (kube-apiserver's WatchList gate); False refuses it."""
        self.initial_events_end = True
        """False: a streaming list's state is sent, but not the bookmark that ends it
        (a server that takes the parameters and does not do what they ask)."""
        self._lock = threading.RLock()
        self._rv = 1000
        self._kept: dict[str, _Kept] = {c.path: _Kept(c) for c in CORE}
        self._installed: dict[str, Collection] = {}
        self._watches: list[Watch] = []
        self._lists: dict[str, tuple[int, list[bytes]]] = {}
        self._next_list = 0

    # --- content --------------------------------------------------------------------------
    def install(self, collection: Collection) -> None:
        """Serve a custom resource, as a CRD being created does."""
        with self._lock:
            self._installed[collection.path] = collection
            self._kept.setdefault(collection.path, _Kept(collection, since=self._rv))

    def uninstall(self, collection: Collection) -> None:
        """Stop serving it; its objects and watches go, as when a CRD is deleted."""
        with self._lock:
            self._installed.pop(collection.path, None)
            self._kept.pop(collection.path, None)
            for watch in [w for w in self._watches if w.collection == collection]:
                self._watches.remove(watch)
                watch.lines.put(None)

    def served(self, collection: Collection) -> bool:
        return collection.path in self._kept

    def installed(self, group_version: str) -> list[Collection]:
        """The custom resources installed in ``group_version`` (its discovery)."""
        with self._lock:
            return [c for c in self._installed.values() if c.api_version == group_version]

    def collection_at(self, path: str) -> Collection | None:
        """The collection served at ``path`` (``/api/v1/pods``), if any."""
        kept = self._kept.get(path)
        return None if kept is None else kept.collection

    @property
    def resource_version(self) -> int:
        return self._rv

    def create(self, obj: Obj) -> int:
        return self._write("ADDED", obj)

    def update(self, obj: Obj) -> int:
        return self._write("MODIFIED", obj)

    def delete(self, obj: Obj) -> int:
        return self._write("DELETED", obj)

    def write_raw(self, collection: Collection, type_: str, key: Key, body: bytes) -> int:
        """A write of pre-encoded JSON; ``"__RV__"`` in it becomes the new version."""
        with self._lock:
            kept = self._kept_of(collection)
            self._rv += 1
            data = body.replace(RV_PLACEHOLDER, str(self._rv).encode())
            if type_ == "DELETED":
                kept.objects.pop(key, None)
            else:
                kept.objects[key] = data
            self._publish(kept, b'{"type":"%s","object":%s}\n' % (type_.encode(), data))
            return self._rv

    def load_raw(self, collection: Collection, items: Iterable[tuple[Key, bytes]]) -> None:
        """Objects that exist before any watch (no events), each at a new version."""
        with self._lock:
            kept = self._kept_of(collection)
            for key, body in items:
                self._rv += 1
                kept.objects[key] = body.replace(RV_PLACEHOLDER, str(self._rv).encode())
            kept.since = self._rv

    def objects(self, collection: Collection) -> dict[Key, Obj]:
        """The current objects, decoded."""
        with self._lock:
            return {k: json.loads(v) for k, v in self._kept_of(collection).objects.items()}

    def count(self, collection: Collection) -> int:
        return len(self._kept_of(collection).objects)

    # --- faults ---------------------------------------------------------------------------
    def compact(self) -> None:
        """Forget the history: watches from an older version now get 410."""
        with self._lock:
            for kept in self._kept.values():
                kept.history.clear()
                kept.since = self._rv
            self._lists.clear()

    def drop_watches(self, collection: Collection | None = None) -> int:
        """Cut open watch connections (no final chunk): a network failure."""
        with self._lock:
            chosen = [w for w in self._watches if collection in (None, w.collection)]
            for watch in chosen:
                self._watches.remove(watch)
                watch.dropped = True
                watch.lines.put(None)
        return len(chosen)

    def end_watches(self, collection: Collection | None = None) -> int:
        """End open watches cleanly, as the server's timeout does."""
        with self._lock:
            chosen = [w for w in self._watches if collection in (None, w.collection)]
            for watch in chosen:
                self._watches.remove(watch)
                watch.lines.put(None)
        return len(chosen)

    def send_line(self, collection: Collection, line: bytes) -> int:
        """Write ``line`` (a newline is added) to every open watch of ``collection``."""
        with self._lock:
            chosen = [w for w in self._watches if w.collection == collection]
            for watch in chosen:
                watch.lines.put(line + b"\n")
        return len(chosen)

    def bookmark(self, collection: Collection | None = None) -> int:
        with self._lock:
            chosen = [w for w in self._watches
                      if collection in (None, w.collection) and w.bookmarks]
            for watch in chosen:
                watch.lines.put(self.bookmark_line(watch.collection))
        return len(chosen)

    def open_watches(self, collection: Collection | None = None) -> int:
        with self._lock:
            return sum(1 for w in self._watches if collection in (None, w.collection))

    # --- lists and watches, as the HTTP side asks for them ---------------------------------
    def bookmark_line(self, collection: Collection, *, initial_events_end: bool = False,
                      ) -> bytes:
        return b'{"type":"BOOKMARK","object":%s}\n' % bookmark_object(
            collection, self._rv, initial_events_end=initial_events_end)

    def close_watch(self, watch: Watch) -> None:
        """Forget ``watch`` (its connection is done)."""
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def take_watches(self) -> list[Watch]:
        """Every open watch, forgotten: the server stops."""
        with self._lock:
            watches, self._watches = self._watches, []
        return watches

    def list_page(self, collection: Collection, limit: int, token: str,
                  namespace: str = "") -> tuple[int, bytes]:
        with self._lock:
            if collection.path not in self._kept:
                return 404, status(404, "NotFound", f"{collection.plural} not found")
            try:
                list_id, rv, items, start = (self._continued(token) if token
                                             else self._new_list(collection, namespace))
            except _Refused as refused:
                return refused.code, refused.body
            end = len(items) if limit <= 0 else min(start + limit, len(items))
            continue_ = ""
            if end < len(items):
                continue_ = base64.urlsafe_b64encode(
                    json.dumps({"id": list_id, "start": end}).encode()).decode()
            # kube-apiserver's continue tokens hold no server state: a page may be asked
            # for again until compaction. The double keeps the last few lists' states.
            while len(self._lists) > KEPT_LISTS:
                del self._lists[next(iter(self._lists))]
            page = items[start:end]
        meta = msgspec.json.encode({"resourceVersion": str(rv), "continue": continue_})
        body = b'{"kind":"%sList","apiVersion":"%s","metadata":%s,"items":[%s]}' % (
            collection.kind.encode(), collection.api_version.encode(), meta, b",".join(page))
        return 200, body

    def open_watch(self, collection: Collection, since: str, bookmarks: bool,
                   initial: bool = False) -> tuple[int, bytes, Watch | None]:
        with self._lock:
            kept = self._kept.get(collection.path)
            if kept is None:
                return 404, status(404, "NotFound", f"{collection.plural} not found"), None
            try:
                version = int(since or "0")
            except ValueError:
                return 400, status(400, "BadRequest", f"invalid resourceVersion {since!r}"), None
            watch = Watch(collection, bookmarks)
            if initial or (not self.watch_list and since == "0"):
                # The state at the current version (not older than any asked for), then
                # what comes after it: the watch cache's answer (cacher.go).
                for key in sorted(kept.objects):
                    watch.lines.put(b'{"type":"ADDED","object":%s}\n' % kept.objects[key])
                if initial and bookmarks and self.initial_events_end:
                    watch.lines.put(self.bookmark_line(collection, initial_events_end=True))
            elif version < kept.since:
                return self._too_old(watch, version, kept.since)
            else:
                for rv, line in kept.history:
                    if rv > version:
                        watch.lines.put(line)
            self._watches.append(watch)
            return 200, b"", watch

    # --- internals ------------------------------------------------------------------------
    def _kept_of(self, collection: Collection) -> _Kept:
        kept = self._kept.get(collection.path)
        if kept is None:
            raise KeyError(f"{collection.path} is not served (install it first)")
        return kept

    def _write(self, type_: str, obj: Obj) -> int:
        collection = self._collection_of(obj)
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        meta["resourceVersion"] = RV_PLACEHOLDER.decode()
        return self.write_raw(collection, type_, key, msgspec.json.encode(obj))

    def _collection_of(self, obj: Obj) -> Collection:
        for kept in self._kept.values():
            c = kept.collection
            if c.kind == obj.get("kind") and c.api_version == obj.get("apiVersion"):
                return c
        raise KeyError(f"{obj.get('apiVersion')}/{obj.get('kind')} is not served")

    def _publish(self, kept: _Kept, line: bytes) -> None:
        kept.history.append((self._rv, line))
        for watch in self._watches:
            if watch.collection == kept.collection:
                watch.lines.put(line)

    def _continued(self, token: str) -> tuple[str, int, list[bytes], int]:
        """The LIST state a continue token points into: its id, version, items and the
        first item of the page asked for."""
        try:
            state = json.loads(base64.urlsafe_b64decode(token))
            list_id, start = state["id"], state["start"]
        except (ValueError, KeyError):
            raise _Refused(400, "BadRequest", "invalid continue token") from None
        if list_id not in self._lists:
            raise _Refused(410, "Expired", "The provided continue parameter is too old to "
                           "display a consistent list result.")
        rv, items = self._lists[list_id]
        return list_id, rv, items, start

    def _new_list(self, collection: Collection, namespace: str,
                  ) -> tuple[str, int, list[bytes], int]:
        """A LIST state of the current objects (of ``namespace``, if one): its id, version,
        items and first item."""
        kept = self._kept[collection.path]
        items = [kept.objects[k] for k in sorted(kept.objects)
                 if not namespace or k[0] == namespace]
        self._next_list += 1
        list_id = str(self._next_list)
        self._lists[list_id] = (self._rv, items)
        return list_id, self._rv, items, 0

    def _too_old(self, watch: Watch, version: int, since: int,
                 ) -> tuple[int, bytes, Watch | None]:
        """A watch from a version the history has outgrown: HTTP 410 (``gone_as_http``),
        or an ERROR event with a 410 Status, as the watch cache answers."""
        message = f"too old resource version: {version} ({since})"
        if self.gone_as_http:
            return 410, status(410, "Expired", message), None
        watch.lines.put(msgspec.json.encode({
            "type": "ERROR", "object": msgspec.json.decode(status(410, "Expired",
                                                                  message))}) + b"\n")
        watch.lines.put(None)
        return 200, b"", watch
