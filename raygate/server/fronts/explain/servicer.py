"""``raygate.v1.Explain`` over gRPC: the same ``ExplainService`` as the HTTP API."""

from __future__ import annotations

import grpc

from raygate.contract.errors import BadRequest, RaygateError, grpc_status_for
from raygate.contract.messages import to_proto
from raygate.contract.proto.raygate.v1 import explain_pb2 as pb
from raygate.contract.proto.raygate.v1 import explain_pb2_grpc
from raygate.server.fronts.explain.service import ExplainService

__all__ = ["SERVICE_NAME", "add_explain_service"]

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Explain"].full_name


class _Servicer(explain_pb2_grpc.ExplainServicer):
    def __init__(self, service: ExplainService) -> None:
        self.service = service

    async def Explain(
        self, request: pb.ExplainRequest, context: grpc.aio.ServicerContext[object, object],
    ) -> pb.Explanation:
        try:
            if not request.namespace or not request.name:
                raise BadRequest("namespace and name are required")
            reply = self.service.explain(request.namespace, request.name,
                                         list(request.node_names))
            return to_proto(reply, pb.Explanation)
        except RaygateError as exc:
            code, details, trailer = grpc_status_for(exc)
            await context.abort(code, details, trailer)
            raise  # pragma: no cover - abort raises


def add_explain_service(service: ExplainService, server: grpc.aio.Server) -> None:
    explain_pb2_grpc.add_ExplainServicer_to_server(_Servicer(service), server)
