"""``--token-file`` of the commands that ask a running raygate (``raygate explain
--server``, ``raygate admission``, ``python -m raygate.client``): which file it names, what
the command refuses before asking anything, and ``token_file`` on a pipe. That the token
reaches raygate: tests/server/authz/test_cli_tokens.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from raygate.cli import main
from raygate.client import ENV_TOKEN_FILE, token_file
from raygate.client.cli import main as client_main
from raygate.client.cli import token_for
from raygate.contract.command import CommandError
from raygate.ray_autoscaler import settings


@pytest.fixture(autouse=True)
def _no_token_around(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the machine has: no ``$RAYGATE_TOKEN_FILE``, no pod's token."""
    monkeypatch.delenv(ENV_TOKEN_FILE, raising=False)
    monkeypatch.setattr("raygate.client.cli.SERVICE_ACCOUNT_TOKEN", str(tmp_path / "none"))


# id; --token-file; $RAYGATE_TOKEN_FILE; a pod's token mounted; the token sent (None: none)
TOKENS: list[tuple[str, str | None, str | None, bool, str | None]] = [
    ("nothing", None, None, False, None),
    ("in-pod", None, None, True, "pod"),
    ("flag", "flag", None, True, "flag"),
    ("env", None, "env", True, "env"),
    ("flag-over-env", "flag", "env", True, "flag"),
    ("flag-empty", "", "env", True, None),
    ("env-empty", None, "", True, None),
]


@pytest.mark.parametrize(("flag", "env", "mounted", "sent"), [t[1:] for t in TOKENS],
                         ids=[t[0] for t in TOKENS])
def test_which_token(tmp_path: Path, flag: str | None, env: str | None, mounted: bool,
                     sent: str | None) -> None:
    def path(name: str | None) -> str | None:
        if not name:
            return name
        (tmp_path / name).write_text(f"{name}\n")
        return str(tmp_path / name)

    pod = tmp_path / "pod"
    if mounted:
        pod.write_text("pod")
    environ = {} if env is None else {ENV_TOKEN_FILE: str(path(env))}
    token = token_for(path(flag), environ, mounted=str(pod))
    assert (token() if token else None) == sent


@pytest.mark.parametrize(("flag", "env", "said"), [
    ("absent", None, "--token-file: cannot read '{tmp}/absent'"),
    (".", None, "--token-file: cannot read '{tmp}/.'"),
    (None, "absent", "$RAYGATE_TOKEN_FILE: cannot read '{tmp}/absent'"),
], ids=["flag-absent", "flag-directory", "env-absent"])
def test_a_token_file_that_cannot_be_read_is_refused_at_once(
        tmp_path: Path, flag: str | None, env: str | None, said: str) -> None:
    environ = {} if env is None else {ENV_TOKEN_FILE: f"{tmp_path}/{env}"}
    with pytest.raises(CommandError) as refused:
        token_for(None if flag is None else f"{tmp_path}/{flag}", environ)
    assert str(refused.value) == said.format(tmp=tmp_path)


def test_a_token_file_is_read_on_every_call_a_pipe_once(tmp_path: Path) -> None:
    """A rotated file's new token goes with the next call; a pipe
    (``<(kubectl create token ...)``) gives its token once, so it is kept: a watch over
    HTTP long-polls again and again with it."""
    file = tmp_path / "token"
    file.write_text("one\n")
    from_file = token_file(str(file))
    assert from_file() == "one"
    file.write_text("two")
    assert from_file() == "two"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=("piped\n",))
    writer.start()
    from_pipe = token_file(str(fifo))
    assert [from_pipe(), from_pipe(), from_pipe()] == ["piped"] * 3
    writer.join(timeout=10)


RUNS: dict[str, Callable[[list[str]], int]] = {"raygate": main, "client": client_main}
SERVER = ["--server", "http://127.0.0.1:1"]  # never asked: each is refused first

# id; the entry point; argv; what stderr's line says
REFUSED: list[tuple[str, str, list[str], str]] = [
    ("explain-offline", "raygate", ["explain", "ray/p", "--demo", "--token-file", "t"],
     "raygate: --token-file is for --server: offline, nothing is asked"),
    ("explain-no-file", "raygate", ["explain", "ray/p", *SERVER, "--token-file", "{tmp}/x"],
     "raygate: --token-file: cannot read '{tmp}/x'"),
    ("admission-no-file", "raygate",
     ["admission", "list", *SERVER, "--token-file", "{tmp}/x"],
     "raygate: --token-file: cannot read '{tmp}/x'"),
    ("client-no-file", "client", ["http://127.0.0.1:1", "list", "--token-file", "{tmp}/x"],
     "raygate: --token-file: cannot read '{tmp}/x'"),
    # kubectl's habit: host:port without a scheme.
    ("explain-no-scheme", "raygate", ["explain", "ray/p", "--server", "localhost:8888"],
     "raygate: expected an http://, https://, grpc:// or grpcs:// URL, got 'localhost:8888'"),
    ("admission-no-scheme", "raygate", ["admission", "list", "--server", "localhost:8888"],
     "raygate: expected an http://, https://, grpc:// or grpcs:// URL, got 'localhost:8888'"),
]


@pytest.mark.parametrize(("run", "argv", "said"), [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_what_is_refused_before_raygate_is_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], run: str, argv: list[str],
        said: str) -> None:
    assert RUNS[run]([a.format(tmp=tmp_path) for a in argv]) == 2
    assert capsys.readouterr().err == said.format(tmp=tmp_path) + "\n"


@pytest.mark.parametrize("argv", [["explain", "--help"], ["admission", "--help"]])
def test_the_help_names_the_option_its_default_and_the_role(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    text = " ".join(capsys.readouterr().out.split())
    for said in ("--token-file PATH", "$RAYGATE_TOKEN_FILE", "service account token",
                 "raygate-status-reader", "kubectl -n NS create token"):
        assert said in text


def test_the_autoscaler_reads_the_same_variable() -> None:
    assert settings.ENV_TOKEN_FILE == ENV_TOKEN_FILE == "RAYGATE_TOKEN_FILE"
