"""`raygate serve` as a newcomer runs it: a real process, real ports."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from extender.cli import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve_without_a_cluster_names_the_ways_to_give_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "--snapshot FILE" in err and "--demo" in err


def test_bad_config_refuses_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("policy:\n  gpuNodesForSurplus: maybe\n")
    assert main(["serve", "--demo", "--config", str(config)]) == 2
    assert "policy.gpuNodesForSurplus: expected one of" in capsys.readouterr().err


def test_bad_snapshot_refuses_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "s.yaml"
    snap.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"
                    "status: {allocatable: {cpu: many}}\n")
    assert main(["serve", "--snapshot", str(snap)]) == 2
    assert "s.yaml: item 0 (Node n): not a quantity" in capsys.readouterr().err


def test_bad_address_refuses_to_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--demo", "--http-addr", "nowhere"]) == 2
    assert "--http-addr: expected HOST:PORT" in capsys.readouterr().err


def test_serve_demo_process_answers_and_stops_on_sigterm() -> None:
    http, grpc_port = _free_port(), _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--demo",
         "--http-addr", f"127.0.0.1:{http}", "--grpc-addr", f"127.0.0.1:{grpc_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = httpx.get(f"http://127.0.0.1:{http}/readyz")
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[0]
                assert time.monotonic() < deadline, "raygate did not start"
                time.sleep(0.05)
        assert reply.status_code == 200
        assert reply.json()["objects"]["nodes"] == 5
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0]
    assert process.returncode == 0, output
    assert "loaded demo cluster" in output
