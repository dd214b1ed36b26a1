"""The sockets raygate listens on and the uvicorn server that serves HTTP on them (the
main listener and the webhook's), with raygate's signal handling and request deadlines.
``raygate.server.server`` puts them together with gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn

from raygate.contract.command import CommandError
from raygate.server.config.settings import ServeSettings
from raygate.server.http.app import HttpApp
from raygate.server.http.deadlines import sweep
from raygate.server.http.fast_path import fast_path_protocol
from raygate.server.metrics.registry import Metrics

__all__ = ["HttpServer", "ListenError", "WebhookListener", "bind_socket", "http_config"]


class ListenError(CommandError):
    """A listener cannot have its address; the message says which one and why."""


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


@dataclass(frozen=True)
class WebhookListener:
    """The HTTPS listener of the admission webhook."""

    sock: socket.socket
    cert_file: str
    key_file: str


class HttpServer(uvicorn.Server):
    """uvicorn's server with raygate's signal handling and request deadlines."""

    def __init__(self, config: uvicorn.Config, name: str, header_timeout: float,
                 metrics: Metrics) -> None:
        super().__init__(config)
        self.header_timeout = header_timeout
        self.timed_out = metrics.requests_timed_out.labels(name)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # raygate handles SIGTERM/SIGINT itself for both servers and exits 0; uvicorn's
        # own handling re-raises the signal after shutdown (exit status -15).
        yield

    async def on_tick(self, counter: int) -> bool:
        # uvicorn ticks every 0.1 s: request deadlines are checked here, not per request.
        closed = sweep(self.server_state.connections, self.header_timeout,
                       asyncio.get_running_loop().time())
        if closed:
            self.timed_out.inc(closed)
        should_exit: bool = await super().on_tick(counter)
        return should_exit

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn closes the listener, lets in-flight requests finish within
        # timeout_graceful_shutdown and then cancels them, but leaves their connections
        # open: cut them, so that nobody waits on a server that has gone.
        await super().shutdown(sockets=sockets)
        for connection in list(self.server_state.connections):
            connection.transport.close()


def http_config(app: HttpApp, settings: ServeSettings,
                 context: ssl.SSLContext | None) -> uvicorn.Config:
    config = uvicorn.Config(
        app,
        # The scheduler's verbs are answered inside the protocol; the rest through ASGI.
        http=fast_path_protocol(app.sync),
        # raygate reads neither the client address nor the scheme of a request.
        proxy_headers=False,
        lifespan="off",
        access_log=False,
        log_config=None,
        # kube-scheduler keeps its connections alive between scheduling cycles.
        timeout_keep_alive=75,
        # Our own context (not file names): its certificate follows the files.
        ssl_context_factory=None if context is None else (lambda _config, _default: context),
    )
    # uvicorn hands this to asyncio.wait_for, which takes float seconds.
    config.timeout_graceful_shutdown = settings.shutdown_grace_seconds  # type: ignore[assignment]
    return config
