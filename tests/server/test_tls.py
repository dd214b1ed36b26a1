"""TLS and mTLS on the HTTP and gRPC listeners, with certificates made at test time
(trustme) and rotated under a running server."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from raygate.contract.command import ConfigError
from raygate.policy.config import PolicyConfig
from raygate.server.app import build_server
from raygate.server.cache.cluster import ClusterCache
from raygate.server.config.settings import ServeSettings
from raygate.server.listeners import bind_socket
from raygate.server.tls import CertReloader, TlsFiles
from tests.conftest import FakeClock, ServerThread, wait_until

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


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def start(pki: Pki, *, mtls: bool) -> ServerThread:
    client = pki.client_ca.issue_cert("raygate-client") if mtls else None
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock(),
                          verify=pki.client_context(cert=client),
                          settings=pki.settings(mtls=mtls), cert_poll_seconds=POLL)
    thread.start()
    return thread


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[ServerThread]:
    thread = start(pki, mtls=False)
    yield thread
    thread.stop()


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[ServerThread]:
    thread = start(pki, mtls=True)
    yield thread
    thread.stop()


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


# --- rotation ----------------------------------------------------------------------------


def test_a_rotated_certificate_is_used_by_new_connections(
    pki: Pki, mtls_server: ServerThread,
) -> None:
    client = pki.client_ca.issue_cert("raygate-client")
    old_trust = pki.client_context(cert=client)
    # The new certificate comes from a new CA: a client trusting only that CA can connect
    # once, and only once, the server has picked it up (observable over gRPC too).
    new_ca = trustme.CA()
    rotated = pki.issue(new_ca)
    new_trust = pki.client_context(ca=new_ca, cert=client)
    assert not https_ok(mtls_server, new_trust)
    assert grpc_refused(mtls_server, pki.grpc_credentials(ca=new_ca, cert=client))
    with httpx.Client(base_url=mtls_server.url, verify=old_trust, timeout=10) as kept:
        assert kept.get("/healthz").status_code == 200  # a connection made before
        pki.write(rotated)
        wait_until(lambda: https_ok(mtls_server, new_trust), "the rotated cert on HTTPS")
        assert served_cert(mtls_server, new_trust) == der(rotated)
        assert grpc_health(mtls_server, pki.grpc_credentials(ca=new_ca, cert=client)) in ANSWERED
        assert not https_ok(mtls_server, old_trust)
        assert grpc_refused(mtls_server, pki.grpc_credentials(cert=client))
        # The connection made before the rotation keeps its session.
        assert kept.get("/healthz").status_code == 200
    assert reloads(mtls_server, "loaded", new_trust) == 1


BAD_FILES: list[tuple[str, Callable[[Pki], None]]] = [
    # A new certificate whose key has not been written yet (a half-done rotation).
    ("key does not match", lambda pki: pki.write(pki.issue(), key=False)),
    ("certificate half written", lambda pki: pki._replace(
        pki.cert_file, pki.issue().cert_chain_pems[0].bytes()[:300])),
    ("key is garbage", lambda pki: pki._replace(pki.key_file, b"not a key\n")),
    ("certificate empty", lambda pki: pki._replace(pki.cert_file, b"")),
]


@pytest.mark.parametrize(("name", "spoil"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_new_files_keep_the_old_certificate(
    pki: Pki, tls_server: ServerThread, name: str, spoil: Callable[[Pki], None],
) -> None:
    trust = pki.client_context()
    spoil(pki)
    wait_until(lambda: reloads(tls_server, "failed") == 1, f"the failed reload ({name})")
    assert served_cert(tls_server, trust) == der(pki.served)
    assert grpc_health(tls_server, pki.grpc_credentials()) in ANSWERED
    # Good files again: picked up.
    fixed = pki.issue()
    pki.write(fixed)
    wait_until(lambda: served_cert(tls_server, trust) == der(fixed), "the good cert")
    assert reloads(tls_server, "loaded") == 1


def test_a_replaced_client_ca_is_the_only_one_trusted(
    pki: Pki, mtls_server: ServerThread,
) -> None:
    old_client = pki.client_ca.issue_cert("old-client")
    new_ca = trustme.CA()
    new_client = new_ca.issue_cert("new-client")
    assert https_ok(mtls_server, pki.client_context(cert=old_client))
    new_ca.cert_pem.write_to_path(str(pki.ca_file))
    wait_until(lambda: https_ok(mtls_server, pki.client_context(cert=new_client)),
               "the new client CA")
    # Replaced, not added to: the old CA's clients are refused without a restart.
    assert not https_ok(mtls_server, pki.client_context(cert=old_client))
    assert grpc_refused(mtls_server, pki.grpc_credentials(cert=old_client))
    assert grpc_health(mtls_server, pki.grpc_credentials(cert=new_client)) >= 0


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


# --- review findings (issue #8 follow-up) ------------------------------------------------


def with_comment(ca: trustme.CA, comment: bytes) -> bytes:
    """A CA bundle as people write them: a comment line above the PEM block."""
    return b"# " + comment + b"\n" + ca.cert_pem.bytes()


COMMENTS = [
    ("utf-8", "Zertifizierungsstelle für Ärzte".encode()),
    ("latin-1", "Autorité de certification".encode("latin-1")),
]


@pytest.mark.parametrize(("name", "comment"), COMMENTS, ids=[c[0] for c in COMMENTS])
def test_a_client_ca_bundle_with_non_ascii_comments_loads_at_start_and_on_reload(
    pki: Pki, name: str, comment: bytes,
) -> None:
    pki.ca_file.write_bytes(with_comment(pki.client_ca, comment))
    server = start(pki, mtls=True)
    try:
        old_client = pki.client_ca.issue_cert("old-client")
        assert https_ok(server, pki.client_context(cert=old_client))
        new_ca = trustme.CA()
        new_client = new_ca.issue_cert("new-client")
        Pki._replace(pki.ca_file, with_comment(new_ca, comment))
        wait_until(lambda: https_ok(server, pki.client_context(cert=new_client)),
                   f"the new client CA with a {name} comment")
        assert not https_ok(server, pki.client_context(cert=old_client))
        assert grpc_health(server, pki.grpc_credentials(cert=new_client)) >= 0
        assert reloads(server, "loaded", pki.client_context(cert=new_client)) == 1
    finally:
        server.stop()


def test_certificate_polling_outlives_an_unexpected_error(
    pki: Pki, tls_server: ServerThread, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    reloader = tls_server.server.tls
    assert reloader is not None
    load = reloader._load
    failed = threading.Event()

    def fails_once(seen: tuple[tuple[int, int, int, int], ...], generation: int) -> object:
        # Whatever goes wrong that nobody foresaw (the CA bundle's TypeError once was).
        if not failed.is_set():
            failed.set()
            raise RuntimeError("unforeseen")
        return load(seen, generation)

    monkeypatch.setattr(reloader, "_load", fails_once)
    trust = pki.client_context()
    rotated = pki.issue()
    with caplog.at_level(logging.ERROR, logger="raygate.server"):
        pki.write(rotated)
        wait_until(failed.is_set, "the failing check")
        # The next check tries the same files again and loads them.
        wait_until(lambda: served_cert(tls_server, trust) == der(rotated),
                   "the rotated cert after the failed check")
    logged = [r for r in caplog.records if r.name == "raygate.server"]
    assert len(logged) == 1
    assert logged[0].exc_info is not None
    assert "unforeseen" in str(logged[0].exc_info[1])


def test_a_missing_file_is_a_warning_once_per_disappearance(
    pki: Pki, caplog: pytest.LogCaptureFixture,
) -> None:
    reloader = CertReloader(TlsFiles(str(pki.cert_file), str(pki.key_file)), "TLS")

    def warnings() -> int:
        return sum(1 for r in caplog.records
                   if r.levelno == logging.WARNING and "cannot stat" in r.getMessage())

    with caplog.at_level(logging.WARNING, logger="raygate.tls"):
        for round_ in (1, 2):
            pki.key_file.unlink()
            for _ in range(3):
                assert not reloader.check()
            assert warnings() == round_
            back = pki.issue()
            pki.write(back)
            assert reloader.check()  # back, and new: loaded
    assert str(pki.key_file) in caplog.records[0].getMessage()


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
