"""Certificates made at test time (trustme) for raygate's TLS and mTLS listeners: a server
CA, a client CA and the files the server reads; a server started on them; what a client
sees of it over HTTPS and gRPC, and its certificate reloads."""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path

import grpc
import httpx
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.config.settings import ServeSettings
from tests.conftest import FakeClock, ServerThread

HOST = "127.0.0.1"
POLL = 0.05  # the server's certificate poll in these tests


def der(cert: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


class Pki:
    """A server CA, a client CA, and the files the server reads."""

    def __init__(self, folder: Path) -> None:
        self.server_ca = trustme.CA()
        self.client_ca = trustme.CA()
        self.cert_file, self.key_file = folder / "tls.crt", folder / "tls.key"
        self.ca_file = folder / "client-ca.crt"
        self.served = self.issue()
        self.write(self.served)
        self.client_ca.cert_pem.write_to_path(str(self.ca_file))

    def issue(self, ca: trustme.CA | None = None) -> trustme.LeafCert:
        return (ca or self.server_ca).issue_cert(HOST)

    def write(self, cert: trustme.LeafCert, *, key: bool = True) -> None:
        # As a rotation tool does: a new file renamed over the old (a new inode).
        self._replace(self.cert_file, cert.cert_chain_pems[0].bytes())
        if key:
            self._replace(self.key_file, cert.private_key_pem.bytes())

    @staticmethod
    def _replace(path: Path, data: bytes) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def settings(self, *, mtls: bool) -> ServeSettings:
        return ServeSettings(tls_cert=str(self.cert_file), tls_key=str(self.key_file),
                             client_ca=str(self.ca_file) if mtls else "")

    def client_context(self, ca: trustme.CA | None = None,
                       cert: trustme.LeafCert | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context()
        (ca or self.server_ca).configure_trust(context)
        if cert is not None:
            cert.configure_cert(context)
        return context

    def grpc_credentials(self, ca: trustme.CA | None = None,
                         cert: trustme.LeafCert | None = None) -> grpc.ChannelCredentials:
        if cert is None:
            return grpc.ssl_channel_credentials((ca or self.server_ca).cert_pem.bytes())
        return grpc.ssl_channel_credentials(
            (ca or self.server_ca).cert_pem.bytes(), cert.private_key_pem.bytes(),
            cert.cert_chain_pems[0].bytes())


def start(pki: Pki, *, mtls: bool) -> ServerThread:
    client = pki.client_ca.issue_cert("raygate-client") if mtls else None
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock(),
                          verify=pki.client_context(cert=client),
                          settings=pki.settings(mtls=mtls), cert_poll_seconds=POLL)
    thread.start()
    return thread


def served_cert(server: ServerThread, context: ssl.SSLContext) -> bytes:
    """The certificate a new HTTPS connection is given (DER)."""
    with socket.create_connection((HOST, server.server.http_port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=HOST) as tls:
        cert = tls.getpeercert(binary_form=True)
    assert cert is not None
    return cert


# The server answered over the handshake (NOT_SERVING while its cache is not ready).
ANSWERED = (health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING)


def grpc_health(server: ServerThread, credentials: grpc.ChannelCredentials) -> int:
    """The gRPC health status over a new channel; raises grpc.RpcError when refused."""
    with grpc.secure_channel(server.grpc_target, credentials) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10)
    return int(reply.status)


def grpc_refused(server: ServerThread, credentials: grpc.ChannelCredentials) -> bool:
    """True when the handshake fails (UNAVAILABLE: gRPC's answer to a failed handshake)."""
    code = grpc.StatusCode.OK
    try:
        grpc_health(server, credentials)
    except grpc.RpcError as exc:
        code = exc.code()
    if code not in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE):
        raise AssertionError(f"unexpected {code}")
    return code == grpc.StatusCode.UNAVAILABLE


def https_ok(server: ServerThread, context: ssl.SSLContext) -> bool:
    try:
        with httpx.Client(base_url=server.url, verify=context, timeout=10) as client:
            return client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def reloads(server: ServerThread, result: str, trust: ssl.SSLContext | None = None) -> float:
    verify = trust or server.verify or True
    with httpx.Client(base_url=server.url, verify=verify, timeout=10) as c:
        text = c.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "raygate_tls_reloads_total"
                    and sample.labels == {"listener": "main", "result": result}):
                return sample.value
    raise AssertionError("no raygate_tls_reloads_total sample")
