"""A kube-apiserver test double: list and watch over real HTTP on loopback.

It speaks what raygate's list/watch relies on, as kube-apiserver does:

* one resourceVersion counter for every write (etcd's revision), set on each object;
* ``GET <collection>?limit=&continue=``: pages cut from one consistent state, each
  carrying that state's resourceVersion; a continue token the history has outgrown
  answers ``410 Expired``;
* ``GET <collection>?watch=true&resourceVersion=N``: a chunked stream of
  ``{"type": ..., "object": ...}`` lines, every change after N then live ones;
  ``BOOKMARK`` events (``allowWatchBookmarks``); a version older than the history gets
  an ``ERROR`` event with a 410 Status (as the watch cache answers), or an HTTP 410;
  the stream ends cleanly after ``timeoutSeconds``;
* the streaming list (``sendInitialEvents=true`` with ``resourceVersionMatch=
  NotOlderThan``): an ADDED event per object of the current state, in key order, then
  the BOOKMARK annotated ``k8s.io/initial-events-end`` (when bookmarks are allowed),
  then the watch goes on; a plain watch from "" or "0" is one too, as kube-apiserver
  defaults it. With ``watch_list`` False, as an API server with its WatchList gate off,
  ``sendInitialEvents`` is refused (422) and a watch from "0" starts with the state but
  without the bookmark that ends it (the watch cache's legacy answer);
* discovery of the custom resources installed (``GET /apis/<group>/<version>``), 404
  for the others; bearer-token auth (401 without it);
* ``POST`` TokenReviews (``authentication.k8s.io/v1``) and SubjectAccessReviews
  (``authorization.k8s.io/v1``), validated as kube-apiserver validates them, answered
  from a table of tokens (``users``) and of grants (``grant``), as RBAC would: a grant
  with namespace "" (a ClusterRoleBinding) allows every namespace, a grant with a name
  (a rule's ``resourceNames``) only requests for that name, and a subject is a user name
  or one of its groups. A token is valid for the audiences its entry lists (by default
  the API server's own, ``api_audiences``); a TokenReview's ``spec.audiences`` (empty:
  the API server's own) must meet them, else the token does not authenticate, and
  ``status.audiences`` is the intersection, as kube-apiserver answers.

And the faults a client must survive, on demand: dropped connections, a restart (all
connections cut, the port refused until ``start``, the history lost), compaction,
silent (stalled) streams, slow responses, error replies, raw lines of any content.

Objects are kept as JSON bytes, so a benchmark can load 150,000 pods cheaply: a write
given bytes replaces ``"__RV__"`` in them with the new resourceVersion.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import queue
import re
import select
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from testkit.watch_list import bookmark_object, initial_events

__all__ = [
    "ACCESS_REVIEWS",
    "API_AUDIENCES",
    "CORE",
    "CRDS",
    "DRA",
    "TOKEN_REVIEWS",
    "ApiServerDouble",
    "Collection",
    "ReviewUser",
    "kubeconfig_text",
]

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds

RV_PLACEHOLDER = b"__RV__"
KEPT_LISTS = 8
"""LIST states whose continue tokens stay valid (the oldest go first)."""
CHUNK_BYTES = 256 * 1024
"""The most a watch stream's chunk holds of the events waiting."""
GZIP_THRESHOLD = 128 * 1024
GZIP_LEVEL = 1
"""kube-apiserver compresses replies over 128 KiB (``defaultGzipThresholdBytes``) at level
1 (``gzipContentEncodingLevel``): k8s.io/apiserver pkg/endpoints/handlers/responsewriters."""

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
API_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)
"""kube-apiserver's default ``--api-audiences`` (its service account issuer)."""


@dataclass(frozen=True)
class ReviewUser:
    """What a TokenReview answers for a token the double knows."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)
    audiences: tuple[str, ...] = ()
    """What the token is valid for (a projected token's audiences); () for the API
    server's own."""


@dataclass(frozen=True)
class Collection:
    """One resource the double can serve."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        if not self.group:
            return f"/api/{self.version}/{self.plural}"
        return f"/apis/{self.group}/{self.version}/{self.plural}"


CORE = (Collection("Node", "", "v1", "nodes"), Collection("Pod", "", "v1", "pods"),
        Collection("Event", "", "v1", "events"))
CRDS = (
    Collection("RayCluster", "ray.io", "v1", "rayclusters"),
    Collection("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups"),
    Collection("Workload", "kueue.x-k8s.io", "v1beta2", "workloads"),
    Collection("Workload", "kueue.x-k8s.io", "v1beta1", "workloads"),
    Collection("NodeClaim", "karpenter.sh", "v1", "nodeclaims"),
)
DRA = tuple(Collection(kind, "resource.k8s.io", "v1", plural) for kind, plural in (
    ("DeviceClass", "deviceclasses"), ("ResourceSlice", "resourceslices"),
    ("ResourceClaim", "resourceclaims"), ("ResourceClaimTemplate", "resourceclaimtemplates")))
"""Dynamic Resource Allocation (built in since 1.34): ``install`` them for a cluster that
serves it; a double without them is an older cluster."""


def kubeconfig_text(server: str, token: str = "", exec_command: list[str] | None = None,
                    context: str = "double") -> str:
    """A kubeconfig for ``server``: a static token, or an exec credential plugin."""
    if exec_command is not None:
        user: Obj = {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": exec_command[0], "args": exec_command[1:],
            "interactiveMode": "Never",
        }}
    else:
        user = {"token": token}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "double", "user": user}],
        "contexts": [{"name": context, "context": {"cluster": "double", "user": "double"}}],
    }
    return json.dumps(config, indent=1)


@dataclass
class _Watch:
    collection: Collection
    bookmarks: bool
    lines: queue.SimpleQueue[bytes | None] = field(default_factory=queue.SimpleQueue)
    sock: socket.socket | None = None
    dropped: bool = False


@dataclass
class _Store:
    collection: Collection
    objects: dict[Key, bytes] = field(default_factory=dict)
    history: list[tuple[int, bytes]] = field(default_factory=list)
    """(resourceVersion, event line) of every change since ``since``."""
    since: int = 0
    """The oldest version a watch may start from (the history's start)."""


class ApiServerDouble:
    """Serve ``collections`` (all core kinds; custom ones only once ``install``ed)."""

    def __init__(self, token: str = "raygate-test-token", *, host: str = "127.0.0.1",
                 port: int = 0, gone_as_http: bool = False, split_lines: bool = False) -> None:
        self.token = token
        self.host = host
        self.port = port
        self.gone_as_http = gone_as_http
        """Answer a too-old watch version with HTTP 410 instead of an ERROR event."""
        self.split_lines = split_lines
        """Write each event line in two chunks (a client must join them)."""
        self.list_delay = 0.0
        """Seconds to wait before each LIST reply: a slow API server."""
        self.bookmark_on_timeout = True
        self.watch_list = True
        self.compressed = 0
        """Replies and streams sent gzip-compressed."""
        """Serve the streaming list (kube-apiserver's WatchList gate); False refuses it."""
        self.initial_events_end = True
        """False: a streaming list's state is sent, but not the bookmark that ends it
        (a server that takes the parameters and does not do what they ask)."""
        self.requests: list[tuple[str, dict[str, str]]] = []
        """(path, query) of every request, in order."""
        self.users: dict[str, ReviewUser] = {}
        """TokenReview: token -> the user it authenticates; any other token is rejected."""
        self.grants: set[tuple[str, str, str, str, str]] = set()
        """SubjectAccessReview: (subject, verb, namespace, resource, name) allowed; see
        ``grant``."""
        self.audience_aware = True
        """False: answer TokenReviews as an authenticator that ignores ``spec.audiences``
        (an old webhook): no ``status.audiences``, whatever was asked."""
        self.reviews: list[tuple[str, Obj]] = []
        """(path, body) of every review POSTed, in order."""
        self.review_gate = threading.Event()
        """Reviews are answered only while set (clear it to hold them: a slow server)."""
        self.review_gate.set()
        self.api_audiences: tuple[str, ...] = API_AUDIENCES
        """What a token is valid for when its entry names no audiences."""
        self._lock = threading.RLock()
        self._rv = 1000
        self._stores: dict[str, _Store] = {c.path: _Store(c) for c in CORE}
        self._installed: dict[str, Collection] = {}
        self._watches: list[_Watch] = []
        self._lists: dict[str, tuple[int, list[bytes]]] = {}
        self._next_list = 0
        self._failures: dict[str, list[tuple[int, str]]] = {}
        self._stalled = False
        self._conns: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ApiServerDouble:
        double = self

        class Handler(_Handler):
            owner = double

        server = ThreadingHTTPServer((self.host, self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="apiserver-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every connection, watches included (abruptly)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            watches, self._watches = self._watches, []
            conns = list(self._conns)
        for watch in watches:
            watch.dropped = True
            watch.lines.put(None)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)

    def restart(self, *, lose_history: bool = True) -> None:
        """``stop`` then ``start`` on the same port. A restarted kube-apiserver rebuilds
        its watch cache from the current state: older versions are gone (410)."""
        self.stop()
        if lose_history:
            self.compact()
        self.start()

    def kubeconfig(self, path: Path, *, exec_command: list[str] | None = None,
                   context: str = "double") -> Path:
        path.write_text(kubeconfig_text(self.url, self.token, exec_command, context))
        return path

    # --- content --------------------------------------------------------------------------
    def install(self, collection: Collection) -> None:
        """Serve a custom resource, as a CRD being created does."""
        with self._lock:
            self._installed[collection.path] = collection
            self._stores.setdefault(collection.path, _Store(collection, since=self._rv))

    def uninstall(self, collection: Collection) -> None:
        """Stop serving it; its objects and watches go, as when a CRD is deleted."""
        with self._lock:
            self._installed.pop(collection.path, None)
            self._stores.pop(collection.path, None)
            for watch in [w for w in self._watches if w.collection == collection]:
                self._watches.remove(watch)
                watch.lines.put(None)

    def served(self, collection: Collection) -> bool:
        return collection.path in self._stores

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
            store = self._store(collection)
            self._rv += 1
            data = body.replace(RV_PLACEHOLDER, str(self._rv).encode())
            if type_ == "DELETED":
                store.objects.pop(key, None)
            else:
                store.objects[key] = data
            self._publish(store, b'{"type":"%s","object":%s}\n' % (type_.encode(), data))
            return self._rv

    def load_raw(self, collection: Collection, items: Iterable[tuple[Key, bytes]]) -> None:
        """Objects that exist before any watch (no events), each at a new version."""
        with self._lock:
            store = self._store(collection)
            for key, body in items:
                self._rv += 1
                store.objects[key] = body.replace(RV_PLACEHOLDER, str(self._rv).encode())
            store.since = self._rv

    def objects(self, collection: Collection) -> dict[Key, Obj]:
        """The current objects, decoded."""
        with self._lock:
            return {k: json.loads(v) for k, v in self._store(collection).objects.items()}

    def count(self, collection: Collection) -> int:
        return len(self._store(collection).objects)

    # --- reviews --------------------------------------------------------------------------
    def grant(self, subject: str, verb: str, resource: str, namespace: str = "",
              name: str = "") -> None:
        """Allow ``subject`` (a user name or a group) ``verb`` on ``resource`` in
        ``namespace``; "" for every namespace, as a ClusterRoleBinding does. With
        ``name``, only requests naming it (``resourceNames``: a request without a name,
        such as a list, is not allowed by such a rule)."""
        with self._lock:
            self.grants.add((subject, verb, namespace, resource, name))

    def revoke(self, subject: str, verb: str, resource: str, namespace: str = "",
               name: str = "") -> None:
        """Take back a ``grant`` (a RoleBinding deleted)."""
        with self._lock:
            self.grants.discard((subject, verb, namespace, resource, name))

    def allowed(self, user: str, groups: Iterable[str], verb: str, namespace: str,
                resource: str, *, name: str = "") -> bool:
        with self._lock:
            return any((subject, verb, where, resource, named) in self.grants
                       for subject in (user, *groups) for where in {namespace, ""}
                       for named in {name, ""})

    def review_count(self, path: str) -> int:
        with self._lock:
            return sum(1 for p, _ in self.reviews if p == path)

    def fail_path(self, path: str, code: int, count: int = 1,
                  reason: str = "InternalError") -> None:
        """Answer the next ``count`` requests to ``path`` with an error Status."""
        with self._lock:
            self._failures.setdefault(path, []).extend([(code, reason)] * count)

    # --- faults ---------------------------------------------------------------------------
    def compact(self) -> None:
        """Forget the history: watches from an older version now get 410."""
        with self._lock:
            for store in self._stores.values():
                store.history.clear()
                store.since = self._rv
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
                watch.lines.put(self._bookmark_line(watch.collection))
        return len(chosen)

    def stall(self, stalled: bool = True) -> None:
        """Stop (or resume) writing anything to watches: a silent connection."""
        self._stalled = stalled

    def fail_next(self, collection: Collection, code: int, count: int = 1,
                  reason: str = "InternalError") -> None:
        """Answer the next ``count`` requests for ``collection`` with an error Status."""
        with self._lock:
            self._failures.setdefault(collection.path, []).extend([(code, reason)] * count)

    def open_watches(self, collection: Collection | None = None) -> int:
        with self._lock:
            return sum(1 for w in self._watches if collection in (None, w.collection))

    def list_requests(self, collection: Collection) -> int:
        return sum(1 for path, q in self.requests
                   if path == collection.path and q.get("watch") != "true"
                   and "continue" not in q)

    def watch_requests(self, collection: Collection) -> int:
        return sum(1 for path, q in self.requests
                   if path == collection.path and q.get("watch") == "true")

    # --- internals ------------------------------------------------------------------------
    def _store(self, collection: Collection) -> _Store:
        store = self._stores.get(collection.path)
        if store is None:
            raise KeyError(f"{collection.path} is not served (install it first)")
        return store

    def _write(self, type_: str, obj: Obj) -> int:
        collection = self._collection_of(obj)
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        meta["resourceVersion"] = RV_PLACEHOLDER.decode()
        return self.write_raw(collection, type_, key, msgspec.json.encode(obj))

    def _collection_of(self, obj: Obj) -> Collection:
        for store in self._stores.values():
            c = store.collection
            if c.kind == obj.get("kind") and c.api_version == obj.get("apiVersion"):
                return c
        raise KeyError(f"{obj.get('apiVersion')}/{obj.get('kind')} is not served")

    def _publish(self, store: _Store, line: bytes) -> None:
        store.history.append((self._rv, line))
        for watch in self._watches:
            if watch.collection == store.collection:
                watch.lines.put(line)

    def _bookmark_line(self, collection: Collection, *, initial_events_end: bool = False,
                       ) -> bytes:
        return b'{"type":"BOOKMARK","object":%s}\n' % bookmark_object(
            collection, self._rv, initial_events_end=initial_events_end)

    def _failure(self, path: str) -> tuple[int, str] | None:
        with self._lock:
            queued = self._failures.get(path)
            return queued.pop(0) if queued else None

    def _list_page(self, collection: Collection, limit: int, token: str,
                   namespace: str = "") -> tuple[int, bytes]:
        with self._lock:
            if collection.path not in self._stores:
                return 404, _status(404, "NotFound", f"{collection.plural} not found")
            if token:
                try:
                    state = json.loads(base64.urlsafe_b64decode(token))
                    list_id, start = state["id"], state["start"]
                except (ValueError, KeyError):
                    return 400, _status(400, "BadRequest", "invalid continue token")
                if list_id not in self._lists:
                    return 410, _status(410, "Expired", "The provided continue parameter is "
                                        "too old to display a consistent list result.")
                rv, items = self._lists[list_id]
            else:
                store = self._stores[collection.path]
                rv = self._rv
                items = [store.objects[k] for k in sorted(store.objects)
                         if not namespace or k[0] == namespace]
                start = 0
                self._next_list += 1
                list_id = str(self._next_list)
                self._lists[list_id] = (rv, items)
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

    def _open_watch(self, collection: Collection, since: str, bookmarks: bool,
                    initial: bool = False) -> tuple[int, bytes, _Watch | None]:
        with self._lock:
            store = self._stores.get(collection.path)
            if store is None:
                return 404, _status(404, "NotFound", f"{collection.plural} not found"), None
            try:
                version = int(since or "0")
            except ValueError:
                return 400, _status(400, "BadRequest", f"invalid resourceVersion {since!r}"), None
            watch = _Watch(collection, bookmarks)
            if initial or (not self.watch_list and since == "0"):
                # The state at the current version (not older than any asked for), then
                # what comes after it: the watch cache's answer (cacher.go).
                for key in sorted(store.objects):
                    watch.lines.put(b'{"type":"ADDED","object":%s}\n' % store.objects[key])
                if initial and bookmarks and self.initial_events_end:
                    watch.lines.put(self._bookmark_line(collection, initial_events_end=True))
                self._watches.append(watch)
                return 200, b"", watch
            if version < store.since:
                message = f"too old resource version: {version} ({store.since})"
                if self.gone_as_http:
                    return 410, _status(410, "Expired", message), None
                watch.lines.put(msgspec.json.encode({
                    "type": "ERROR", "object": msgspec.json.decode(_status(410, "Expired",
                                                                           message))}) + b"\n")
                watch.lines.put(None)
                return 200, b"", watch
            for rv, line in store.history:
                if rv > version:
                    watch.lines.put(line)
            self._watches.append(watch)
            return 200, b"", watch


def _token_review(owner: ApiServerDouble, review: Any) -> Obj | str:
    """The TokenReview with its status, or why kube-apiserver would refuse it."""
    if not isinstance(review, dict) or review.get("apiVersion") != "authentication.k8s.io/v1" \
            or review.get("kind") != "TokenReview":
        return "expected a TokenReview of authentication.k8s.io/v1"
    token = (review.get("spec") or {}).get("token")
    if not isinstance(token, str) or not token:
        return "spec.token: Required value"
    asked = (review.get("spec") or {}).get("audiences") or []
    user = owner.users.get(token)
    # As kube-apiserver answers: every status field is omitempty.
    status: Obj = {"user": {}}
    if user is not None and not owner.audience_aware:
        status = {"authenticated": True, "user": _user_info(user)}
    elif user is not None:
        # An empty spec.audiences means the API server's own; the answer's audiences are
        # those asked for that the token is valid for, and none means unauthenticated.
        wanted = asked or list(owner.api_audiences)
        valid = [a for a in wanted if a in (user.audiences or owner.api_audiences)]
        if valid:
            status = {"authenticated": True, "user": _user_info(user), "audiences": valid}
        else:
            status = {"user": {}, "error": "[invalid bearer token, token audiences "
                      f"{list(user.audiences or owner.api_audiences)} is invalid for the "
                      f"target audiences {wanted}]"}
    return {**review, "metadata": {"creationTimestamp": None}, "status": status}


def _user_info(user: ReviewUser) -> Obj:
    info: Obj = {"username": user.username, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    if user.extra:
        info["extra"] = user.extra
    return info


def _access_review(owner: ApiServerDouble, review: Any) -> Obj | str:
    """The SubjectAccessReview with its status, or why kube-apiserver would refuse it."""
    if not isinstance(review, dict) or review.get("apiVersion") != "authorization.k8s.io/v1" \
            or review.get("kind") != "SubjectAccessReview":
        return "expected a SubjectAccessReview of authorization.k8s.io/v1"
    spec = review.get("spec") or {}
    attributes = spec.get("resourceAttributes")
    if not isinstance(attributes, dict) and not spec.get("nonResourceAttributes"):
        return "spec.resourceAttributes: exactly one of resourceAttributes and " \
               "nonResourceAttributes must be specified"
    if not spec.get("user") and not spec.get("groups"):
        return "spec.user: at least one of user or group must be specified"
    unknown = set(spec) - {"resourceAttributes", "nonResourceAttributes", "user", "groups",
                           "extra", "uid"}
    if unknown:
        return f"spec: unknown fields {sorted(unknown)}"
    attributes = attributes or {}
    allowed = owner.allowed(spec.get("user", ""), spec.get("groups") or (),
                            attributes.get("verb", ""), attributes.get("namespace", ""),
                            f"{attributes.get('resource', '')}.{attributes.get('group', '')}",
                            name=attributes.get("name", ""))
    status: Obj = {"allowed": allowed}
    if allowed:
        status["reason"] = "allowed by the double's grant table"
    return {**review, "metadata": {"creationTimestamp": None}, "status": status}


def _status(code: int, reason: str, message: str) -> bytes:
    return msgspec.json.encode({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": message, "reason": reason,
                                "code": code})


class _Handler(BaseHTTPRequestHandler):
    owner: ApiServerDouble
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner._conns.add(self.connection)

    def finish(self) -> None:
        with self.owner._lock:
            self.owner._conns.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _gzip(self) -> bool:
        """The client takes gzip (kube-apiserver's ContentEncodingSupported)."""
        accepted = self.headers.get("Accept-Encoding") or ""
        return any(token.strip() == "gzip" for token in accepted.split(","))

    def _reply(self, code: int, body: bytes, *, compressible: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if compressible and len(body) > GZIP_THRESHOLD and self._gzip():
            # kube-apiserver's deferredResponseWriter: a reply over 128 KiB, at level 1.
            body = gzip.compress(body, GZIP_LEVEL)
            self.owner.compressed += 1
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        owner = self.owner
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        owner.requests.append((url.path, query))
        if self.headers.get("Authorization") != f"Bearer {owner.token}":
            self._reply(401, _status(401, "Unauthorized", "Unauthorized"))
            return
        if url.path.startswith("/apis/") and url.path.count("/") == 3:
            self._discovery(url.path.removeprefix("/apis/"))
            return
        # A namespaced LIST (/api/v1/namespaces/{ns}/pods): the collection, one namespace.
        namespaced = re.fullmatch(r"(/apis?/.+?)/namespaces/([^/]+)/([^/]+)", url.path)
        path, namespace = url.path, ""
        if namespaced is not None and query.get("watch") not in ("true", "1"):
            path, namespace = f"{namespaced[1]}/{namespaced[3]}", namespaced[2]
        store = owner._stores.get(path)
        one = re.fullmatch(r"(/apis?/.+)/([^/]+)", url.path)
        if store is None and one is not None and one[1] in owner._stores:
            # A GET of one cluster-scoped object (raygate check reads the RayCluster CRD).
            found = owner.objects(owner._stores[one[1]].collection).get(("", one[2]))
            self._reply(*((200, json.dumps(found).encode()) if found is not None else
                          (404, _status(404, "NotFound", f"{one[2]} not found"))))
            return
        if store is None:
            self._reply(404, _status(404, "NotFound", "the server could not find the "
                                     "requested resource"))
            return
        failure = owner._failure(url.path)
        if failure is not None:
            self._reply(failure[0], _status(failure[0], failure[1], "injected failure"))
            return
        if query.get("watch") in ("true", "1"):
            self._watch(store.collection, query)
            return
        if owner.list_delay:
            time.sleep(owner.list_delay)
        code, body = owner._list_page(store.collection, int(query.get("limit", "0") or 0),
                                      query.get("continue", ""), namespace)
        self._reply(code, body, compressible=True)

    def do_POST(self) -> None:
        owner = self.owner
        url = urlsplit(self.path)
        owner.requests.append((url.path, {}))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Authorization") != f"Bearer {owner.token}":
            self._reply(401, _status(401, "Unauthorized", "Unauthorized"))
            return
        if url.path not in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            # Everything else raygate could create does not exist for it: it only reads.
            self._reply(405, _status(405, "MethodNotAllowed", "the server does not allow "
                                     "this method on the requested resource"))
            return
        try:
            review = json.loads(body)
        except ValueError:
            self._reply(400, _status(400, "BadRequest", "the body is not JSON"))
            return
        with owner._lock:
            owner.reviews.append((url.path, review))
        owner.review_gate.wait()
        failure = owner._failure(url.path)
        if failure is not None:
            self._reply(failure[0], _status(failure[0], failure[1], "injected failure"))
            return
        answer = (_token_review(owner, review) if url.path == TOKEN_REVIEWS
                  else _access_review(owner, review))
        if isinstance(answer, str):
            self._reply(422, _status(422, "Invalid", answer))
            return
        # Reviews are created, not stored: 201 with the review and its status.
        self._reply(201, msgspec.json.encode(answer))

    def _discovery(self, group_version: str) -> None:
        owner = self.owner
        with owner._lock:
            served = [c for c in owner._installed.values() if c.api_version == group_version]
        if not served:
            self._reply(404, _status(404, "NotFound", "the server could not find the "
                                     "requested resource"))
            return
        body = msgspec.json.encode({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [{"name": c.plural, "singularName": c.kind.lower(), "namespaced": True,
                           "kind": c.kind, "verbs": ["get", "list", "watch"]} for c in served],
        })
        self._reply(200, body)

    def _watch(self, collection: Collection, query: dict[str, str]) -> None:
        owner = self.owner
        initial = initial_events(query, owner.watch_list)
        if isinstance(initial, bytes):
            self._reply(422, initial)
            return
        code, body, watch = owner._open_watch(
            collection, query.get("resourceVersion", ""),
            query.get("allowWatchBookmarks") in ("true", "1"), initial)
        if watch is None:
            self._reply(code, body)
            return
        timeout = float(query.get("timeoutSeconds", "1800"))
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        # A streaming list (its bookmark asked for) is compressed when the client takes
        # it: each flush a gzip member of its own (watch.go, perFlushGzipWriter).
        compressed = initial is True and watch.bookmarks and self._gzip()
        if compressed:
            owner.compressed += 1
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        self.wfile.flush()
        watch.sock = self.connection
        try:
            for data in self._chunks(watch, deadline):
                chunk = gzip.compress(data, GZIP_LEVEL) if compressed else data
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        except OSError:
            watch.dropped = True
        finally:
            with owner._lock:
                if watch in owner._watches:
                    owner._watches.remove(watch)
        if watch.dropped:
            # A network failure: no terminating chunk, the connection just goes.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def _client_gone(self) -> bool:
        """The client closed its end (a server notices only when it next writes, or
        looks: this one looks while a watch is idle)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True
        return peeked == b""

    def _chunks(self, watch: _Watch, deadline: float) -> Iterator[bytes]:
        owner = self.owner
        while True:
            if owner._stalled:
                if watch.dropped or owner._server is None:
                    return
                time.sleep(0.01)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if watch.bookmarks and owner.bookmark_on_timeout:
                    # kube-apiserver sends a bookmark just before a watch's timeout.
                    yield owner._bookmark_line(watch.collection)
                return
            try:
                line = watch.lines.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                if self._client_gone():
                    return
                continue
            if line is None:
                return
            # Whatever else is waiting goes in the same chunk, as a busy server batches
            # (up to CHUNK_BYTES: a streaming list's state is many chunks).
            batch = [line]
            size = len(line)
            while size < CHUNK_BYTES:
                try:
                    more = watch.lines.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    watch.lines.put(None)
                    break
                batch.append(more)
                size += len(more)
            data = b"".join(batch)
            if owner.split_lines and len(data) > 1:
                half = len(data) // 2
                yield data[:half]
                yield data[half:]
            else:
                yield data
