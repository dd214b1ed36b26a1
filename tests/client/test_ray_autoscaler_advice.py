"""The parts of ``raygate-autoscaler`` that need no Ray: its settings, the advice it reads
from a real raygate server on loopback (HTTP, gRPC, HTTPS with mutual TLS), the bounded
wait, the outage log; and that nothing else in raygate imports Ray."""

from __future__ import annotations

import ast
import contextlib
import datetime
import http.client
import http.server
import logging
import platform
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from raygate.client import TlsSettings
from raygate.contract.command import ConfigError
from raygate.ray_autoscaler.advice import AdmissionClient, Advice, Advisor, client_for
from raygate.ray_autoscaler.settings import AutoscalerSettings
from testkit.builders import T0_EPOCH
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, ServerThread

ROOT = Path(__file__).resolve().parents[2]
WAIT = 10.0
"""Seconds a test may wait for a server on loopback: generous, never used up."""


@pytest.fixture
def clock(server: ServerThread) -> FakeClock:
    server.clock.now = T0_EPOCH
    return server.clock


@pytest.fixture
def advisors() -> Iterator[list[Advisor]]:
    made: list[Advisor] = []
    yield made
    for advisor in made:
        advisor.close()


def advisor(advisors: list[Advisor], url: str, clock: Callable[[], float], name: str = "demo",
            timeout_seconds: float = WAIT) -> Advisor:
    made = Advisor(AutoscalerSettings(url, timeout_seconds), "ray", name, clock=clock)
    advisors.append(made)
    return made


# --- settings ---------------------------------------------------------------------------


def test_settings_defaults() -> None:
    settings = AutoscalerSettings.from_env({"RAYGATE_URL": "http://raygate.raygate-system:8888"})
    assert settings == AutoscalerSettings("http://raygate.raygate-system:8888", 2.0, 0.0,
                                          TlsSettings())


def test_settings_in_full(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "tls.crt", "tls.key"))
    for path in (ca, cert, key):
        path.write_text("PEM")
    token = tmp_path / "token"
    token.write_text("a token")
    env = {"RAYGATE_URL": "grpcs://raygate:9090", "RAYGATE_TIMEOUT_SECONDS": "0.5",
           "RAYGATE_POLL_INTERVAL_SECONDS": "15", "RAYGATE_TLS_CA_FILE": str(ca),
           "RAYGATE_TLS_CERT_FILE": str(cert), "RAYGATE_TLS_KEY_FILE": str(key),
           "RAYGATE_TLS_SERVER_NAME": "raygate.raygate-system.svc",
           "RAYGATE_TOKEN_FILE": str(token)}
    assert AutoscalerSettings.from_env(env) == AutoscalerSettings(
        "grpcs://raygate:9090", 0.5, 15.0,
        TlsSettings(str(ca), str(cert), str(key), "raygate.raygate-system.svc"), str(token))
    # Set and empty: no token, even where a service account token is mounted.
    assert AutoscalerSettings.from_env({**env, "RAYGATE_TOKEN_FILE": ""}).token_file is None


@pytest.mark.parametrize(("env", "problems"), [
    ({}, ["RAYGATE_URL: required: raygate's API, e.g. http://raygate.raygate-system:8888 or "
          "grpc://...:9090"]),
    ({"RAYGATE_URL": "raygate:8888"},
     ["RAYGATE_URL: expected http://, https://, grpc:// or grpcs:// and a host, got "
      "'raygate:8888'"]),
    ({"RAYGATE_URL": "grpc://raygate/v1"},
     ["RAYGATE_URL: a gRPC URL is grpc://host:port with no path, got 'grpc://raygate/v1'"]),
    ({"RAYGATE_URL": "http://raygate:8888", "RAYGATE_TIMEOUT_SECONDS": "0",
      "RAYGATE_POLL_INTERVAL_SECONDS": "soon"},
     ["RAYGATE_TIMEOUT_SECONDS: expected a number of seconds > 0, got '0'",
      "RAYGATE_POLL_INTERVAL_SECONDS: expected a number of seconds >= 0, got 'soon'"]),
    ({"RAYGATE_URL": "http://raygate:8888", "RAYGATE_TOKEN_FILE": "/nonexistent/token"},
     ["RAYGATE_TOKEN_FILE: cannot read '/nonexistent/token'"]),
    ({"RAYGATE_URL": "http://raygate:8888", "RAYGATE_TLS_CERT_FILE": "/dev/null",
      "RAYGATE_TLS_CA_FILE": "/nonexistent/ca.pem"},
     ["RAYGATE_TLS_CA_FILE: cannot read '/nonexistent/ca.pem'",
      "RAYGATE_TLS_CERT_FILE and RAYGATE_TLS_KEY_FILE: give both or neither",
      "RAYGATE_TLS_*: set, but RAYGATE_URL is http://; use https:// for TLS"]),
    ({"RAYGATE_URL": "https://raygate:8443", "RAYGATE_TLS_SERVER_NAME": "raygate"},
     ["RAYGATE_TLS_SERVER_NAME: gRPC only; for https:// put that name in RAYGATE_URL"]),
], ids=["missing", "no-scheme", "grpc-path", "numbers", "token-file", "tls-files",
        "server-name"])
def test_settings_problems_are_all_reported(env: dict[str, str], problems: list[str]) -> None:
    with pytest.raises(ConfigError) as error:
        AutoscalerSettings.from_env(env)
    assert error.value.problems == problems


# --- advice from a real raygate ---------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_advice_over_either_transport(server: ServerThread, clock: FakeClock,
                                      advisors: list[Advisor], transport: str) -> None:
    url = (server.url if transport == "http"
           else f"grpc://127.0.0.1:{server.server.grpc_port}")
    server.publish(*sc.waiting_for_capacity(), *sc.stuck())
    demo = advisor(advisors, url, clock).current()
    assert demo is not None
    assert {p: (a.action, a.state) for p, a in demo.pods.items()} == {
        "demo-overflow-1": ("keep", "WaitingForCapacity"),
        "demo-overflow-2": ("keep", "WaitingForCapacity"),
        "demo-overflow-3": ("keep", "WaitingForGangAdmission")}
    assert set(demo.held) == {"headgroup", "overflow"}  # baseline: proceed
    lonely = advisor(advisors, url, clock, name="lonely").current()
    assert lonely is not None
    assert {p: (a.action, a.state) for p, a in lonely.pods.items()} == {
        "lonely-unbound": ("replace", "Stuck"), "lonely-pulling": ("replace", "Stuck"),
        "lonely-new": ("keep", "Starting")}
    assert lonely.pods["lonely-unbound"].reason


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_node_coming_keeps_the_pod_and_none_coming_is_warned_once_per_change(
        server: ServerThread, clock: FakeClock, advisors: list[Advisor], transport: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="raygate.autoscaler")
    url = (server.url if transport == "http"
           else f"grpc://127.0.0.1:{server.server.grpc_port}")
    server.publish(*sc.node_autoscaler())
    made = Advisor(AutoscalerSettings(url, WAIT, 0.0), "ray", "auto", clock=clock)
    advisors.append(made)
    auto = made.current()
    assert auto is not None
    assert {p: (a.action, a.state) for p, a in auto.pods.items()
            if a.state in ("NodeProvisioning", "NoNodeComing")} == {
        "auto-launching": ("keep", "NodeProvisioning"),
        "auto-ca-up": ("keep", "NodeProvisioning"),
        "auto-no-pool": ("keep", "NoNodeComing"), "auto-ca-no": ("keep", "NoNodeComing"),
        "auto-stranded": ("keep", "NoNodeComing")}
    assert {"nopool", "cano", "floor"} <= set(auto.held) and "ca" not in auto.held
    for _ in range(3):  # polls that change nothing log nothing
        clock.now += 1
        assert made.current() is not None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 3
    assert any("no node is coming for pending worker ray/auto-no-pool" in w
               and "no instance type has enough resources" in w for w in warned)


class Counting:
    """``client_for`` that counts the requests its clients make."""

    def __init__(self) -> None:
        self.gets = 0

    def __call__(self, settings: AutoscalerSettings) -> AdmissionClient:
        client = client_for(settings)
        outer = self

        class Client:
            def get(self, namespace: str, name: str) -> object:
                outer.gets += 1
                return client.get(namespace, name)

            def close(self) -> None:
                client.close()

        return Client()  # type: ignore[return-value]


def test_an_answer_is_reused_within_the_poll_interval(
        server: ServerThread, clock: FakeClock, advisors: list[Advisor]) -> None:
    server.publish(*sc.waiting_for_capacity())
    counting = Counting()
    made = Advisor(AutoscalerSettings(server.url, WAIT, 15.0), "ray", "demo", clock=clock,
                   connect=counting)
    advisors.append(made)
    first = made.current()
    clock.now += 10
    assert made.current() is first
    assert counting.gets == 1
    clock.now += 5
    assert made.current() == first  # asked again: the same answer
    assert counting.gets == 2


def test_no_advice_while_raygate_answers_with_errors_warned_once(
        server: ServerThread, clock: FakeClock, advisors: list[Advisor],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="raygate.autoscaler")
    server.publish(*sc.waiting_for_capacity())
    made = advisor(advisors, server.url, clock, name="absent")
    assert [made.current() for _ in range(3)] == [None, None, None]
    server.publish(*sc.waiting_for_capacity(), sc.stuck()[0])
    made = advisor(advisors, server.url, clock, name="lonely")
    assert isinstance(made.current(), Advice)
    server.publish(*sc.waiting_for_capacity())  # raygate forgets it: an outage
    assert [made.current() for _ in range(3)] == [None, None, None]
    server.publish(*sc.stuck())
    assert isinstance(made.current(), Advice)
    messages = [(r.levelname, r.getMessage()) for r in caplog.records
                if r.levelno >= logging.INFO]
    assert messages == [
        ("WARNING", f"raygate at {server.url} gives no advice for RayCluster ray/absent "
                    "(RayCluster ray/absent is not known: raygate has synced with its source): "
                    "the autoscaler acts as stock until it does"),
        ("INFO", f"raygate at {server.url} answers for RayCluster ray/lonely: its advice "
                 "applies"),
        ("WARNING", f"raygate at {server.url} gives no advice for RayCluster ray/lonely "
                    "(RayCluster ray/lonely is not known: raygate has synced with its source): "
                    "the autoscaler acts as stock until it does"),
        ("INFO", f"raygate at {server.url} answers for RayCluster ray/lonely: its advice "
                 "applies"),
    ]


def test_a_hung_raygate_costs_one_bounded_wait(clock: FakeClock,
                                               advisors: list[Advisor]) -> None:
    """The port accepts connections (the kernel's backlog) but nobody answers: the first
    loop waits ``timeout_seconds`` and gets no advice; the next ones, while that request
    still hangs, do not wait at all."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        made = advisor(advisors, url, clock, timeout_seconds=0.2)
        started = time.monotonic()
        assert made.current() is None
        first = time.monotonic() - started
        assert made.current() is None
        assert first >= 0.2
        assert time.monotonic() - started < WAIT  # bounded, however slow the machine


# --- HTTPS with mutual TLS, through a TLS-terminating proxy in front of raygate ----------


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


# --- Ray stays out of raygate's core ------------------------------------------------------


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_autoscaler_integration_imports_ray() -> None:
    importing = sorted(str(p.relative_to(ROOT)) for top in ("raygate", "bench")
                       for p in (ROOT / top).rglob("*.py") if "ray" in _imports(p))
    assert importing == ["raygate/ray_autoscaler/cli.py",
                         "raygate/ray_autoscaler/provider.py"]


# --- The entrypoint's own help ------------------------------------------------------------


def test_help_names_every_variable_the_entrypoint_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from raygate.ray_autoscaler import settings
    from raygate.ray_autoscaler.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    variables = [v for k, v in vars(settings).items() if k.startswith("ENV_")]
    assert "RAYGATE_TOKEN_FILE" in variables
    assert [v for v in variables if v not in text] == []


def test_version_names_raygate_python_and_ray(capsys: pytest.CaptureFixture[str]) -> None:
    from raygate.ray_autoscaler.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    ray = "not installed"
    with contextlib.suppress(PackageNotFoundError):
        ray = version("ray")
    assert capsys.readouterr().out == (
        f"raygate-autoscaler {version('raygate')} (python {platform.python_version()}, "
        f"ray {ray})\n")
