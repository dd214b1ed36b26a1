"""``raygate-autoscaler``'s advice over HTTPS with mutual TLS, through a TLS-terminating
proxy in front of a real raygate server on loopback: a private CA and a client
certificate given by its settings; no advice without either."""

from __future__ import annotations

import datetime
import http.client
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from raygate.ray_autoscaler.advice import Advisor
from raygate.ray_autoscaler.settings import AutoscalerSettings
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, ServerThread

WAIT = 10.0
"""Seconds a test may wait for a server on loopback: generous, never used up."""


def _certificates(tmp_path: Path) -> dict[str, Path]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raygate test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    files = {"ca": tmp_path / "ca.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for role, serial in (("server", 2), ("client", 3)):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, role)]))
                   .issuer_name(ca_name).public_key(key.public_key()).serial_number(serial)
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(hours=1)))
        if role == "server":
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost")]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        files[f"{role}.crt"] = tmp_path / f"{role}.crt"
        files[f"{role}.crt"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[f"{role}.key"] = tmp_path / f"{role}.key"
        files[f"{role}.key"].write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
    return files


@pytest.fixture
def tls_proxy(server: ServerThread, tmp_path: Path) -> Iterator[tuple[str, dict[str, Path]]]:
    """``https://localhost:PORT`` in front of raygate's HTTP port, asking clients for a
    certificate signed by the test CA."""
    files = _certificates(tmp_path)
    upstream = server.url.removeprefix("http://")

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            connection = http.client.HTTPConnection(upstream, timeout=WAIT)
            try:
                connection.request("GET", self.path)
                reply = connection.getresponse()
                body = reply.read()
            finally:
                connection.close()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(files["ca"]))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(files["server.crt"], files["server.key"])
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://localhost:{httpd.server_address[1]}", files
    httpd.shutdown()
    httpd.server_close()


def test_https_with_a_private_ca_and_a_client_certificate(
        server: ServerThread, clock: FakeClock, advisors: list[Advisor],
        tls_proxy: tuple[str, dict[str, Path]]) -> None:
    url, files = tls_proxy
    server.publish(*sc.waiting_for_capacity())
    env = {"RAYGATE_URL": url, "RAYGATE_TLS_CA_FILE": str(files["ca"]),
           "RAYGATE_TLS_CERT_FILE": str(files["client.crt"]),
           "RAYGATE_TLS_KEY_FILE": str(files["client.key"])}
    made = Advisor(AutoscalerSettings.from_env(env), "ray", "demo", clock=clock)
    advisors.append(made)
    advice = made.current()
    assert advice is not None and "overflow" in advice.held
    # Without the client certificate the proxy refuses the handshake: no advice.
    anonymous = Advisor(AutoscalerSettings.from_env(
        {"RAYGATE_URL": url, "RAYGATE_TLS_CA_FILE": str(files["ca"])}), "ray", "demo",
        clock=clock)
    advisors.append(anonymous)
    assert anonymous.current() is None
    # Nor without the CA: the system's trust store does not know it.
    untrusting = Advisor(AutoscalerSettings.from_env({"RAYGATE_URL": url}), "ray", "demo",
                         clock=clock)
    advisors.append(untrusting)
    assert untrusting.current() is None
