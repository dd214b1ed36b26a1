"""The API-server double's HTTP side (``testkit.apiserver``): what a request sees of it
(``Served``: the store, the review table, the bearer token, the request log and the
faults injected per request) and the handler that answers it, as kube-apiserver does:
LIST pages, chunked watch streams, discovery, reviews, gzip over 128 KiB."""

from __future__ import annotations

import contextlib
import gzip
import json
import queue
import re
import select
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from testkit.resources import Collection, status
from testkit.reviews import ACCESS_REVIEWS, TOKEN_REVIEWS, ReviewTable
from testkit.store import Store, Watch
from testkit.watch_list import initial_events

__all__ = ["Handler", "Served"]

CHUNK_BYTES = 256 * 1024
"""The most a watch stream's chunk holds of the events waiting."""
GZIP_THRESHOLD = 128 * 1024
GZIP_LEVEL = 1
"""kube-apiserver compresses replies over 128 KiB (``defaultGzipThresholdBytes``) at level
1 (``gzipContentEncodingLevel``): k8s.io/apiserver pkg/endpoints/handlers/responsewriters."""
NOT_FOUND = "the server could not find the requested resource"


class Served(Store, ReviewTable):
    """The store and the review table behind a bearer ``token``, with what the handler
    keeps of each request and the faults it injects."""

    def __init__(self, token: str, *, gone_as_http: bool, split_lines: bool) -> None:
        Store.__init__(self, gone_as_http=gone_as_http)
        ReviewTable.__init__(self)
        self.token = token
        self.split_lines = split_lines
        """Write each event line in two chunks (a client must join them)."""
        self.list_delay = 0.0
        """Seconds to wait before each LIST reply: a slow API server."""
        self.bookmark_on_timeout = True
        self.compressed = 0
        """Replies and streams sent gzip-compressed."""
        self.requests: list[tuple[str, dict[str, str]]] = []
        """(path, query) of every request, in order."""
        self._failures: dict[str, list[tuple[int, str]]] = {}
        self._stalled = False
        self._conns: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None

    def stall(self, stalled: bool = True) -> None:
        """Stop (or resume) writing anything to watches: a silent connection."""
        self._stalled = stalled

    def fail_next(self, collection: Collection, code: int, count: int = 1,
                  reason: str = "InternalError") -> None:
        """Answer the next ``count`` requests for ``collection`` with an error Status."""
        self.fail_path(collection.path, code, count, reason)

    def fail_path(self, path: str, code: int, count: int = 1,
                  reason: str = "InternalError") -> None:
        """Answer the next ``count`` requests to ``path`` with an error Status."""
        with self._lock:
            self._failures.setdefault(path, []).extend([(code, reason)] * count)

    def list_requests(self, collection: Collection) -> int:
        return sum(1 for path, q in self.requests
                   if path == collection.path and q.get("watch") != "true"
                   and "continue" not in q)

    def watch_requests(self, collection: Collection) -> int:
        return sum(1 for path, q in self.requests
                   if path == collection.path and q.get("watch") == "true")

    def failure(self, path: str) -> tuple[int, str] | None:
        """The error a request to ``path`` is to get (``fail_path``), if any."""
        with self._lock:
            queued = self._failures.get(path)
            return queued.pop(0) if queued else None


class Handler(BaseHTTPRequestHandler):
    owner: Served
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

    def _authorized(self) -> bool:
        """The request bears the double's token; else it is answered 401."""
        if self.headers.get("Authorization") == f"Bearer {self.owner.token}":
            return True
        self._reply(401, status(401, "Unauthorized", "Unauthorized"))
        return False

    def _injected(self, path: str) -> bool:
        """A failure was queued for ``path`` (``fail_path``): it is the answer."""
        failure = self.owner.failure(path)
        if failure is not None:
            self._reply(failure[0], status(failure[0], failure[1], "injected failure"))
        return failure is not None

    def do_GET(self) -> None:
        owner = self.owner
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        owner.requests.append((url.path, query))
        if not self._authorized():
            return
        if url.path.startswith("/apis/") and url.path.count("/") == 3:
            self._discovery(url.path.removeprefix("/apis/"))
            return
        watch = query.get("watch") in ("true", "1")
        # A namespaced LIST (/api/v1/namespaces/{ns}/pods): the collection, one namespace.
        namespaced = re.fullmatch(r"(/apis?/.+?)/namespaces/([^/]+)/([^/]+)", url.path)
        path, namespace = url.path, ""
        if namespaced is not None and not watch:
            path, namespace = f"{namespaced[1]}/{namespaced[3]}", namespaced[2]
        collection = owner.collection_at(path)
        if collection is None:
            self._one_object(url.path)
            return
        if self._injected(url.path):
            return
        if watch:
            self._watch(collection, query)
            return
        if owner.list_delay:
            time.sleep(owner.list_delay)
        code, body = owner.list_page(collection, int(query.get("limit", "0") or 0),
                                     query.get("continue", ""), namespace)
        self._reply(code, body, compressible=True)

    def _one_object(self, path: str) -> None:
        """A GET of one cluster-scoped object (raygate check reads the RayCluster CRD), or
        404."""
        one = re.fullmatch(r"(/apis?/.+)/([^/]+)", path)
        collection = None if one is None else self.owner.collection_at(one[1])
        if one is None or collection is None:
            self._reply(404, status(404, "NotFound", NOT_FOUND))
            return
        found = self.owner.objects(collection).get(("", one[2]))
        self._reply(*((200, json.dumps(found).encode()) if found is not None else
                      (404, status(404, "NotFound", f"{one[2]} not found"))))

    def do_POST(self) -> None:
        owner = self.owner
        url = urlsplit(self.path)
        owner.requests.append((url.path, {}))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self._authorized():
            return
        if url.path not in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            # Everything else raygate could create does not exist for it: it only reads.
            self._reply(405, status(405, "MethodNotAllowed", "the server does not allow "
                                    "this method on the requested resource"))
            return
        try:
            review = json.loads(body)
        except ValueError:
            self._reply(400, status(400, "BadRequest", "the body is not JSON"))
            return
        owner.record_review(url.path, review)
        owner.review_gate.wait()
        if self._injected(url.path):
            return
        answer = owner.answer_review(url.path, review)
        if isinstance(answer, str):
            self._reply(422, status(422, "Invalid", answer))
            return
        # Reviews are created, not stored: 201 with the review and its status.
        self._reply(201, msgspec.json.encode(answer))

    def _discovery(self, group_version: str) -> None:
        served = self.owner.installed(group_version)
        if not served:
            self._reply(404, status(404, "NotFound", NOT_FOUND))
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
        code, body, watch = owner.open_watch(
            collection, query.get("resourceVersion", ""),
            query.get("allowWatchBookmarks") in ("true", "1"), initial)
        if watch is None:
            self._reply(code, body)
            return
        deadline = time.monotonic() + float(query.get("timeoutSeconds", "1800"))
        # A streaming list (its bookmark asked for) is compressed when the client takes
        # it: each flush a gzip member of its own (watch.go, perFlushGzipWriter).
        compressed = initial is True and watch.bookmarks and self._gzip()
        self._stream_headers(compressed)
        watch.sock = self.connection
        try:
            for data in self._chunks(watch, deadline):
                chunk = gzip.compress(data, GZIP_LEVEL) if compressed else data
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        except OSError:
            watch.dropped = True
        finally:
            owner.close_watch(watch)
        self._end_stream(watch)

    def _stream_headers(self, compressed: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        if compressed:
            self.owner.compressed += 1
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        self.wfile.flush()

    def _end_stream(self, watch: Watch) -> None:
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

    def _chunks(self, watch: Watch, deadline: float) -> Iterator[bytes]:
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
                    yield owner.bookmark_line(watch.collection)
                return
            try:
                line = watch.lines.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                if self._client_gone():
                    return
                continue
            if line is None:
                return
            yield from self._batch(line, watch)

    def _batch(self, line: bytes, watch: Watch) -> Iterator[bytes]:
        """``line`` and whatever else is waiting, in the same chunk, as a busy server
        batches (up to CHUNK_BYTES: a streaming list's state is many chunks); in two
        with ``split_lines``."""
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
        if self.owner.split_lines and len(data) > 1:
            half = len(data) // 2
            yield data[:half]
            yield data[half:]
        else:
            yield data
