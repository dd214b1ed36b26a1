"""``raygate explain --server URL``: ask a running raygate, over HTTP or gRPC."""

from __future__ import annotations

import http.client
from collections.abc import Sequence
from urllib.parse import quote, urlsplit

import grpc
import msgspec

from raygate.contract.errors import (
    GRPC_ERRORS,
    HTTP_ERRORS,
    BadRequest,
    RaygateError,
    Unavailable,
)
from raygate.contract.explain import ExplainReply
from raygate.contract.messages import from_proto
from raygate.contract.proto.raygate.v1 import explain_pb2 as pb
from raygate.contract.proto.raygate.v1 import explain_pb2_grpc

__all__ = ["fetch"]


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
                code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
                raise GRPC_ERRORS.get(code, RaygateError)(
                    f"raygate at {url}: {exc.details()}") from None
            return from_proto(message, ExplainReply)
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
        raise Unavailable(f"cannot reach raygate at {url}: {exc}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise HTTP_ERRORS.get(response.status, RaygateError)(
            f"raygate at {url} answered {response.status}: {body.decode()}")
    return msgspec.json.decode(body, type=ExplainReply)
