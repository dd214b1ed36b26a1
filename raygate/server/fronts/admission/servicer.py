"""``raygate.v1.Admission`` over gRPC: the same ``AdmissionService`` as the HTTP API.

Runs on the server's event loop beside the HTTP server (``grpc.aio``). Every message is
built once per status version (``Entry.proto``) and shared by all streams; a Watch stream
sleeps on its scope's event between changes, so idle streams cost nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from raygate.contract.errors import BadRequest, RaygateError, Unavailable, grpc_status_for
from raygate.contract.proto.raygate.v1 import admission_pb2 as pb
from raygate.contract.proto.raygate.v1 import admission_pb2_grpc
from raygate.server.fronts.admission.service import AdmissionService
from raygate.server.fronts.admission.state import Scope

__all__ = ["SERVICE_NAME", "AdmissionServicer", "add_admission_service"]

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Admission"].full_name

_SYNCED = pb.WatchEvent(type=pb.WatchEvent.SYNCED)


async def _abort(context: grpc.aio.ServicerContext[object, object], error: RaygateError) -> None:
    code, details, trailer = grpc_status_for(error)
    await context.abort(code, details, trailer)


class AdmissionServicer(admission_pb2_grpc.AdmissionServicer):
    def __init__(self, service: AdmissionService) -> None:
        self.service = service

    async def Get(
        self, request: pb.GetRequest, context: grpc.aio.ServicerContext[object, object],
    ) -> pb.AdmissionStatus:
        try:
            if not request.namespace or not request.name:
                raise BadRequest("namespace and name are required")
            return self.service.get(request.namespace, request.name).proto()
        except RaygateError as exc:
            await _abort(context, exc)
            raise  # pragma: no cover - abort raises

    async def List(
        self, request: pb.ListRequest, context: grpc.aio.ServicerContext[object, object],
    ) -> pb.AdmissionStatusList:
        version, _, entries = self.service.current().listing(request.namespace or None)
        return pb.AdmissionStatusList(metadata=pb.ListMetadata(version=version),
                                      items=[e.proto() for e in entries])

    async def Watch(
        self, request: pb.WatchRequest, context: grpc.aio.ServicerContext[object, object],
    ) -> AsyncIterator[pb.WatchEvent]:
        if request.name and not request.namespace:
            await _abort(context, BadRequest("a name needs its namespace"))
        scope: Scope = (request.namespace or None, request.name or None)
        async for kind, entry in self.service.watch(scope):
            yield _SYNCED if entry is None else entry.watch_event(kind)
        # The service closed: the server is shutting down. UNAVAILABLE tells the client
        # to reconnect (to this server once it is back, or to another replica).
        await _abort(context, Unavailable("raygate is shutting down"))


def add_admission_service(service: AdmissionService, server: grpc.aio.Server) -> None:
    admission_pb2_grpc.add_AdmissionServicer_to_server(AdmissionServicer(service), server)
