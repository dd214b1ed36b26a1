"""Where raygate finds its cluster, and ``raygate serve`` following one."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from raygate.server import cli
from raygate.server.kube.client import (
    ClusterConfigError,
    NoClusterConfig,
    PodFiles,
    load_connection,
)
from testkit.apiserver import CRDS, ApiServerDouble, kubeconfig_text
from testkit.builders import make_node, make_pod


@pytest.fixture
def no_home_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home without ~/.kube/config and an environment with no cluster in it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path


def two_contexts(path: Path) -> Path:
    config = json.loads(kubeconfig_text("http://127.0.0.1:1", "t1", context="one"))
    config["clusters"].append({"name": "two", "cluster": {"server": "http://127.0.0.1:2"}})
    config["contexts"].append({"name": "two", "context": {"cluster": "two", "user": "double"}})
    path.write_text(json.dumps(config))
    return path


def test_without_any_config_there_is_no_cluster(no_home_config: Path) -> None:
    with pytest.raises(NoClusterConfig):
        load_connection(None, None, {})


def test_kubeconfig_from_the_environment_with_a_chosen_context(
    no_home_config: Path,
) -> None:
    path = two_contexts(no_home_config / "config")
    assert load_connection(None, None, {"KUBECONFIG": str(path)}).configuration.host == (
        "http://127.0.0.1:1")
    connection = load_connection(None, "two", {"KUBECONFIG": str(path)})
    assert connection.configuration.host == "http://127.0.0.1:2"
    assert "context two" in connection.description


def test_the_default_kubeconfig_in_home(no_home_config: Path) -> None:
    (no_home_config / ".kube").mkdir()
    two_contexts(no_home_config / ".kube" / "config")
    assert load_connection(None, None, {}).configuration.host == "http://127.0.0.1:1"


def test_in_cluster_config_when_running_in_a_pod(tmp_path: Path) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("service-account-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    connection = load_connection(None, None, env, PodFiles(str(token), str(ca)))
    assert connection.configuration.host == "https://10.96.0.1:443"
    assert connection.configuration.ssl_ca_cert == str(ca)
    assert connection.configuration.get_api_key_with_prefix("BearerToken") == (
        "bearer service-account-token")
    assert "in-cluster" in connection.description
    # An explicit kubeconfig wins over the pod's own config.
    explicit = two_contexts(tmp_path / "config")
    assert load_connection(str(explicit), None, env).configuration.host == "http://127.0.0.1:1"


def test_in_cluster_config_without_a_token_is_refused(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ClusterConfigError, match="in-cluster config"):
        load_connection(None, None, env, PodFiles(token=str(tmp_path / "missing")))


def test_a_broken_kubeconfig_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    with pytest.raises(ClusterConfigError, match=str(path)):
        load_connection(str(path), "missing", {})


def test_serve_without_a_cluster_names_every_way_to_give_one(
    no_home_config: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err
    for way in ("in-cluster", "--kubeconfig FILE", "$KUBECONFIG", "~/.kube/config",
                "--snapshot FILE", "--demo"):
        assert way in err


def test_serve_with_a_broken_kubeconfig_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("not: [a, kubeconfig")
    assert cli.main(["serve", "--kubeconfig", str(path)]) == 2
    assert f"kubeconfig {path}" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve_follows_the_cluster_of_a_kubeconfig_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    double = ApiServerDouble().start()
    double.install(CRDS[0])
    double.create(make_node("cpu-1").obj())
    double.create(make_pod("w1").on("cpu-1").obj())
    kubeconfig = double.kubeconfig(tmp_path / "kubeconfig")
    http, grpc_port = _free_port(), _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "raygate", "serve", "--kubeconfig", str(kubeconfig),
         "--http-addr", f"127.0.0.1:{http}", "--grpc-addr", f"127.0.0.1:{grpc_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                reply = httpx.get(f"http://127.0.0.1:{http}/readyz")
                if reply.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "raygate did not become ready"
            time.sleep(0.05)
        body = reply.json()
        assert body["objects"]["pods"] == 1 and body["kinds"]["Pod"]["synced"]
        assert sorted(body["absent"]) == ["DeviceClass", "NodeClaim", "PodGroup",
                                          "PodGroup.scheduling.k8s.io", "ResourceClaim",
                                          "ResourceClaimTemplate", "ResourceSlice",
                                          "Workload"]
        assert body["source"].startswith(f"cluster {double.url}")
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0]
        double.stop()
    assert process.returncode == 0, output
    assert "cache synced: 0 deviceclasses, 0 resourceslices, 1 nodes, 1 pods" in output
