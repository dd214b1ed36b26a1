"""The client of raygate's gRPC API: ``raygate.v1.Admission`` (the Watch a server stream)
and ``raygate.v1.Explain``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import grpc

from raygate.client.base import Closing, Token, Watch
from raygate.contract.admission_status import AdmissionStatus, AdmissionStatusList, WatchEvent
from raygate.contract.errors import (
    GRPC_ERRORS,
    GRPC_SYNCED_KEY,
    RayClusterNotFound,
    RaygateError,
    Unavailable,
)
from raygate.contract.explain import ExplainReply
from raygate.contract.messages import from_proto
from raygate.contract.proto.raygate.v1 import admission_pb2 as pb
from raygate.contract.proto.raygate.v1 import admission_pb2_grpc, explain_pb2, explain_pb2_grpc


class GrpcAdmissionClient(Closing):
    """The gRPC API (``raygate.v1.Admission``, ``raygate.v1.Explain``) over one channel;
    ``watch`` streams."""

    def __init__(self, target: str, timeout: float = 10.0,
                 channel: grpc.Channel | None = None, token: Token | None = None) -> None:
        self._channel = channel or grpc.insecure_channel(target)
        self._stub = admission_pb2_grpc.AdmissionStub(self._channel)
        self._explain = explain_pb2_grpc.ExplainStub(self._channel)
        self.target = target
        self.timeout = timeout
        self.token = token

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        bearer = self.token() if self.token is not None else None
        return (("authorization", f"Bearer {bearer}"),) if bearer else ()

    def close(self) -> None:
        self._channel.close()

    def _error(self, error: grpc.RpcError, namespace: str = "", name: str = "",
               ) -> RaygateError:
        call = error if isinstance(error, grpc.Call) else None
        code = call.code() if call else grpc.StatusCode.UNKNOWN
        details = (call.details() if call else "") or str(code)
        trailer: dict[str, str] = dict(call.trailing_metadata() or ()) if call else {}
        synced = trailer.get(GRPC_SYNCED_KEY)
        if code is grpc.StatusCode.NOT_FOUND and synced is not None:
            return RayClusterNotFound(namespace, name, synced == "true")
        kind = GRPC_ERRORS.get(code)
        if kind is None:
            return RaygateError(f"gRPC {code.name}: {details}")
        # Mostly the channel's own failure (no connection, the deadline): name the target.
        return kind(f"raygate at {self.target}: {details}" if kind is Unavailable else details)

    def get(self, namespace: str, name: str) -> AdmissionStatus:
        try:
            reply = self._stub.Get(pb.GetRequest(namespace=namespace, name=name),
                                   timeout=self.timeout, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise self._error(exc, namespace, name) from exc
        return from_proto(reply, AdmissionStatus)

    def list(self, namespace: str | None = None) -> AdmissionStatusList:
        try:
            reply = self._stub.List(pb.ListRequest(namespace=namespace or ""),
                                    timeout=self.timeout, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        return from_proto(reply, AdmissionStatusList)

    def explain(self, namespace: str, name: str, node_names: Sequence[str] | None = None,
                ) -> ExplainReply:
        request = explain_pb2.ExplainRequest(namespace=namespace, name=name,
                                             node_names=list(node_names or ()))
        try:
            reply = self._explain.Explain(request, timeout=self.timeout,
                                          metadata=self._metadata())
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        return from_proto(reply, ExplainReply)

    def watch(self, namespace: str | None = None, name: str | None = None) -> Watch:
        if name is not None and namespace is None:
            raise ValueError("a name needs its namespace")
        stream = self._stub.Watch(pb.WatchRequest(namespace=namespace or "", name=name or ""),
                                  metadata=self._metadata())

        def cancel() -> None:
            stream.cancel()

        return Watch(self._events(stream, namespace or "", name or ""), cancel)

    def _events(self, stream: Iterator[pb.WatchEvent], namespace: str, name: str,
                ) -> Iterator[WatchEvent]:
        try:
            for event in stream:
                yield from_proto(event, WatchEvent)
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.Call) and exc.code() is grpc.StatusCode.CANCELLED:
                return  # Watch.close()
            raise self._error(exc, namespace, name) from exc
