"""``raygate serve`` put together: settings in, a running server out.

The composition root, the one place that decides what runs: where the cluster state comes
from (the demo, snapshot files, or a cluster followed by list/watch), who may read the
status APIs, which services and routes there are (``build_server``), which sockets are
listened on, and what runs beside the server (the watch threads, the policy reload).
A refusal at start is a ``CommandError`` (a ``StartupError``, or the settings', files'
or cluster's own): one line on stderr and exit code 2, before anything is served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

import grpc

from raygate.contract.command import CommandError
from raygate.process import logs
from raygate.process.version import describe
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.keys import ClusterObjects
from raygate.server.cache.snapshot_files import demo_text, load_files, load_text
from raygate.server.config.load import Loaded, authz_enabled
from raygate.server.config.reload import PolicyReloader
from raygate.server.config.settings import ServeSettings, parse_addr
from raygate.server.controllers.admitted_pods import AdmittedPods
from raygate.server.controllers.events import EventApi, EventRecorder
from raygate.server.controllers.floor_budgets import BudgetApi, FloorBudgets
from raygate.server.controllers.follow import Follower
from raygate.server.controllers.gate_release import GateRelease, PatchPod
from raygate.server.controllers.no_node_events import NoNodeComingEvents
from raygate.server.controllers.scale_gates import ScaleGateApi, ScaleGates
from raygate.server.controllers.stale_refusals import Annotate, StaleRefusals
from raygate.server.fronts.admission.http import admission_routes
from raygate.server.fronts.admission.service import AdmissionService
from raygate.server.fronts.admission.servicer import SERVICE_NAME as ADMISSION_SERVICE
from raygate.server.fronts.admission.servicer import add_admission_service
from raygate.server.fronts.explain.http import explain_routes
from raygate.server.fronts.explain.service import ExplainService
from raygate.server.fronts.explain.servicer import SERVICE_NAME as EXPLAIN_SERVICE
from raygate.server.fronts.explain.servicer import add_explain_service
from raygate.server.fronts.scheduler import SchedulerExtender, scheduler_routes
from raygate.server.fronts.volcano import VolcanoExtender, volcano_routes
from raygate.server.fronts.webhook import RayPodWebhook
from raygate.server.http.routes import AsyncRoute, Gate, Route
from raygate.server.kube.client import (
    Connection,
    KubeTransport,
    NoClusterConfig,
    load_connection,
)
from raygate.server.kube.leader import Leadership, LeaseTiming
from raygate.server.kube.lease import identity, lease_elector, lease_namespace
from raygate.server.kube.source import LiveSource
from raygate.server.listeners import WebhookListener, bind_socket
from raygate.server.metrics.registry import Metrics, metrics_routes
from raygate.server.server import CERT_POLL_SECONDS, GrpcService, RaygateServer, Services
from raygate.server.tls import CertReloader, TlsFiles

if TYPE_CHECKING:
    from raygate.server.authz.authorizer import Authorizer

__all__ = ["NO_CLUSTER", "AccessGuard", "StartupError", "build_server", "check_startup", "serve"]

log = logging.getLogger("raygate")

NO_CLUSTER = """no cluster to follow and no cluster state to serve. Give it one of:
  in-cluster config   run raygate in a pod (KUBERNETES_SERVICE_HOST, its service account)
  --kubeconfig FILE   a kubeconfig (and --context NAME to choose a context)
  $KUBECONFIG         a kubeconfig, else ~/.kube/config
  --snapshot FILE     objects as `kubectl get ... -o yaml|json` prints them (repeatable)
  --demo              the demo cluster shipped with raygate"""


class StartupError(CommandError):
    """raygate cannot start as configured; the message says why."""


class AccessGuard(Protocol):
    """Who may read admission status and explanations (``raygate.server.authz.Authorizer``)."""

    def guard_routes(
        self, routes: dict[str, Route | AsyncRoute],
    ) -> dict[str, Route | AsyncRoute]: ...

    def grpc_interceptors(self) -> list[grpc.aio.ServerInterceptor]: ...


@dataclass(frozen=True)
class Source:
    """Where the cluster state comes from: objects loaded once, or a cluster to follow."""

    description: str
    objects: ClusterObjects | None = None
    connection: Connection | None = None


def source_of(settings: ServeSettings) -> Source:
    try:
        if settings.demo:
            return Source("demo cluster", objects=load_text(demo_text(), "demo"))
        if settings.snapshots:
            return Source("snapshot " + ", ".join(settings.snapshots),
                          objects=load_files(settings.snapshots))
        connection = load_connection(settings.kubeconfig or None, settings.context or None)
    except NoClusterConfig:
        raise StartupError(NO_CLUSTER) from None
    return Source(f"cluster {connection.description}", connection=connection)


def authorizer_for(settings: ServeSettings, connection: Connection | None) -> Authorizer | None:
    """The TokenReview/SubjectAccessReview guard of the status APIs, when authz is on."""
    if not authz_enabled(settings, os.environ):
        return None
    if connection is None:  # load_settings refuses `authz: on` with --demo/--snapshot
        raise StartupError("--authz: on needs a cluster to ask")
    # Imported here: only a process that checks callers needs it.
    from raygate.server.authz.authorizer import Authorizer

    return Authorizer.from_connection(connection, settings.authz_cache_seconds,
                                      audiences=settings.authz_audiences)


def _listen(addr: str, flag: str) -> socket.socket:
    try:
        return bind_socket(*parse_addr(addr, flag))
    except OSError as exc:
        raise StartupError(f"cannot listen on {addr}: {exc.strerror}") from None


def _cache(settings: ServeSettings, source: Source) -> ClusterCache:
    cache = ClusterCache(settings.policy, source.description)
    if source.objects is not None:
        cache.publish(build_snapshot(source.objects, settings.policy))
        counts = cache.snapshot.counts()
        log.info("loaded %s: %s; ignored %s", source.description,
                 ", ".join(f"{v} {k}" for k, v in counts.items()),
                 dict(source.objects.ignored) or "nothing")
    return cache


def _server(settings: ServeSettings, cache: ClusterCache, authorizer: Authorizer | None,
            transport: KubeTransport | None, leadership: Leadership | None = None
            ) -> RaygateServer:
    sock = _listen(settings.http_addr, "--http-addr")
    # gRPC binds its own socket when the server runs, and its failure says neither why
    # nor anything but a bare RuntimeError (after a line of gRPC's own on stderr): bind
    # the address once here, to refuse a held port as the HTTP one is, with the reason.
    _listen(settings.grpc_addr, "--grpc-addr").close()
    webhook = None
    if settings.webhook_addr:  # load_settings made sure TLS is there
        webhook = WebhookListener(_listen(settings.webhook_addr, "--webhook-addr"),
                                  settings.webhook_cert, settings.webhook_key)
    annotate = (transport.annotate_pod
                if transport is not None and settings.requeue == "on" else None)
    budgets = (transport if transport is not None and settings.disruption_budgets == "on"
               else None)
    # Whatever placement.native says, a pod raygate's gate holds is released by it.
    server = build_server(cache, sock, settings.grpc_addr, settings=settings,
                          webhook=webhook, authorizer=authorizer, annotate_pod=annotate,
                          budget_api=budgets, leadership=leadership,
                          patch_pod=None if transport is None else transport.patch_pod,
                          event_api=transport, scale_gate_api=transport)
    if authorizer is not None:
        server.metrics.watch_authz(authorizer.counts)
    log.info("authz %s for the admission-status and explain APIs",
             "on" if authorizer is not None else "off")
    return server


def build_server(
    cache: ClusterCache,
    http_sock: socket.socket,
    grpc_addr: str,
    *,
    settings: ServeSettings = ServeSettings(),  # noqa: B008 - frozen, never mutated
    clock: Callable[[], float] = time.time,
    webhook: WebhookListener | None = None,
    authorizer: AccessGuard | None = None,
    cert_poll_seconds: float = CERT_POLL_SECONDS,
    annotate_pod: Annotate | None = None,
    budget_api: BudgetApi | None = None,
    patch_pod: PatchPod | None = None,
    leadership: Leadership | None = None,
    event_api: EventApi | None = None,
    scale_gate_api: ScaleGateApi | None = None,
) -> RaygateServer:
    """Every service over ``cache`` and the routes that serve them, handed to a server
    listening on ``http_sock`` and ``grpc_addr``. ``clock``: every service's notion of
    `now`. ``annotate_pod``, ``budget_api``, ``patch_pod``, ``event_api``: the writes
    raygate makes, None when not made. ``leadership``: the Lease's; None: this replica
    always leads."""
    # A registry per server: several servers in one process count apart.
    metrics = Metrics()
    leadership = leadership or Leadership(None)
    metrics.watch_leadership(leadership)
    admitted = AdmittedPods()  # the webhook's admissions, counted by gated pods' releases
    controllers = _controllers(
        cache, clock, metrics, leadership=leadership, settings=settings,
        annotate_pod=annotate_pod, budget_api=budget_api, patch_pod=patch_pod,
        event_api=event_api, admitted=admitted, scale_gate_api=scale_gate_api)
    scheduler = SchedulerExtender(cache, clock, metrics,
                                  stale_refusals=controllers.stale_refusals)
    admission = AdmissionService(cache, clock)
    explain = ExplainService(cache, clock)
    metrics.watch_cache(cache)
    metrics.watch_admission(admission.pod_states)
    services = Services(
        cache, metrics, leadership, admission,
        _routes(cache, metrics, scheduler, admission=admission, explain=explain,
                authorizer=authorizer, settings=settings),
        webhook_routes={} if webhook is None else RayPodWebhook(
            cache, metrics, place=settings.native_placement == "on",
            marker=settings.webhook_marker == "on", admitted=admitted,
            clock=clock).routes(),
        followers=[*controllers.followers, admission],
        grpc_services=_grpc_services(admission, explain),
        grpc_interceptors=() if authorizer is None else authorizer.grpc_interceptors())
    return RaygateServer(services, http_sock, grpc_addr, settings=settings, webhook=webhook,
                         cert_poll_seconds=cert_poll_seconds)


@dataclass(frozen=True)
class Controllers:
    followers: list[Follower]
    """Those that run, each started with the server (the recorder of Events first, so
    that it is closed last)."""
    stale_refusals: StaleRefusals | None
    """Where filter notes its refusals (``SchedulerExtender``)."""


def _controllers(
    cache: ClusterCache, clock: Callable[[], float], metrics: Metrics, *,
    leadership: Leadership, settings: ServeSettings, annotate_pod: Annotate | None,
    budget_api: BudgetApi | None, patch_pod: PatchPod | None, event_api: EventApi | None,
    admitted: AdmittedPods, scale_gate_api: ScaleGateApi | None = None,
) -> Controllers:
    """The writers, each left out when its write is not made: the Events the leader says
    and the ``NoNodeComing`` ones among them, the stale refusals (asking kube-scheduler
    to try a pod again, ``requeue.staleRefusals``; filter notes them), the release of
    gated pods while this replica leads (whatever ``placement.native`` says, a pod
    raygate's gate holds is released by it), the floors' PodDisruptionBudgets
    (``disruptionBudgets``), the worker groups' scale gates while this replica leads
    (``policy.scaleGates``)."""
    events = None if event_api is None else EventRecorder(
        event_api, metrics, identity(), leading=leadership.leading)
    stale = None if annotate_pod is None else StaleRefusals(
        cache, clock, annotate_pod, metrics)
    native = None if patch_pod is None else GateRelease(
        cache, clock, patch_pod, metrics, leading=leadership.leading,
        wait_seconds=settings.placement_wait_seconds, admitted=admitted, events=events)
    budgets = None if budget_api is None else FloorBudgets(
        cache, budget_api, metrics, time.monotonic, events=events)
    outlook = None if events is None else NoNodeComingEvents(
        cache, clock, events, leading=leadership.leading)
    gates = None if scale_gate_api is None else ScaleGates(
        cache, scale_gate_api, metrics, clock, leading=leadership.leading)
    running = [events, stale, native, budgets, outlook, gates]
    return Controllers([f for f in running if f is not None], stale)


def _grpc_services(admission: AdmissionService, explain: ExplainService
                   ) -> list[GrpcService]:
    return [GrpcService(ADMISSION_SERVICE, partial(add_admission_service, admission)),
            GrpcService(EXPLAIN_SERVICE, partial(add_explain_service, explain))]


def _routes(cache: ClusterCache, metrics: Metrics, scheduler: SchedulerExtender, *,
            admission: AdmissionService, explain: ExplainService,
            authorizer: AccessGuard | None, settings: ServeSettings,
            ) -> dict[str, Route | AsyncRoute]:
    """Every route of the main listener but health; each API module contributes its own."""
    # Pod names and scheduling reasons: behind the authorizer when there is one. The
    # OpenAPI document describes the API and holds no cluster data.
    private = admission_routes(admission)
    openapi = {"/openapi.json": private.pop("/openapi.json")}
    private.update(explain_routes(explain))
    if authorizer is not None:
        private = authorizer.guard_routes(private)
    return {
        **metrics_routes(metrics),
        **scheduler_routes(scheduler),
        **volcano_routes(VolcanoExtender(cache, scheduler.clock, metrics),
                         Gate(settings.predicate_concurrency)),
        **openapi,
        **private,
    }


def _leadership(settings: ServeSettings, transport: KubeTransport | None) -> Leadership:
    """Of the Lease ``server.leaderElection`` names; without a cluster, or with it off,
    none: this replica leads while it runs."""
    if transport is None or settings.leader_election == "off":
        return Leadership(None)
    timing = LeaseTiming(settings.leader_election_lease_seconds,
                         settings.leader_election_renew_deadline_seconds,
                         settings.leader_election_retry_seconds)
    namespace = lease_namespace(settings.leader_election_lease_namespace)
    elector = lease_elector(transport.api, settings.leader_election_lease_name, namespace,
                            identity(), timing)
    log.info("leader election as %s for the Lease %s/%s", elector.identity, namespace,
             settings.leader_election_lease_name)
    return Leadership(elector, timing)


def check_startup(settings: ServeSettings) -> Source:
    """Every refusal ``serve`` makes before it binds a port (``--print-config`` makes
    them too): the cluster state that cannot be loaded or followed, certificates that
    cannot be used. Raises a ``CommandError``."""
    parse_addr(settings.http_addr, "--http-addr")
    source = source_of(settings)
    # Loaded here only to be refused early; the servers load their own (and reload).
    if settings.tls_cert or settings.tls_key or settings.client_ca:
        CertReloader(TlsFiles(settings.tls_cert, settings.tls_key, settings.client_ca), "TLS")
    if settings.webhook_addr:
        CertReloader(TlsFiles(settings.webhook_cert, settings.webhook_key), "webhook TLS")
    return source


def serve(loaded: Loaded) -> None:
    """Run raygate until it is told to stop; raises a ``CommandError`` before serving, or
    a ``ListenError`` when a port is taken between the check and the bind."""
    settings = loaded.settings
    source = check_startup(settings)
    authorizer = authorizer_for(settings, source.connection)
    # Once the settings hold: a refusal above is a line on stderr, not a log record.
    logs.configure(settings.log_level, settings.log_format)
    log.info("%s starting", describe())
    if not settings.policy.gpu_node_labels:
        # Node autoscalers decide before a node exists: only a label can name a GPU node.
        log.warning("policy.gpuNodeLabels is empty: raygate tells GPU nodes by allocatable "
                    "GPUs only, and writes no native placement rule (node autoscalers and "
                    "schedulers without raygate's extender will not see its rule)")
    with ExitStack() as running:
        if authorizer is not None:
            running.callback(authorizer.close)
        cache = _cache(settings, source)
        transport = None if source.connection is None else KubeTransport(source.connection)
        server = _server(settings, cache, authorizer, transport,
                         _leadership(settings, transport))
        if transport is not None:
            # Serving starts at once: /readyz answers 503 until every kind is listed.
            live = LiveSource(cache, transport)
            live.start()
            running.callback(live.stop)
            log.info("following %s", source.description)
        if loaded.file is not None:
            reloader = PolicyReloader(loaded.file, cache.set_policy).start()
            running.callback(reloader.stop)
            server.metrics.watch_config(reloader.counts)
        _run(server)


def _run(server: RaygateServer) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        asyncio.run(server.run())
        return
    uvloop.run(server.run())
