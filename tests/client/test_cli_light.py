"""``pip install raygate`` with no extra: the ``raygate`` command answers what needs no
server (``explain --server``, ``admission``), names the extra every other command needs
in one line, and never prints a traceback.

A fresh interpreter refuses the server extra's modules (a meta-path finder raising
``ModuleNotFoundError`` as a missing distribution does) and runs every command in one go:
honest about what a bare install can import, and one interpreter start for the lot."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from raygate.cli import EXTRA_OF
from raygate.cli import main as full_main
from tests.conftest import ServerThread, start_demo_server

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SERVER_MODULES = sorted(EXTRA_OF)
POD = "ray/queued-workers-worker-r4t5y"
MISSING = "needs raygate's server extra ({module} is not installed): pip install 'raygate[server]'"

DRIVER = r"""
import contextlib, importlib.abc, io, json, sys, traceback

REFUSED = set(sys.argv[1].split(",")) - {""}


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
from raygate.cli import main

results = []
for argv in json.loads(sys.stdin.read()):
    out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException:
            code = "raised"
            traceback.print_exc()
        out.flush()
    results.append({"code": code, "out": out.buffer.getvalue().decode(), "err": err.getvalue()})
loaded = sorted({m.partition(".")[0] for m in sys.modules} & REFUSED)
print(json.dumps({"results": results, "loaded": loaded}))
"""


@dataclass(frozen=True)
class Answer:
    code: int | str | None
    out: str
    err: str


def run_bare(argvs: list[list[str]]) -> list[Answer]:
    """Each command's exit status, stdout and stderr on an install without the server extra."""
    done = subprocess.run([sys.executable, "-c", DRIVER, ",".join(SERVER_MODULES)],
                          input=json.dumps(argvs), cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=120)
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["loaded"] == []  # refused means refused: nothing of it got in
    return [Answer(**r) for r in report["results"]]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def demo() -> Iterator[ServerThread]:
    thread = start_demo_server()
    yield thread
    thread.stop()


def needs_server(command: str) -> tuple[int, str, str]:
    return 2, "", f"raygate {command}: {MISSING}"


def test_every_command_on_a_bare_install(demo: ServerThread, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    http, grpc = demo.url, f"grpc://127.0.0.1:{demo.server.grpc_port}"
    nowhere = f"http://127.0.0.1:{closed_port()}"
    manifest = tmp_path / "rc.yaml"
    manifest.write_text("kind: RayCluster\n")
    token = tmp_path / "token"  # the demo checks no caller: sent, and ignored
    token.write_text("a-token\n")
    with httpx.Client(base_url=http, timeout=10) as client:
        status = client.get("/v1/namespaces/ray/rayclusters/queued/admission").text
    assert full_main(["explain", POD, "--server", http]) == 0
    table = capsys.readouterr().out
    # argv; exit status; what stdout holds (a part of it, or all); stderr's one line
    cases: list[tuple[list[str], int, str, str]] = [
        (["--version"], 0, "raygate", ""),
        (["--help"], 0, "admission", ""),
        (["serve", "--help"], 0, "--kubeconfig", ""),
        (["admission", "--help"], 0, "--server", ""),
        (["explain", POD, "--server", http], 0, table, ""),
        (["explain", POD, "--server", grpc], 0, table, ""),
        (["explain", POD, "--server", grpc, "--token-file", str(token)], 0, table, ""),
        (["explain", POD, "--server", nowhere], 1, "", "raygate: cannot reach raygate"),
        (["admission", "get", "ray", "queued", "--server", http], 0, status + "\n", ""),
        (["admission", "get", "ray", "queued", "--server", grpc], 0, status + "\n", ""),
        (["admission", "get", "ray", "queued", "--server", http, "--token-file", str(token)],
         0, status + "\n", ""),
        (["admission", "get", "ray", "queued", "--server", nowhere], 1, "", "raygate: "),
        (["admission", "get", "ray"], 2, "", "get takes NAMESPACE NAME"),
        (["serve", "--demo"], *needs_server("serve")),
        (["serve", "--demo", "--print-config"], *needs_server("serve")),
        (["check", str(manifest)], *needs_server("check")),
        (["check", "--kubeconfig", str(manifest)], *needs_server("check")),
        (["explain", POD, "--demo"], *needs_server("explain")),
        (["explain", POD, "--snapshot", str(manifest)], *needs_server("explain")),
        (["uninstall", "--dry-run"], *needs_server("uninstall")),
    ]
    answers = run_bare([argv for argv, *_ in cases])
    for (argv, code, out, err), answer in zip(cases, answers, strict=True):
        assert "Traceback" not in answer.err, (argv, answer.err)
        assert answer.code == code, (argv, answer)
        assert out in answer.out if out != table else answer.out == table, (argv, answer.out)
        if "{module}" in err:
            # One line, naming whichever server module the command reached for first.
            (line,) = answer.err.splitlines()
            prefix, _, rest = err.partition("{module}")
            assert line.startswith(prefix.format()) and line.endswith(rest), (argv, line)
            assert line[len(prefix):-len(rest)].partition(" ")[0] in EXTRA_OF, line
        else:
            assert err in answer.err, (argv, answer.err)


def test_the_entry_point_and_the_server_extras_modules() -> None:
    """``raygate`` is raygate.cli's; ``EXTRA_OF`` names every module the import contract
    keeps off the client side (the server extra's), and only those."""
    assert PYPROJECT["project"]["scripts"]["raygate"] == "raygate.cli:main"
    contracts = PYPROJECT["tool"]["importlinter"]["contracts"]
    (client_side,) = [c for c in contracts if "raygate.client" in c.get("source_modules", [])]
    assert set(EXTRA_OF) == set(client_side["forbidden_modules"]) - {"raygate.server"}
    assert set(EXTRA_OF.values()) == {"server"}
