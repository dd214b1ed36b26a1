"""TLS and mTLS on the HTTP and gRPC listeners, with certificates made at test time
(trustme): what is served to whom, TLS 1.3 only under mTLS (no resumed session outlives
its client CA), and the settings that refuse to start. Rotation: test_tls_rotation.py."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import grpc
import httpx
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raygate.contract.command import ConfigError
from raygate.policy.config import PolicyConfig
from raygate.server.app import build_server
from raygate.server.cache.cluster import ClusterCache
from raygate.server.config.settings import ServeSettings
from raygate.server.listeners import bind_socket
from tests.conftest import ServerThread, wait_until
from tests.server.pki import (
    ANSWERED,
    HOST,
    Pki,
    der,
    grpc_health,
    grpc_refused,
    https_ok,
    served_cert,
)

# --- https and gRPC over TLS -------------------------------------------------------------


def test_https_and_grpc_serve_tls(pki: Pki, tls_server: ServerThread) -> None:
    assert https_ok(tls_server, pki.client_context())
    assert served_cert(tls_server, pki.client_context()) == der(pki.served)
    assert grpc_health(tls_server, pki.grpc_credentials()) in ANSWERED
    # Plain text is not served on either port any more.
    with pytest.raises(httpx.TransportError), \
            httpx.Client(timeout=10) as plain:
        plain.get(f"http://{HOST}:{tls_server.server.http_port}/healthz")
    with grpc.insecure_channel(tls_server.grpc_target) as channel, \
            pytest.raises(grpc.RpcError) as refused:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # A client that does not trust the server's CA refuses it.
    assert not https_ok(tls_server, pki.client_context(ca=trustme.CA()))


MTLS_CLIENTS = [
    # (name, the client's certificate: none / from the client CA / from another CA, served)
    ("no client certificate", None, False),
    ("signed by the client CA", "client-ca", True),
    ("signed by another CA", "other-ca", False),
]


@pytest.mark.parametrize(("name", "issuer", "served"), MTLS_CLIENTS,
                         ids=[c[0] for c in MTLS_CLIENTS])
def test_mtls_serves_only_clients_with_a_certificate_of_the_client_ca(
    pki: Pki, mtls_server: ServerThread, name: str, issuer: str | None, served: bool,
) -> None:
    cert = None
    if issuer is not None:
        cert = (pki.client_ca if issuer == "client-ca" else trustme.CA()).issue_cert(
            "raygate-client")
    assert https_ok(mtls_server, pki.client_context(cert=cert)) is served
    assert grpc_refused(mtls_server, pki.grpc_credentials(cert=cert)) is not served
    # A refused handshake does not disturb the server.
    assert https_ok(mtls_server, mtls_server.verify or pki.client_context())


def resumed_health(port: int, context: ssl.SSLContext,
                   session: ssl.SSLSession | None) -> tuple[bool, ssl.SSLSession | None, bool]:
    """GET /healthz over a new TLS connection offering ``session``: (answered 200, the
    session to offer next time, whether the server resumed the one offered)."""
    try:
        with socket.create_connection((HOST, port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=HOST, session=session) as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: raygate\r\n"
                        b"Connection: close\r\n\r\n")
            reply = b""
            while chunk := tls.recv(4096):  # the whole reply: TLS 1.3 tickets come with it
                reply += chunk
            return reply.startswith(b"HTTP/1.1 200"), tls.session, bool(tls.session_reused)
    except (ssl.SSLError, ConnectionError):
        return False, None, False


def test_mtls_over_https_is_tls_1_3_only(pki: Pki, mtls_server: ServerThread) -> None:
    # TLS 1.2 resumes sessions from the listener's session-ID cache, which Python cannot
    # turn off: under mTLS it is refused rather than let skip the client check.
    client = pki.client_ca.issue_cert("raygate-client")
    tls12 = pki.client_context(cert=client)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert resumed_health(mtls_server.server.http_port, tls12, None)[0] is False
    assert https_ok(mtls_server, pki.client_context(cert=client))


def test_a_resumed_session_does_not_outlive_its_client_ca(
    pki: Pki, mtls_server: ServerThread,
) -> None:
    port = mtls_server.server.http_port
    old = pki.client_context(cert=pki.client_ca.issue_cert("old-client"))
    served, session, _ = resumed_health(port, old, None)
    assert served
    assert session is not None
    # No tickets under mTLS: nothing to resume, so every handshake checks the client.
    served, _, resumed = resumed_health(port, old, session)
    assert served
    assert not resumed
    new_ca = trustme.CA()
    new = pki.client_context(cert=new_ca.issue_cert("new-client"))
    new_ca.cert_pem.write_to_path(str(pki.ca_file))
    wait_until(lambda: https_ok(mtls_server, new), "the new client CA")
    # The old CA's client, offering the session it had: refused.
    assert resumed_health(port, old, session)[0] is False


# --- refusing to start -------------------------------------------------------------------

START_ERRORS = [
    ("cert without key", {"tls_key": ""}, "TLS (and client_ca) needs both"),
    ("client CA without TLS", {"tls_cert": "", "tls_key": ""},
     "TLS (and client_ca) needs both"),
    ("missing file", {"tls_cert": "/nonexistent/tls.crt"}, "No such file"),
    ("key for another cert", {"tls_key": "other"}, "KEY_VALUES_MISMATCH"),
    ("client CA not PEM", {"client_ca": "garbage"}, "cannot load"),
]


@pytest.mark.parametrize(("name", "change", "message"), START_ERRORS,
                         ids=[e[0] for e in START_ERRORS])
def test_bad_tls_settings_refuse_to_start(
    pki: Pki, tmp_path: Path, name: str, change: dict[str, str], message: str,
) -> None:
    fields = {"tls_cert": str(pki.cert_file), "tls_key": str(pki.key_file),
              "client_ca": str(pki.ca_file), **change}
    if fields["tls_key"] == "other":
        other = tmp_path / "other.key"
        pki.issue().private_key_pem.write_to_path(str(other))
        fields["tls_key"] = str(other)
    if fields["client_ca"] == "garbage":
        garbage = tmp_path / "garbage.crt"
        garbage.write_bytes("kein Zertifikat, nur Text: äöü\n".encode())
        fields["client_ca"] = str(garbage)
    with bind_socket(HOST, 0) as sock, pytest.raises(ConfigError) as refused:
        build_server(ClusterCache(PolicyConfig(), "test"), sock, f"{HOST}:0",
                     settings=ServeSettings(tls_cert=fields["tls_cert"], tls_key=fields["tls_key"],
                                            client_ca=fields["client_ca"]))
    assert message in str(refused.value), (name, str(refused.value))
