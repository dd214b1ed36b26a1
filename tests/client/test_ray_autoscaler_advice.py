"""The parts of ``raygate-autoscaler`` that need no Ray: its settings, the advice it reads
from a real raygate server on loopback (HTTP, gRPC; HTTPS with mutual TLS:
test_ray_autoscaler_tls.py), the bounded wait, the outage log; and that nothing else in
raygate imports Ray."""

from __future__ import annotations

import ast
import contextlib
import logging
import platform
import socket
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from raygate.client import TlsSettings
from raygate.contract.command import ConfigError
from raygate.ray_autoscaler.advice import AdmissionClient, Advice, Advisor, client_for
from raygate.ray_autoscaler.settings import AutoscalerSettings
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, ServerThread

ROOT = Path(__file__).resolve().parents[2]
WAIT = 10.0
"""Seconds a test may wait for a server on loopback: generous, never used up."""


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
                         "raygate/ray_autoscaler/provider.py",
                         "raygate/ray_autoscaler/scheduling.py"]


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
