"""One process serving HTTP (uvicorn, raw ASGI) and gRPC (grpc.aio) on one event loop, and
the admission webhook's HTTPS on a thread and loop of its own: the listeners and their
lifecycle. What they serve (``Services``) is built by the
composition root, ``raygate.server.app``.

Lifecycle (``stop``, on SIGTERM/SIGINT): ``/readyz`` answers 503 "shutting-down" and gRPC
health NOT_SERVING at once; after ``shutdown_delay_seconds`` (time for the endpoints
controller to take the pod out of its Services) the listeners close, long-polls and
Watch streams end with what they have, and in-flight requests get
``shutdown_grace_seconds`` to finish before they are cut; ``run`` then returns. A second
signal cuts at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from raygate.contract.command import ConfigError
from raygate.server.cache.cluster import ClusterCache
from raygate.server.config.settings import ServeSettings
from raygate.server.controllers.follow import Follower
from raygate.server.fronts.admission.service import AdmissionService
from raygate.server.fronts.health import health_routes
from raygate.server.http.app import HttpApp
from raygate.server.http.routes import AsyncRoute, Route
from raygate.server.kube.leader import Leadership
from raygate.server.listeners import HttpServer, ListenError, WebhookListener, http_config
from raygate.server.metrics.registry import Metrics
from raygate.server.tls import CertReloader, TlsFiles

__all__ = ["CERT_POLL_SECONDS", "GrpcService", "RaygateServer", "Services"]

log = logging.getLogger("raygate.server")

CERT_POLL_SECONDS = 5.0
"""How often certificate files are checked for change. A Secret volume is updated within
the kubelet's sync period (about a minute) anyway."""


GRPC_OPTIONS = (
    # grpc sets SO_REUSEPORT by default: a second raygate on the same port would then
    # start and share it, each client served by either (and answered "not known" by the
    # one with the emptier cache). Without it the second bind fails, as HTTP's does.
    ("grpc.so_reuseport", 0),
)


F = TypeVar("F")


@dataclass(frozen=True)
class GrpcService:
    """A gRPC service the server serves: its full name (health and reflection name it
    too) and what adds its servicer to a server."""

    name: str
    add: Callable[[grpc.aio.Server], None]


@dataclass(frozen=True)
class Services:
    """What the listeners serve, and start and stop with them: built by the composition
    root (``raygate.server.app.build_server``)."""

    cache: ClusterCache
    metrics: Metrics
    leadership: Leadership
    admission: AdmissionService
    """Its long-polls and Watch streams end as the drain begins (one of ``followers``)."""
    routes: dict[str, Route | AsyncRoute]
    """The main listener's, but ``/healthz`` and ``/readyz``: those follow the server's
    own lifecycle (``stop`` makes ``/readyz`` answer 503), so the server adds them."""
    webhook_routes: dict[str, Route] = field(default_factory=dict)
    followers: Sequence[Follower] = ()
    """What follows the cache beside the requests: attached to the server's loop in
    this order when it starts, closed in the reverse order when it ends."""
    grpc_services: Sequence[GrpcService] = ()
    grpc_interceptors: Sequence[grpc.aio.ServerInterceptor] = ()

    def follower(self, kind: type[F]) -> F | None:
        """The follower of type ``kind``, if one runs."""
        return next((f for f in self.followers if isinstance(f, kind)), None)


class RaygateServer:
    """The HTTP and gRPC listeners over ``services``. ``run`` serves until ``stop``."""

    def __init__(
        self,
        services: Services,
        http_sock: socket.socket,
        grpc_addr: str,
        *,
        settings: ServeSettings = ServeSettings(),  # noqa: B008 - frozen, never mutated
        webhook: WebhookListener | None = None,
        cert_poll_seconds: float = CERT_POLL_SECONDS,
    ) -> None:
        """``webhook``: the admission webhook's listener, serving ``services.webhook_routes``."""
        self.services = services
        self.cache = services.cache
        self.metrics = services.metrics
        self.settings = settings
        self.http_sock = http_sock
        self.http_port: int = http_sock.getsockname()[1]
        self.grpc_addr = grpc_addr
        self.grpc_port = 0
        self.cert_poll_seconds = cert_poll_seconds
        self.shutting_down = False  # set by ``stop``: /readyz answers 503 from then on
        self.started = asyncio.Event()
        self.tls = self._main_tls()
        self.routes = {**self._health_routes(), **services.routes}
        """Every route the main listener serves."""
        self._http = self._main_server()
        self._grpc: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown: asyncio.Future[None] | None = None
        self.webhook = webhook
        self._webhook_tls: CertReloader | None = None
        self._webhook = None if webhook is None else self._webhook_server(webhook)

    def _main_tls(self) -> CertReloader | None:
        tls = _main_tls(self.settings)
        if tls is not None:
            self.metrics.watch_tls("main", tls)
        return tls

    def _health_routes(self) -> dict[str, Route]:
        return health_routes(self.cache, lambda: self.shutting_down)

    def _main_server(self) -> HttpServer:
        settings = self.settings
        return HttpServer(
            http_config(HttpApp(self.routes, settings.max_body_bytes, self.metrics),
                         settings, None if self.tls is None else self.tls.listener_context()),
            "main", settings.header_timeout_seconds, self.metrics)

    def _webhook_server(self, webhook: WebhookListener) -> HttpServer:
        """The API server calls admission webhooks over HTTPS only: a listener of its
        own, whatever the main port serves."""
        settings = self.settings
        tls = self._webhook_tls = CertReloader(
            TlsFiles(webhook.cert_file, webhook.key_file), "webhook TLS")
        self.metrics.watch_tls("webhook", tls)
        routes = {**self._health_routes(), **self.services.webhook_routes}
        return HttpServer(
            http_config(HttpApp(routes, settings.max_body_bytes), settings,
                         tls.listener_context()),
            "webhook", settings.header_timeout_seconds, self.metrics)

    async def run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        grpc_server, health_servicer = self._grpc_server()
        # Long-polls and Watch streams wait on this loop; the cache may publish from any
        # thread, and the service hops onto the loop with call_soon_threadsafe.
        self._follow_cache(loop)
        self.services.leadership.start()
        await grpc_server.start()
        stop_following = await self._follow_health(loop, health_servicer)
        log.info("serving HTTP%s on %s:%d, gRPC%s on port %d (%s)",
                 "S" if self.tls else "", *self.http_sock.getsockname()[:2],
                 " (TLS)" if self.tls else "", self.grpc_port, self.cache.source)
        servers = [self._http.serve(sockets=[self.http_sock])]
        if self._webhook is not None and self.webhook is not None:
            servers.append(asyncio.to_thread(_serve_apart, self._webhook, self.webhook.sock))
        serving = asyncio.ensure_future(asyncio.gather(*servers))
        polling = asyncio.ensure_future(self._poll_certificates())
        while not self._http.started and not serving.done():
            await asyncio.sleep(0.005)
        self.started.set()
        if self.shutting_down and self._shutdown is None:  # stop() came before the loop
            self._shutdown = asyncio.ensure_future(self._drain())
        try:
            await serving
        finally:
            polling.cancel()
            stop_following()
            self._stop_following_cache()
            self.services.leadership.stop()  # when the HTTP server ended without stop(); else done
            if self._shutdown is not None:
                await self._shutdown  # the gRPC server's own grace
            else:  # the HTTP server ended without stop(): a failure, nothing to drain
                await health_servicer.enter_graceful_shutdown()
                await grpc_server.stop(grace=None)

    def _follow_cache(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start what follows the cache's publishes beside the requests (the admission
        statuses, whose long-polls and Watch streams wait on ``loop``, and the
        controllers): the cache may publish from any thread, and each hops onto
        ``loop`` or runs on a thread of its own."""
        for follower in self.services.followers:
            follower.attach(loop)

    def _stop_following_cache(self) -> None:
        for follower in reversed(self.services.followers):
            follower.close()

    async def _follow_health(self, loop: asyncio.AbstractEventLoop,
                             health_servicer: health.aio.HealthServicer
                             ) -> Callable[[], None]:
        """gRPC health as the cache's readiness, now and after each publish (the cache
        becomes ready after start when it lists a live cluster); returns the unfollow."""

        async def set_health() -> None:
            status = (health_pb2.HealthCheckResponse.SERVING if self.cache.ready
                      else health_pb2.HealthCheckResponse.NOT_SERVING)
            for service in ("", *self._grpc_names()):
                # Ignored once shutting down (enter_graceful_shutdown is final).
                await health_servicer.set(service, status)

        await set_health()
        return self.cache.follow_on(loop, lambda: asyncio.ensure_future(set_health()))

    def _grpc_server(self) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
        """The gRPC server: raygate's services, health, reflection, the authorizer's
        interceptor; bound, not yet started."""
        server = self._grpc = grpc.aio.server(
            interceptors=list(self.services.grpc_interceptors), options=GRPC_OPTIONS)
        health_servicer = self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        for service in self.services.grpc_services:
            service.add(server)
        reflection.enable_server_reflection(
            (*self._grpc_names(), health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        try:
            if self.tls is None:
                self.grpc_port = server.add_insecure_port(self.grpc_addr)
            else:
                self.grpc_port = server.add_secure_port(self.grpc_addr,
                                                        self.tls.grpc_credentials())
        except RuntimeError:
            # grpcio (1.85) raises a bare RuntimeError with no reason when the bind fails;
            # raygate.server.app binds the address once before, to name the reason.
            raise ListenError(f"cannot listen on {self.grpc_addr} (gRPC): the address is "
                              "in use or not this machine's") from None
        return server, health_servicer

    def _grpc_names(self) -> tuple[str, ...]:
        return tuple(service.name for service in self.services.grpc_services)

    def stop(self) -> None:
        """Begin the shutdown (see the module's doc); call on the server's loop (a signal
        handler, or ``loop.call_soon_threadsafe``). A second call cuts at once."""
        if self.shutting_down:
            log.warning("stopping now: in-flight requests are cut")
            for server in (self._http, self._webhook):
                if server is not None:
                    server.force_exit = True
                    server.should_exit = True
            if self._shutdown is not None:
                self._shutdown.cancel()  # no more delay, no more grace
                self._shutdown = asyncio.ensure_future(self._cut())
            return
        self.shutting_down = True
        if self._loop is not None:
            self._shutdown = asyncio.ensure_future(self._drain())

    async def _cut(self) -> None:
        self.services.admission.close()
        if self._grpc is not None:
            await self._grpc.stop(grace=None)

    async def _drain(self) -> None:
        settings = self.settings
        log.info("shutting down: not ready now, closing listeners in %gs, then %gs for "
                 "in-flight requests", settings.shutdown_delay_seconds,
                 settings.shutdown_grace_seconds)
        # Stop acting and release the Lease at once: another replica takes over while
        # this one drains its requests (the release is a request or two: off the loop).
        stepping_down = asyncio.ensure_future(asyncio.to_thread(self.services.leadership.stop))
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if settings.shutdown_delay_seconds > 0:
            # Keep serving everything but /readyz while the endpoints controller and the
            # load balancers catch up: a scheduler may still send a request or two.
            await asyncio.sleep(settings.shutdown_delay_seconds)
        # Long-polls and Watch streams end now with what they have; the servers' graceful
        # shutdown would otherwise wait for them.
        self.services.admission.close()
        for server in (self._http, self._webhook):
            if server is not None:
                server.should_exit = True  # uvicorn: close the listener, drain, then cut
        if self._grpc is not None:
            # New RPCs are refused at once; those in flight are cancelled after the grace.
            await self._grpc.stop(grace=settings.shutdown_grace_seconds)
        await stepping_down

    async def _poll_certificates(self) -> None:
        reloaders = [r for r in (self.tls, self._webhook_tls) if r is not None]
        if not reloaders:
            return
        while True:
            await asyncio.sleep(self.cert_poll_seconds)
            for reloader in reloaders:
                try:
                    reloader.check()
                except Exception:
                    # Nobody awaits this task: an exception would end it silently, and
                    # no listener would reload again. Say why, and keep polling.
                    log.exception("%s: checking the certificate files failed",
                                  reloader.name)


def _serve_apart(server: HttpServer, sock: socket.socket) -> None:
    """Serve ``server`` on a thread and event loop of its own until it exits: the admission
    webhook, so that a pod's create never waits behind the main loop's requests and
    controllers. ``stop`` ends it with ``should_exit``, which uvicorn reads each tick."""
    try:
        import uvloop
        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(server.serve(sockets=[sock]))


def _main_tls(settings: ServeSettings) -> CertReloader | None:
    if not (settings.tls_cert or settings.tls_key or settings.client_ca):
        return None
    if not (settings.tls_cert and settings.tls_key):
        # Settings read by config.settings never get here (checked there, naming where
        # each was set); a server built from bare ServeSettings must still not serve
        # plain text when TLS was asked for.
        raise ConfigError(["tls_cert, tls_key: TLS (and client_ca) needs both"])
    return CertReloader(TlsFiles(settings.tls_cert, settings.tls_key, settings.client_ca),
                        "TLS")
