"""`raygate serve` as a newcomer runs it: a real process, real ports."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
import yaml

from raygate.policy.config import PolicyConfig
from raygate.server.app import build_server
from raygate.server.cache.cluster import ClusterCache
from raygate.server.check.inputs import DEFAULT_MAX_BYTES
from raygate.server.cli import _flags, _parser, main
from raygate.server.listeners import ListenError, bind_socket
from testkit.builders import make_pod


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    def __init__(self, process: subprocess.Popen[str], url: str, grpc_port: int) -> None:
        self.process = process
        self.url = url
        self.grpc_port = grpc_port
        self.output = ""


@contextmanager
def serve(*args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """`raygate serve ARGS` in a process of its own, up and answering; SIGTERM after."""
    http, grpc_port = _free_port(), _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "raygate", "serve", *args,
         "--http-addr", f"127.0.0.1:{http}", "--grpc-addr", f"127.0.0.1:{grpc_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **(env or {})},
    )
    served = Served(process, f"http://127.0.0.1:{http}", grpc_port)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{served.url}/readyz")
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[0]
                assert time.monotonic() < deadline, "raygate did not start"
                time.sleep(0.05)
        yield served
    finally:
        process.send_signal(signal.SIGTERM)
        served.output = process.communicate(timeout=30)[0]


VERSION_LINE = f"raygate {version('raygate')} (python {platform.python_version()})"


def test_version_prints_raygate_and_python_versions() -> None:
    # The console script, as an operator runs it (argparse's version action exits 0).
    done = subprocess.run([str(Path(sys.executable).parent / "raygate"), "--version"],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, VERSION_LINE + "\n", "")


def test_version_imports_no_server_no_kubernetes_client_no_checks() -> None:
    # What made `raygate --version` take most of a second: the whole server loaded first.
    code = ("import sys\nfrom raygate.server.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == VERSION_LINE + "\n"
    loaded = set(done.stderr.split())
    for heavy in ("grpc", "uvicorn", "kubernetes", "yaml", "raygate.server.app",
                  "raygate.server.server", "raygate.server.check"):
        assert heavy not in loaded


def _helps() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    parser = _parser()
    yield "raygate", parser
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield from commands.choices.items()


@pytest.mark.parametrize(("name", "parser"), list(_helps()))
def test_help_is_plain_text_and_says_what_every_flag_does(
    name: str, parser: argparse.ArgumentParser,
) -> None:
    text = parser.format_help()
    # reStructuredText and Markdown markup, and Python's spelling of empty defaults.
    for markup in ("``", "`", "default ''", "default ()", ":class:", ":func:"):
        assert markup not in text, f"{name}: {markup!r}"
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            assert action.help, f"{name}: {action.option_strings or action.dest} has no help"


def test_checks_max_size_default_is_the_checks_own() -> None:
    assert _parser().parse_args(["check", "f.yaml"]).max_size == DEFAULT_MAX_BYTES


def test_a_config_file_that_is_not_yaml_is_a_problem_of_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("policy:\n  thrashGuardSeconds: 30\n   x: [1\n")
    assert main(["serve", "--demo", "--config", str(config)]) == 2
    # PyYAML's own message is five lines: the source line and a caret under the column.
    assert capsys.readouterr().err == (
        f"raygate: invalid configuration:\n  {config}: not valid YAML: line 3, column 5: "
        "mapping values are not allowed here\n")


@pytest.mark.parametrize("flag", ["--snapshot", "--kubeconfig"])
def test_cluster_state_that_is_not_yaml_is_refused_in_one_line(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    broken = tmp_path / "f.yaml"
    broken.write_text("apiVersion: v1\nitems:\n  - a: [1\n")
    assert main(["serve", flag, str(broken)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    # PyYAML's own message is four lines here (its C loader words the problem apart).
    assert str(broken) in err and ": line 4, column 1: " in err
    assert err.endswith("(while parsing a flow sequence at line 3, column 8)\n")


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


def test_every_bad_setting_is_printed_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("server:\n  limits: {maxBodyBytes: x}\n")
    monkeypatch.setenv("RAYGATE_SHUTDOWN_GRACE_SECONDS", "-1")
    assert main(["serve", "--demo", "--config", str(config), "--authz", "on",
                 "--predicate-concurrency", "0"]) == 2
    err = capsys.readouterr().err
    for message in ('c.yaml: server.limits.maxBodyBytes: expected a positive integer, got "x"',
                    'RAYGATE_SHUTDOWN_GRACE_SECONDS: expected a number of seconds > 0',
                    '--predicate-concurrency: expected a positive integer, got "0"',
                    "--authz: on needs an API server to ask"):
        assert message in err


@pytest.mark.parametrize(("argv", "given"), [
    (["serve"], {}),
    # A flag given as its default value is still given: it outranks env and file.
    (["serve", "--http-addr", "0.0.0.0:8888", "--log-level", "debug"],
     {"http_addr": "0.0.0.0:8888", "log_level": "debug"}),
    (["serve", "--demo", "--config", "c.yaml", "--max-body-bytes", "5"],
     {"demo": True, "config_file": "c.yaml", "max_body_bytes": "5"}),
    (["serve", "--snapshot", "a", "--snapshot", "b", "--context", "x"],
     {"snapshots": ["a", "b"], "context": "x"}),
])
def test_only_flags_on_the_command_line_count_as_given(
    argv: list[str], given: dict[str, object],
) -> None:
    args = _parser().parse_args(argv)
    assert _flags(args) == given
    assert args.http_addr == "0.0.0.0:8888"  # the parser's defaults stay the documented ones


def test_print_config_prints_the_effective_settings_and_exits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("server:\n  limits: {predicateConcurrency: 8}\n"
                      "policy:\n  thrashGuardSeconds: 30\n")
    monkeypatch.setenv("RAYGATE_LOG_LEVEL", "debug")
    # Nothing listens at the address: --print-config returns before binding.
    assert main(["serve", "--demo", "--config", str(config), "--print-config",
                 "--http-addr", "127.0.0.1:1"]) == 0
    out = capsys.readouterr().out
    document = yaml.safe_load(out)
    assert document["server"]["httpAddr"] == "127.0.0.1:1"
    assert document["server"]["limits"]["predicateConcurrency"] == 8
    assert document["server"]["log"]["level"] == "debug"
    assert document["policy"]["thrashGuardSeconds"] == 30
    for line in ("httpAddr: 127.0.0.1:1", "# flag --http-addr", "# env RAYGATE_LOG_LEVEL",
                 "predicateConcurrency: 8", "# file", "# default",
                 f"# raygate {version('raygate')}\n"):
        assert line in out


def test_print_config_exits_2_on_what_serve_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    not_pem = tmp_path / "tls.crt"
    not_pem.write_text("not a certificate\n")
    for argv, refusal in (
        (["--snapshot", str(tmp_path / "absent.yaml")], "absent.yaml: cannot read"),
        (["--demo", "--tls-cert", str(not_pem), "--tls-key", str(not_pem)],
         "TLS: cannot load"),
    ):
        assert main(["serve", *argv, "--print-config"]) == 2, argv
        out, err = capsys.readouterr()
        assert yaml.safe_load(out)["server"]["httpAddr"] == "0.0.0.0:8888"  # printed still
        assert refusal in err
        # In serve's own words (it refuses these before it binds a port).
        assert main(["serve", *argv]) == 2
        assert capsys.readouterr() == ("", err)


def test_serve_demo_process_answers_and_stops_on_sigterm() -> None:
    with serve("--demo") as served:
        reply = httpx.get(f"{served.url}/readyz")
        assert reply.status_code == 200
        assert reply.json()["objects"]["nodes"] == 5
    assert served.process.returncode == 0, served.output
    assert "loaded demo cluster" in served.output
    assert f"{VERSION_LINE} starting" in served.output


def test_serve_reloads_the_policy_of_its_config_file(tmp_path: Path) -> None:
    """The demo's gpu-node-2 is a GPU node by its label only: a policy without that label
    makes it a CPU node for a CPU-only Ray worker's scores, with no restart."""
    config = tmp_path / "raygate.yaml"
    config.write_text("policy:\n  gpuNodeLabels: {nvidia.com/gpu.present: 'true'}\n")
    pod = make_pod("w", "ray").ray("rc", "workers").requests(cpu="1").obj()
    body = {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-node-2", "cpu-node-1"]}
    with serve("--demo", "--config", str(config)) as served, httpx.Client() as client:
        url = f"{served.url}/scheduler/prioritize"
        assert client.post(url, json=body).json() == [
            {"Host": "gpu-node-2", "Score": 0}, {"Host": "cpu-node-1", "Score": 10}]
        # As the kubelet updates a ConfigMap volume: a new file swapped in whole.
        (tmp_path / "new.yaml").write_text("policy:\n  gpuNodeLabels: {}\n")
        os.replace(tmp_path / "new.yaml", config)
        deadline = time.monotonic() + 30  # the file is polled every 2 s
        while client.post(url, json=body).json()[0]["Score"] == 0:
            assert served.process.poll() is None
            assert time.monotonic() < deadline, "the policy was not reloaded"
            time.sleep(0.1)
        assert client.post(url, json=body).json()[0] == {"Host": "gpu-node-2", "Score": 10}
    assert served.process.returncode == 0, served.output
    assert "config reload: policy from" in served.output
    assert "applied: gpuNodeLabels" in served.output


def _refused(*args: str) -> subprocess.CompletedProcess[str]:
    """`raygate serve --demo ARGS` that is expected to refuse; warnings and errors only."""
    return subprocess.run(
        [sys.executable, "-m", "raygate", "serve", "--demo", "--log-level", "warning", *args],
        capture_output=True, text=True, timeout=60, check=False)


def test_a_second_raygate_on_a_held_grpc_port_refuses_in_one_line() -> None:
    with serve("--demo") as first:
        done = _refused("--http-addr", f"127.0.0.1:{_free_port()}",
                        "--grpc-addr", f"127.0.0.1:{first.grpc_port}")
        assert (done.returncode, done.stdout, done.stderr) == (
            2, "", f"raygate: cannot listen on 127.0.0.1:{first.grpc_port}: "
                   "Address already in use\n")
        assert httpx.get(f"{first.url}/readyz").status_code == 200
    assert first.process.returncode == 0, first.output


@pytest.mark.parametrize("flag", ["--grpc-addr", "--http-addr"])
def test_a_port_held_by_another_program_refuses_in_one_line(flag: str) -> None:
    # As Prometheus holds 9090: a plain listening socket, no SO_REUSEPORT.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        other = "--http-addr" if flag == "--grpc-addr" else "--grpc-addr"
        done = _refused(flag, f"127.0.0.1:{port}", other, f"127.0.0.1:{_free_port()}")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"raygate: cannot listen on 127.0.0.1:{port}: Address already in use\n")


def test_grpc_does_not_share_its_port_with_a_reuseport_listener() -> None:
    """gRPC's own bind, should the port be taken after raygate checked it: a listener
    that would share (SO_REUSEPORT, as gRPC's default is) refuses it all the same."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with bind_socket("127.0.0.1", 0) as http:
            server = build_server(ClusterCache(PolicyConfig(), "test"), http,
                                  f"127.0.0.1:{port}")
            with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port} "):
                asyncio.run(server.run())


def test_the_parser_offers_the_kuberay_versions_the_check_knows() -> None:
    from raygate.server import cli
    from raygate.server.check import schema as check

    assert cli.KUBERAY_VERSIONS == check.VERSIONS
    assert cli.KUBERAY_VERSIONS[-1] == check.DEFAULT_VERSION
