"""A deadline on each HTTP request's arrival: head and body within ``timeout`` seconds.

uvicorn's httptools protocol times out idle keep-alive connections only: a client that
sends half a request head, or half a body, and stalls holds its connection (and the
buffered part) for ever. ``DeadlineProtocol`` notes when each request started to arrive
and when it arrived whole; ``sweep`` — run by the server every tenth of a second, never
per request — closes the connections whose request is older than the timeout. The
request path pays two attribute writes and one clock read per request, no task and no
timer; an ASGI app waiting for the rest of a body gets ``http.disconnect``. A connection
raygate stopped reading is not timed out, unless it stopped because the client leaves its
replies unread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["DeadlineProtocol", "sweep"]

log = logging.getLogger("raygate.http")


class DeadlineProtocol(HttpToolsProtocol):
    arriving_since: float | None = None
    """Loop time since when the current request has been arriving; None between
    requests (idle keep-alive is uvicorn's ``timeout_keep_alive``) and once it is whole."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A new connection owes its first request head (Go's ReadHeaderTimeout counts
        # from accept too); a TLS connection is made once its handshake is done.
        self.arriving_since = self.loop.time()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.arriving_since is None:
            self.arriving_since = self.loop.time()

    def on_message_complete(self) -> None:
        # Whole, even when the app has already answered (a 413 before the body's end).
        self.arriving_since = None
        super().on_message_complete()


def sweep(connections: Iterable[Any], timeout: float, now: float) -> int:
    """Close each connection whose request has been arriving longer than ``timeout`` (abort
    it when its client leaves replies unread); the number closed."""
    closed = 0
    for connection in list(connections):
        since = getattr(connection, "arriving_since", None)
        if since is None or now - since <= timeout:
            continue
        flow = connection.flow
        if flow.read_paused and not flow.write_paused:
            # raygate stopped reading (a pipelined request waits for the one before it,
            # or the app has not taken the buffered body yet): not the client's delay.
            connection.arriving_since = now
            continue
        transport = connection.transport
        if transport is not None and not transport.is_closing():
            if flow.write_paused:
                # The client does not read its replies, so raygate stopped reading its
                # request: the client's delay. Its request may hold a predicate slot, and
                # close() would wait for the unread replies to drain: abort.
                log.info("aborting a connection from %s: its request did not arrive within "
                         "%gs while it left %d bytes of replies unread", _client(connection),
                         timeout, transport.get_write_buffer_size())
                transport.abort()
            else:
                log.info("closing a connection from %s: its request did not arrive within "
                         "%gs", _client(connection), timeout)
                transport.close()
            closed += 1
        connection.arriving_since = None
    return closed


def _client(connection: Any) -> str:
    client = getattr(connection, "client", None)
    return f"{client[0]}:{client[1]}" if client else "an unknown client"
