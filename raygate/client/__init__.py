"""A small, synchronous client of raygate's admission-status API, over HTTP or gRPC.

    from raygate.client import connect

    with connect("http://raygate.raygate-system:8888") as client:  # or "grpc://host:9090"
        status = client.get("ray", "demo")
        for pod in status.pods:
            print(pod.name, pod.state, pod.advice.action)
        for event in client.watch(namespace="ray"):  # ADDED..., SYNCED, then changes
            ...

Both transports return the same types (``raygate.contract.admission_status``). Errors are
``raygate.contract.errors`` types: ``RayClusterNotFound`` (with ``synced``), ``BadRequest``,
``Unavailable`` when raygate cannot be reached, ``Unauthorized``/``Forbidden`` when
raygate checks callers and this one may not read, ``RaygateError`` for anything else. A
client is not thread-safe: use one per thread. Only the standard library and ``grpcio``
(for ``grpc://``) are needed.

Where raygate checks its callers (in-cluster, by default), a client sends a bearer
token: ``token=token_file(path)`` reads it from a file on every call, as a pod's service
account token must be read (the kubelet rotates it).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from raygate.client.base import (
    SERVICE_ACCOUNT_TOKEN,
    AdmissionClient,
    Token,
    Watch,
    token_file,
)
from raygate.client.over_grpc import GrpcAdmissionClient
from raygate.client.over_http import HttpAdmissionClient

__all__ = [
    "SERVICE_ACCOUNT_TOKEN",
    "AdmissionClient",
    "GrpcAdmissionClient",
    "HttpAdmissionClient",
    "Token",
    "Watch",
    "connect",
    "token_file",
]

def connect(url: str, timeout: float = 10.0, token: Token | None = None,
            ) -> HttpAdmissionClient | GrpcAdmissionClient:
    """A client for ``http://host:port`` (raygate's HTTP port) or ``grpc://host:port``."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        return HttpAdmissionClient(url, timeout=timeout, token=token)
    if parts.scheme == "grpc":
        return GrpcAdmissionClient(parts.netloc, timeout=timeout, token=token)
    raise ValueError(f"expected an http://, https:// or grpc:// URL, got {url!r}")
