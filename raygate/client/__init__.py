"""A small, synchronous client of raygate's admission-status and explain APIs, over HTTP or
gRPC.

    from raygate.client import connect

    with connect("http://raygate.raygate-system:8888") as client:  # or "grpc://host:9090"
        status = client.get("ray", "demo")
        for pod in status.pods:
            print(pod.name, pod.state, pod.advice.action)
        reply = client.explain("ray", "demo-worker-x7k2p")  # node by node, as raygate decides
        for event in client.watch(namespace="ray"):  # ADDED..., SYNCED, then changes
            ...

Both transports return the same types (``raygate.contract.admission_status``,
``raygate.contract.explain``). Errors are ``raygate.contract.errors`` types, raised by that
module's tables: ``RayClusterNotFound`` (with ``synced``), ``NotFound`` (a pod to explain),
``BadRequest``, ``Unavailable`` when raygate cannot be reached, ``Unauthorized``/
``Forbidden`` when raygate checks callers and this one may not read, ``RaygateError`` for
anything else. A client is not thread-safe: use one per thread. It needs raygate's own
dependencies only (msgspec, grpcio, protobuf), nothing of ``raygate.server``.

Where raygate checks its callers (in-cluster, by default), a client sends a bearer
token: ``token=token_file(path)`` reads it from a file on every call, as a pod's service
account token must be read (the kubelet rotates it). Behind a TLS endpoint (``https://``,
``grpcs://``), ``tls=TlsSettings(...)`` names the CAs to trust and a client certificate.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import urlsplit

import grpc

from raygate.client.base import (
    ENV_TOKEN_FILE,
    SERVICE_ACCOUNT_TOKEN,
    AdmissionClient,
    TlsSettings,
    Token,
    Watch,
    token_file,
)
from raygate.client.over_grpc import GrpcAdmissionClient
from raygate.client.over_http import HttpAdmissionClient

__all__ = [
    "ENV_TOKEN_FILE",
    "SERVICE_ACCOUNT_TOKEN",
    "AdmissionClient",
    "GrpcAdmissionClient",
    "HttpAdmissionClient",
    "TlsSettings",
    "Token",
    "Watch",
    "connect",
    "token_file",
]


def connect(url: str, timeout: float = 10.0, token: Token | None = None,
            tls: TlsSettings | None = None) -> HttpAdmissionClient | GrpcAdmissionClient:
    """A client for ``http://host:port`` (raygate's HTTP port) or ``grpc://host:port``, or
    ``https://``/``grpcs://`` behind a TLS endpoint, trusting and presenting what ``tls``
    names (default: the system's CAs, no client certificate)."""
    parts = urlsplit(url)
    tls = tls or TlsSettings()
    if parts.scheme in ("http", "https"):
        context = None if tls == TlsSettings() else _ssl_context(tls)
        return HttpAdmissionClient(url, timeout=timeout, ssl_context=context, token=token)
    if parts.scheme == "grpc":
        return GrpcAdmissionClient(parts.netloc, timeout=timeout, token=token)
    if parts.scheme == "grpcs":
        return GrpcAdmissionClient(parts.netloc, timeout=timeout, token=token,
                                   channel=_secure_channel(parts.netloc, tls))
    raise ValueError(f"expected an http://, https://, grpc:// or grpcs:// URL, got {url!r}")


def _ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=tls.ca_file)
    if tls.cert_file is not None:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def _secure_channel(target: str, tls: TlsSettings) -> grpc.Channel:
    def read(path: str | None) -> bytes | None:
        return None if path is None else Path(path).read_bytes()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(tls.ca_file), private_key=read(tls.key_file),
        certificate_chain=read(tls.cert_file))
    options = ([("grpc.ssl_target_name_override", tls.server_name)]
               if tls.server_name else [])
    return grpc.secure_channel(target, credentials, options=options)
