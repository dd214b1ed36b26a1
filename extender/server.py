"""One process serving HTTP (uvicorn, raw ASGI) and gRPC (grpc.aio) on one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from extender.admission_api import AdmissionService, admission_routes
from extender.cache import ClusterCache
from extender.explain import SERVICE_NAME as EXPLAIN_SERVICE
from extender.explain import ExplainService, add_explain_service, explain_routes
from extender.grpc_api import SERVICE_NAME as ADMISSION_SERVICE
from extender.grpc_api import add_admission_service
from extender.http import (
    DEFAULT_MAX_BODY,
    AsyncRoute,
    Route,
    create_app,
    health_routes,
    metrics_routes,
    scheduler_routes,
    volcano_routes,
    webhook_routes,
)
from extender.metrics import Metrics
from extender.scheduler_api import SchedulerExtender
from extender.volcano_api import VolcanoExtender

__all__ = ["RaygateServer", "WebhookListener", "bind_socket"]

log = logging.getLogger("raygate.server")


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


class _HttpServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # raygate handles SIGTERM/SIGINT itself for both servers and exits 0; uvicorn's
        # own handling re-raises the signal after shutdown (exit status -15).
        yield


class RaygateServer:
    """The HTTP and gRPC servers over one cache. ``run`` serves until ``stop``."""

    def __init__(
        self,
        cache: ClusterCache,
        http_sock: socket.socket,
        grpc_addr: str,
        *,
        scheduler: SchedulerExtender | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        webhook: WebhookListener | None = None,
    ) -> None:
        self.cache = cache
        self.http_sock = http_sock
        self.http_port: int = http_sock.getsockname()[1]
        self.grpc_addr = grpc_addr
        self.grpc_port = 0
        # A registry per server: several servers in one process count apart.
        self.metrics = Metrics()
        self.scheduler = scheduler or SchedulerExtender(cache)
        self.scheduler.bind_metrics(self.metrics)
        self.started = asyncio.Event()
        # The admission status reads the scheduler's clock: one notion of `now`.
        self.admission = AdmissionService(cache, self.scheduler.clock)
        self.explain = ExplainService(cache, self.scheduler.clock)
        self.metrics.watch_cache(cache)
        self.metrics.watch_admission(self.admission)
        # Every HTTP route raygate serves; each API module contributes its own.
        routes: dict[str, Route | AsyncRoute] = {
            **health_routes(cache),
            **metrics_routes(self.metrics),
            **scheduler_routes(self.scheduler),
            **volcano_routes(VolcanoExtender(cache, self.scheduler.clock, self.metrics)),
            **admission_routes(self.admission),
            **explain_routes(self.explain),
        }
        config = uvicorn.Config(
            create_app(routes, max_body, self.metrics),
            http="httptools",
            lifespan="off",
            access_log=False,
            log_config=None,
            # kube-scheduler keeps its connections alive between scheduling cycles.
            timeout_keep_alive=75,
        )
        self._http = _HttpServer(config)
        self._grpc: grpc.aio.Server | None = None
        self._webhook: _HttpServer | None = None
        self.webhook = webhook
        if webhook is not None:
            # The API server calls admission webhooks over HTTPS only: a listener of its
            # own, so the scheduler path on the main port stays plain HTTP on localhost.
            self._webhook = _HttpServer(uvicorn.Config(
                create_app({**health_routes(cache), **webhook_routes()}, max_body),
                http="httptools", lifespan="off", access_log=False, log_config=None,
                ssl_certfile=webhook.cert_file, ssl_keyfile=webhook.key_file,
            ))

    async def run(self) -> None:
        if threading.current_thread() is threading.main_thread():
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        self._grpc = grpc.aio.server()
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, self._grpc)
        add_admission_service(self.admission, self._grpc)
        add_explain_service(self.explain, self._grpc)
        reflection.enable_server_reflection(
            (ADMISSION_SERVICE, EXPLAIN_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME),
            self._grpc)
        self.grpc_port = self._grpc.add_insecure_port(self.grpc_addr)
        # Long-polls and Watch streams wait on this loop; the cache may publish from any
        # thread, and the service hops onto the loop with call_soon_threadsafe.
        self.admission.attach(asyncio.get_running_loop())
        await self._grpc.start()
        async def set_health() -> None:
            status = (health_pb2.HealthCheckResponse.SERVING if self.cache.ready
                      else health_pb2.HealthCheckResponse.NOT_SERVING)
            for service in ("", ADMISSION_SERVICE, EXPLAIN_SERVICE):
                await health_servicer.set(service, status)

        await set_health()
        # The cache becomes ready after start when it lists a live cluster: follow it.
        loop = asyncio.get_running_loop()

        def follow(_: object) -> None:
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(set_health()))

        stop_following = self.cache.add_listener(follow)
        log.info("serving HTTP on %s:%d, gRPC on port %d (%s)",
                 *self.http_sock.getsockname()[:2], self.grpc_port, self.cache.source)
        servers = [self._http.serve(sockets=[self.http_sock])]
        if self._webhook is not None and self.webhook is not None:
            servers.append(self._webhook.serve(sockets=[self.webhook.sock]))
        serving = asyncio.ensure_future(asyncio.gather(*servers))
        while not self._http.started and not serving.done():
            await asyncio.sleep(0.005)
        self.started.set()
        try:
            await serving
        finally:
            stop_following()
            self.admission.close()
            await health_servicer.enter_graceful_shutdown()
            await self._grpc.stop(grace=5)

    def stop(self) -> None:
        """Ask both servers to finish in-flight requests and exit; safe from any thread
        through ``loop.call_soon_threadsafe``."""
        # Long-polls and Watch streams end now with what they have; the servers' graceful
        # shutdown would otherwise wait for them.
        self.admission.close()
        self._http.should_exit = True
        if self._webhook is not None:
            self._webhook.should_exit = True
