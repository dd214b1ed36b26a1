"""``raygate explain``: the placement decision for one pod, as JSON or a table.

Served on ``GET /v1/namespaces/{ns}/pods/{name}/explain`` and ``POST /v1/explain`` and
used offline by the CLI (``raygate explain ns/pod --snapshot FILE``).
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

import grpc
import msgspec
from google.protobuf.timestamp_pb2 import Timestamp

from raygate.contract.errors import (
    BadRequest,
    MissingField,
    NotFound,
    RaygateError,
    grpc_status_for,
)
from raygate.contract.proto.raygate.v1 import explain_pb2 as pb
from raygate.contract.proto.raygate.v1 import explain_pb2_grpc
from raygate.plugin.explain import Explanation, explain
from raygate.plugin.model import PodView
from raygate.server.cache import convert
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Snapshot
from raygate.server.http.routes import API_MAX_BODY, AsyncRoute, Request, Response, Route
from raygate.server.wire import decode, utc_seconds
from raygate.server.wire.kube import Pod

__all__ = [
    "ExplainReply",
    "ExplainService",
    "add_explain_service",
    "explain_pod",
    "explain_routes",
    "fetch",
    "find_pod",
    "from_proto",
    "render_table",
    "to_proto",
    "to_wire",
]


class _Base(msgspec.Struct, rename="camel"):
    """camelCase keys, as the rest of raygate's API."""


class NodeReply(_Base):
    name: str
    node_class: str
    class_reason: str
    passes: bool
    rule: str
    reason: str
    score: int | None


class ExplainReply(_Base, kw_only=True):
    api_version: str = "raygate.io/v1"
    kind: str = "Explanation"
    pod: str
    verdict: str
    rule: str
    role: str
    reason: str
    thrash_guard_until: datetime | None
    thrash_guard_active: bool
    admission_state: str | None = None
    admission_reason: str | None = None
    native_placement: str | None = None
    nodes: list[NodeReply]


def to_wire(e: Explanation) -> ExplainReply:
    return ExplainReply(
        pod=e.pod, verdict=e.verdict, rule=e.rule, role=e.role, reason=e.reason,
        thrash_guard_until=utc_seconds(e.thrash_guard_until),
        thrash_guard_active=e.thrash_guard_active,
        admission_state=e.admission_state or None,
        admission_reason=e.admission_reason or None,
        native_placement=e.native_placement or None,
        nodes=[NodeReply(n.name, n.node_class, n.class_reason, n.passes, n.rule, n.reason,
                         n.score) for n in e.nodes],
    )


def find_pod(snap: Snapshot, namespace: str, name: str) -> PodView | None:
    for pod in snap.objects.pods:
        if pod.namespace == namespace and pod.name == name:
            return pod
    return None


def explain_pod(snap: Snapshot, pod: PodView, now: float,
                node_names: Sequence[str] | None = None) -> ExplainReply:
    """Over ``node_names``, or every node raygate knows."""
    names = list(node_names) if node_names is not None else [n.name for n in snap.objects.nodes]
    return to_wire(explain(pod, snap, snap.config, now, names))


def render_table(reply: ExplainReply) -> str:
    until = msgspec.to_builtins(reply.thrash_guard_until)  # as the JSON writes it
    lines = [
        f"pod {reply.pod}: {reply.verdict} ({reply.rule})"
        + (f", role {reply.role}" if reply.role else ""),
        f"  why: {reply.reason}",
        "  thrash guard: " + (f"active until {until}" if reply.thrash_guard_active else
                              f"off (last ended {until})" if until else "off"),
    ]
    if reply.admission_state:
        lines.append(f"  admission: {reply.admission_state}: {reply.admission_reason}")
    if reply.native_placement:
        lines.append(f"  native placement: {reply.native_placement}")
    width = max([len(n.name) for n in reply.nodes] + [4])
    lines.append(f"  {'NODE':<{width}}  CLASS    FILTER  SCORE  WHY")
    for n in reply.nodes:
        score = "-" if n.score is None else str(n.score)
        lines.append(f"  {n.name:<{width}}  {n.node_class:<7}  {'pass' if n.passes else 'FAIL':<6}"
                     f"  {score:>5}  {n.class_reason}; {n.reason}")
    return "\n".join(lines) + "\n"


def to_proto(reply: ExplainReply) -> pb.Explanation:
    until = None
    if reply.thrash_guard_until is not None:
        until = Timestamp(seconds=int(reply.thrash_guard_until.timestamp()))
    return pb.Explanation(
        pod=reply.pod, verdict=reply.verdict, rule=reply.rule, role=reply.role,
        reason=reply.reason, thrash_guard_until=until,
        thrash_guard_active=reply.thrash_guard_active,
        admission_state=reply.admission_state or "",
        admission_reason=reply.admission_reason or "",
        native_placement=reply.native_placement or "",
        nodes=[pb.NodeExplanation(name=n.name, node_class=n.node_class,
                                  class_reason=n.class_reason, passes=n.passes, rule=n.rule,
                                  reason=n.reason, score=n.score)
               for n in reply.nodes],
    )


def from_proto(message: pb.Explanation) -> ExplainReply:
    until = None
    if message.HasField("thrash_guard_until"):
        until = message.thrash_guard_until.ToDatetime(UTC)
    return ExplainReply(
        pod=message.pod, verdict=message.verdict, rule=message.rule, role=message.role,
        reason=message.reason, thrash_guard_until=until,
        thrash_guard_active=message.thrash_guard_active,
        admission_state=message.admission_state or None,
        admission_reason=message.admission_reason or None,
        native_placement=message.native_placement or None,
        nodes=[NodeReply(n.name, n.node_class, n.class_reason, n.passes, n.rule, n.reason,
                         n.score if n.HasField("score") else None) for n in message.nodes],
    )


def fetch(url: str, namespace: str, name: str, node_names: Sequence[str] | None,
          timeout: float = 10.0) -> ExplainReply:
    """Ask a running raygate: ``http://host:port`` or ``grpc://host:port``."""
    parts = urlsplit(url)
    if parts.scheme == "grpc":
        with grpc.insecure_channel(parts.netloc) as channel:
            stub = explain_pb2_grpc.ExplainStub(channel)
            try:
                message = stub.Explain(pb.ExplainRequest(
                    namespace=namespace, name=name, node_names=list(node_names or ())),
                    timeout=timeout)
            except grpc.RpcError as exc:
                raise RaygateError(f"raygate at {url}: {exc.details()}") from None
            return from_proto(message)
    if parts.scheme not in ("http", "https"):
        raise BadRequest(f"expected an http:// or grpc:// URL, got {url!r}")
    query = f"?nodes={','.join(node_names)}" if node_names else ""
    path = f"/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/explain{query}"
    connection = (http.client.HTTPSConnection if parts.scheme == "https"
                  else http.client.HTTPConnection)(parts.netloc, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    except OSError as exc:
        raise RaygateError(f"cannot reach raygate at {url}: {exc}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise RaygateError(f"raygate at {url} answered {response.status}: {body.decode()}")
    return msgspec.json.decode(body, type=ExplainReply)


class _ExplainBody(msgspec.Struct, rename="camel"):
    """``POST /v1/explain``: a Pod (as the API returns it) and, optionally, the nodes."""

    pod: Pod | None = None
    node_names: list[str] | None = None


_BODY = msgspec.json.Decoder(_ExplainBody)


class ExplainService:
    def __init__(self, cache: ClusterCache, clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.clock = clock

    def explain(self, namespace: str, name: str,
                node_names: Sequence[str] | None = None) -> ExplainReply:
        snap = self.cache.snapshot
        pod = find_pod(snap, namespace, name)
        if pod is None:
            synced = "" if self.cache.ready else " (its cache has not synced yet)"
            raise NotFound(f"raygate does not know pod {namespace}/{name}{synced}")
        return explain_pod(snap, pod, self.clock(), node_names or None)

    async def http_get(self, request: Request) -> Response:
        nodes = request.query.get("nodes")
        reply = self.explain(request.params["namespace"], request.params["name"],
                             nodes.split(",") if nodes else None)
        return Response(200, msgspec.json.encode(reply))

    def http_post(self, body: bytes) -> bytes:
        request = decode(_BODY.decode, body, "explain request")
        if request.pod is None:
            raise MissingField("pod")
        pod = convert.pod_view(request.pod, "$.pod")
        snap = self.cache.snapshot
        return msgspec.json.encode(explain_pod(snap, pod, self.clock(), request.node_names))


def explain_routes(service: ExplainService) -> dict[str, Route | AsyncRoute]:
    return {
        "/v1/namespaces/{namespace}/pods/{name}/explain": AsyncRoute(b"GET", service.http_get),
        "/v1/explain": Route(b"POST", service.http_post, max_body=API_MAX_BODY),
    }


class _Servicer(explain_pb2_grpc.ExplainServicer):
    def __init__(self, service: ExplainService) -> None:
        self.service = service

    async def Explain(
        self, request: pb.ExplainRequest, context: grpc.aio.ServicerContext[object, object],
    ) -> pb.Explanation:
        try:
            if not request.namespace or not request.name:
                raise BadRequest("namespace and name are required")
            return to_proto(self.service.explain(request.namespace, request.name,
                                                 list(request.node_names)))
        except RaygateError as exc:
            code, details, trailer = grpc_status_for(exc)
            await context.abort(code, details, trailer)
            raise  # pragma: no cover - abort raises


SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Explain"].full_name


def add_explain_service(service: ExplainService, server: grpc.aio.Server) -> None:
    explain_pb2_grpc.add_ExplainServicer_to_server(_Servicer(service), server)
