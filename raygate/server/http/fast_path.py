"""The scheduler's requests answered inside the HTTP protocol, without ASGI.

uvicorn's protocol turns every request into an ASGI scope, a request/response cycle, a
task and four ASGI messages. On this machine class that costs about 90 µs of CPU per
request, as much as deciding 500 nodes: an empty round trip measured 110 µs of server
CPU through ASGI against 22 µs for httptools answering in the protocol itself (Go's
net/http: 43 µs). raygate's ``Route`` handlers are ``bytes -> bytes`` functions that never
wait, so a request for one of them is answered where its last byte is parsed: the
handler runs in ``on_message_complete`` and the reply goes out in one write.

Only the plain case takes this path: an exact ``Route`` path and method, a body within
the route's limit and framed by Content-Length (or none), no ``Expect: 100-continue``,
a free slot in the route's gate, nothing queued behind an ASGI request on the
connection. Everything else — unknown paths, other methods, HEAD, chunked or oversized
bodies, a full gate, the long-polls — goes to the ASGI app exactly as before, and it
answers every error (a full gate: 503). A fast request holds its gate's slot from its
head to its last byte, as the ASGI path does. Both paths share ``SyncRoutes``: the same
handlers, error replies and metrics. Connection handling (keep-alive, request deadlines,
flow control, graceful shutdown) stays uvicorn's and ``DeadlineProtocol``'s, with the idle
timeout armed only when a connection is idle: not while a request pipelined behind a fast
reply is under way, not while replies wait unread, and again after the ASGI app answered
before a body's end (where uvicorn would leave the connection with no timeout at all).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from raygate.server.http.app import SyncRoutes
from raygate.server.http.deadlines import DeadlineProtocol
from raygate.server.http.routes import Route

__all__ = ["FastPathProtocol", "fast_path_protocol"]


class FastPathProtocol(DeadlineProtocol):
    """uvicorn's httptools protocol answering ``sync``'s routes itself (see the module)."""

    sync: SyncRoutes
    """The routes; bound per server by ``fast_path_protocol``."""

    _route: Route | None = None
    """The route of the request arriving on the fast path; None otherwise."""
    _close_after = False
    """Shut down while a fast-path request was arriving: answer it, then close."""
    _paused_for_writes = False
    _default_headers: tuple[Any, bytes] = (None, b"")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # A request is under way: no idle timeout until it is answered (a fast reply may
        # have armed one while this request was already in the same read).
        self._unset_keepalive_if_required()

    def _closing(self) -> bool:
        """Closing (``Connection: close``, shutdown) with no fast request arriving: the
        rest of this read is dropped, as uvicorn drops it, handlers not run."""
        return self._route is None and self.transport.is_closing()

    def on_headers_complete(self) -> None:
        if self._closing():
            return
        route = self._fast_route()
        if route is None:
            super().on_headers_complete()
            return
        self._route = route
        if route.gate is not None:
            route.gate.busy += 1
        self._chunks: list[bytes] = []
        self._started = perf_counter()
        self._keep_alive = (self.parser.get_http_version() != "1.0"
                            and self.parser.should_keep_alive())

    def _fast_route(self) -> Route | None:
        route = self.sync.by_raw_path.get(self.url)
        if (route is None or route.discard_body
                or self.expect_100_continue or self.parser.get_method() != route.method
                or self.parser.should_upgrade()):
            return None
        if self.cycle is not None and not self.cycle.response_complete:
            return None  # pipelined behind a request the ASGI app is still answering
        if route.gate is not None and route.gate.busy >= route.gate.limit:
            return None
        length = b""
        for name, value in self.headers:
            if name == b"content-length":
                if length:
                    return None  # twice: the ASGI path refuses it
                length = value
            elif name == b"transfer-encoding":
                return None
        if length and (not length.isdigit() or int(length) > self.sync.limit(route)):
            return None  # the ASGI app answers 413 before reading the body
        return route

    def on_body(self, body: bytes) -> None:
        if self._closing():
            return
        if self._route is None:
            super().on_body(body)
        else:
            self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._closing():
            return
        route = self._route
        if route is None:
            super().on_message_complete()
            if (self.cycle is not None and self.cycle.response_complete and not self.pipeline
                    and not self.transport.is_closing()):
                # The ASGI app answered before the body's end (413, 405, a full gate): its
                # idle timeout was disarmed by the body's rest arriving. Arm it again.
                self._arm_keep_alive()
            return
        self._release()
        self.arriving_since = None  # whole: the request deadline no longer applies
        chunks, self._chunks = self._chunks, []  # an idle connection keeps no body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        path = self.url.decode("ascii")
        sync = self.sync
        timer = sync.timers.get(path, sync.other)
        method = route.method.decode()
        status, reply, content_type = sync.answer(route, method, path, body, timer)
        keep_alive = self._keep_alive and not self._close_after
        head = b"%s%scontent-type: %s\r\ncontent-length: %d\r\n%s\r\n" % (
            STATUS_LINE[status], self._default_header_bytes(), content_type, len(reply),
            b"" if keep_alive else b"connection: close\r\n")
        self.transport.writelines((head, reply))
        if timer is not None:
            timer.done(status, perf_counter() - self._started)
        self.server_state.total_requests += 1
        if not keep_alive:
            self.transport.close()
            return
        if self.flow.write_paused:
            # The client is not reading its replies: stop reading its requests too, and
            # keep the connection while it is slow to read (the ASGI path waits the same).
            self.flow.pause_reading()
            self._paused_for_writes = True
            return
        self._arm_keep_alive()

    def _arm_keep_alive(self) -> None:
        """uvicorn's idle timeout, armed after a reply as it arms it (the next request's
        ``on_message_begin`` disarms it)."""
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def _release(self) -> None:
        """The request has arrived whole, or never will: off the fast path, out of its
        gate."""
        route, self._route = self._route, None
        if route is not None and route.gate is not None:
            route.gate.busy -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        super().connection_lost(exc)

    def _default_header_bytes(self) -> bytes:
        """uvicorn's default headers (``date``, ``server``) as bytes; the list is replaced
        once a second, when the date changes."""
        headers = self.server_state.default_headers
        cached, raw = self._default_headers
        if cached is not headers:
            raw = b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)
            self._default_headers = (headers, raw)
        return raw

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._paused_for_writes:
            self._paused_for_writes = False
            self.flow.resume_reading()
            idle = self._route is None and (self.cycle is None or self.cycle.response_complete)
            if idle and not self.pipeline:
                self._arm_keep_alive()

    def shutdown(self) -> None:
        if self._route is not None:
            self._close_after = True
        else:
            super().shutdown()


def fast_path_protocol(sync: SyncRoutes) -> type[FastPathProtocol]:
    """The protocol class for one server, bound to its routes."""
    return type("FastPathProtocol", (FastPathProtocol,), {"sync": sync})
