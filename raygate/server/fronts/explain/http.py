"""The explain API over HTTP: ``GET /v1/namespaces/{ns}/pods/{name}/explain`` (a pod the
cache holds; ``?nodes=a,b`` to ask about some nodes only) and ``POST /v1/explain`` (a pod
given whole, as the API server returns it): requests parsed, replies encoded, the
answers ``ExplainService``'s."""

from __future__ import annotations

import msgspec

from raygate.contract.errors import MissingField
from raygate.server.cache import convert
from raygate.server.fronts.explain.service import ExplainService
from raygate.server.http.routes import API_MAX_BODY, AsyncRoute, Request, Response, Route
from raygate.server.wire import decode
from raygate.server.wire.kube import Pod

__all__ = ["ExplainHttp", "explain_routes"]


class _ExplainBody(msgspec.Struct, rename="camel"):
    """``POST /v1/explain``: a Pod (as the API returns it) and, optionally, the nodes."""

    pod: Pod | None = None
    node_names: list[str] | None = None


_BODY = msgspec.json.Decoder(_ExplainBody)


class ExplainHttp:
    """The explain routes' handlers over ``service``."""

    def __init__(self, service: ExplainService) -> None:
        self.service = service

    async def get(self, request: Request) -> Response:
        nodes = request.query.get("nodes")
        reply = self.service.explain(request.params["namespace"], request.params["name"],
                                     nodes.split(",") if nodes else None)
        return Response(200, msgspec.json.encode(reply))

    def post(self, body: bytes) -> bytes:
        request = decode(_BODY.decode, body, "explain request")
        if request.pod is None:
            raise MissingField("pod")
        pod = convert.pod_view(request.pod, "$.pod")
        return msgspec.json.encode(self.service.explain_view(pod, request.node_names))


def explain_routes(service: ExplainService) -> dict[str, Route | AsyncRoute]:
    http = ExplainHttp(service)
    return {
        "/v1/namespaces/{namespace}/pods/{name}/explain": AsyncRoute(b"GET", http.get),
        "/v1/explain": Route(b"POST", http.post, max_body=API_MAX_BODY),
    }
