"""``raygate explain --server`` and ``raygate admission`` against a raygate that checks its
callers: the token of ``--token-file`` (else ``$RAYGATE_TOKEN_FILE``, else the pod's
service account token) reaches it over HTTP and gRPC, and a refusal is one line naming
the option. raygate's real servers, the API-server double answering the reviews
(``harness``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from raygate.cli import main
from raygate.client import ENV_TOKEN_FILE
from tests.docs import doc
from tests.server.authz.harness import Env

EXPLAIN_A = ["explain", "team-a/rc-a-head", "--output", "json"]
EXPLAIN_B = ["explain", "team-b/rc-b-head", "--output", "json"]
GET_A = ["admission", "get", "team-a", "rc-a"]
GET_B = ["admission", "get", "team-b", "rc-b"]
NO_TOKEN = ("raygate: a bearer token is required: `authorization: Bearer <token>` (an HTTP "
            "header, or gRPC metadata); give one the API server accepts with --token-file "
            "PATH, e.g. <(kubectl -n NAMESPACE create token SERVICEACCOUNT)\n")
REJECTED = ("raygate: the bearer token was not accepted by the Kubernetes API server "
            "(TokenReview); give one the API server accepts with --token-file PATH, e.g. "
            "<(kubectl -n NAMESPACE create token SERVICEACCOUNT)\n")
FORBIDDEN = ('raygate: user "alice" may not get rayclusters.ray.io{what} in namespace '
             '"team-b"; let that user read it (a RoleBinding or ClusterRoleBinding to the '
             "ClusterRole raygate-status-reader), or give another token with --token-file "
             "PATH\n")


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    flag: str | None
    """``--token-file``'s file's content (None: no flag)."""
    env: str | None = None
    """``$RAYGATE_TOKEN_FILE``'s file's content (None: unset)."""
    mounted: str | None = None
    """The pod's service account token (None: none mounted)."""
    status: int = 0
    err: str = ""
    """stderr (``{what}``: the name asked for, where the command names one)."""


CASES = [
    *(Case(f"{c}-flag", argv, "alice-token") for c, argv in (("explain", EXPLAIN_A),
                                                              ("admission", GET_A))),
    *(Case(f"{c}-no-token", argv, None, status=1, err=NO_TOKEN)
      for c, argv in (("explain", EXPLAIN_A), ("admission", GET_A))),
    *(Case(f"{c}-rejected", argv, "nobody-token", status=1, err=REJECTED)
      for c, argv in (("explain", EXPLAIN_A), ("admission", GET_A))),
    # The user the server names is the token's: alice's reached it.
    Case("explain-forbidden", EXPLAIN_B, "alice-token", status=1,
         err=FORBIDDEN.format(what="")),
    Case("admission-forbidden", GET_B, "alice-token", status=1,
         err=FORBIDDEN.format(what=' "rc-b"')),
    Case("explain-env", EXPLAIN_A, None, env="alice-token"),
    Case("admission-env", GET_A, None, env="alice-token"),
    Case("explain-in-pod", EXPLAIN_A, None, mounted="alice-token"),
    Case("admission-in-pod", GET_A, None, mounted="alice-token"),
    # The flag outranks the environment, which outranks the pod's own token.
    Case("flag-over-env", EXPLAIN_A, "alice-token", env="nobody-token"),
    Case("env-over-pod", GET_A, None, env="alice-token", mounted="nobody-token"),
    Case("flag-over-pod", GET_B, "autoscaler-token", mounted="alice-token"),
    # An empty path sends none, whatever the pod has.
    Case("flag-empty", EXPLAIN_A, "", mounted="alice-token", status=1, err=NO_TOKEN),
    Case("env-empty", GET_A, None, env="", mounted="alice-token", status=1, err=NO_TOKEN),
]


@dataclass
class Terminal:
    """The operator's shell: its files, its environment, and whether it runs in a pod."""

    tmp: Path
    monkeypatch: pytest.MonkeyPatch

    def file_of(self, name: str, token: str) -> str:
        if not token:
            return ""
        path = self.tmp / name
        path.write_text(token + "\n")
        return str(path)

    def flag_for(self, case: Case) -> list[str]:
        """Sets up what ``case`` says; the ``--token-file`` to give."""
        mounted = self.tmp / "serviceaccount-token"  # absent unless the case mounts one
        if case.mounted is not None:
            mounted.write_text(case.mounted)
        self.monkeypatch.setattr("raygate.client.cli.SERVICE_ACCOUNT_TOKEN", str(mounted))
        self.monkeypatch.delenv(ENV_TOKEN_FILE, raising=False)
        if case.env is not None:
            self.monkeypatch.setenv(ENV_TOKEN_FILE, self.file_of("env-token", case.env))
        return [] if case.flag is None else ["--token-file",
                                             self.file_of("flag-token", case.flag)]


@pytest.fixture
def terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Terminal:
    return Terminal(tmp_path, monkeypatch)


@pytest.mark.parametrize("transport", ["http", "grpc"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_token_reaches_raygate(shared: Env, terminal: Terminal,
                                   capsys: pytest.CaptureFixture[str], case: Case,
                                   transport: str) -> None:
    url = shared.server.url if transport == "http" else f"grpc://{shared.server.grpc_target}"
    assert main([*case.argv, "--server", url, *terminal.flag_for(case)]) == case.status
    out, err = capsys.readouterr()
    assert err == case.err
    if case.status == 0:
        assert ('"name":"rc-' if case.argv[0] == "admission" else '"pod":"') in out

def test_the_docs_give_the_token() -> None:
    """docs/tools.md quotes the refusal as the command says it; each ``raygate explain``
    or ``raygate admission`` of docs/troubleshooting.md that asks raygate gives a token."""
    assert f"\n{NO_TOKEN}" in doc("tools.md")
    asking = re.findall(r"^(?:\$ )?raygate (?:explain|admission) .*--server.*$",
                        doc("troubleshooting.md"), re.M)
    assert asking
    assert all("--token-file" in line for line in asking), asking
