"""The command line's table (``raygate.process.exits``): each error a raygate command may
end on, the line stderr gets and the exit status, the same from every entry point; an
error the table does not name comes out whole."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from raygate.cli import EXTRA_OF
from raygate.contract.command import CommandError, ConfigError
from raygate.contract.errors import (
    Forbidden,
    RayClusterNotFound,
    RaygateError,
    Unauthorized,
    Unavailable,
)
from raygate.process.exits import CLI_ERRORS, exit_for, run
from raygate.ray_autoscaler import RayUnusable
from raygate.server.app import NO_CLUSTER, StartupError
from raygate.server.cache.snapshot_files import SnapshotError
from raygate.server.check.inputs import InputError
from raygate.server.kube.client import ClusterConfigError, NoClusterConfig
from raygate.server.listeners import ListenError

AUTOSCALER = "raygate-autoscaler"
RAY = ("raygate's autoscaler integration is tested with Ray 2.60.0 and relies on its "
       "private interfaces; this is Ray 2.61.0.")

# id; the error; the program; what stderr gets; the exit status
CASES: list[tuple[str, BaseException, str, str, int]] = [
    ("config", ConfigError(["policy.thrashGuardSeconds: expected a number", "--http-addr: "
                            "expected HOST:PORT, got 'x'"]), "raygate",
     "raygate: invalid configuration:\n  policy.thrashGuardSeconds: expected a number\n"
     "  --http-addr: expected HOST:PORT, got 'x'\n", 2),
    ("autoscaler-settings", ConfigError(["--cluster-name: required (or $RAY_CLUSTER_NAME)"],
                                        "refusing to start"), AUTOSCALER,
     "raygate-autoscaler: refusing to start:\n  --cluster-name: required (or "
     "$RAY_CLUSTER_NAME)\n", 2),
    ("usage", CommandError("give the pod as NAMESPACE/NAME"), "raygate",
     "raygate: give the pod as NAMESPACE/NAME\n", 2),
    ("snapshot", SnapshotError("s.yaml: cannot read: No such file or directory"), "raygate",
     "raygate: s.yaml: cannot read: No such file or directory\n", 2),
    ("no-cluster", NoClusterConfig("no in-cluster config, --kubeconfig, $KUBECONFIG or "
                                   "~/.kube/config"), "raygate",
     "raygate: no in-cluster config, --kubeconfig, $KUBECONFIG or ~/.kube/config\n", 2),
    ("cluster-config", ClusterConfigError("kubeconfig k: Invalid kube-config file."),
     "raygate", "raygate: kubeconfig k: Invalid kube-config file.\n", 2),
    ("startup", StartupError(NO_CLUSTER), "raygate", f"raygate: {NO_CLUSTER}\n", 2),
    ("listen", ListenError("cannot listen on 127.0.0.1:9090: Address already in use"),
     "raygate", "raygate: cannot listen on 127.0.0.1:9090: Address already in use\n", 2),
    ("input", InputError("a.yaml: cannot read: Permission denied"), "raygate",
     "raygate: a.yaml: cannot read: Permission denied\n", 2),
    ("ray", RayUnusable(RAY), AUTOSCALER, f"raygate-autoscaler: {RAY}\n", 2),
    ("unreachable", Unavailable("cannot reach raygate at http://127.0.0.1:1: [Errno 111] "
                                "Connection refused"), "raygate",
     "raygate: cannot reach raygate at http://127.0.0.1:1: [Errno 111] Connection refused\n",
     1),
    ("not-found", RayClusterNotFound("ray", "demo", synced=True), "raygate",
     "raygate: RayCluster ray/demo is not known: raygate has synced with its source\n", 1),
    ("error-reply", RaygateError("HTTP 502: <html>Bad Gateway</html>"), "raygate",
     "raygate: HTTP 502: <html>Bad Gateway</html>\n", 1),
    # A refused caller is told the option that gives a token (and, refused access, the
    # role that grants it).
    ("unauthorized", Unauthorized("a bearer token is required"), "raygate",
     "raygate: a bearer token is required; give one the API server accepts with "
     "--token-file PATH, e.g. <(kubectl -n NAMESPACE create token SERVICEACCOUNT)\n", 1),
    ("forbidden", Forbidden('user "u" may not list rayclusters.ray.io cluster-wide'),
     "raygate", 'raygate: user "u" may not list rayclusters.ray.io cluster-wide; let that '
     "user read it (a RoleBinding or ClusterRoleBinding to the ClusterRole "
     "raygate-status-reader), or give another token with --token-file PATH\n", 1),
    ("interrupted", KeyboardInterrupt(), "raygate", "", 130),
    ("missing-extra", ModuleNotFoundError("No module named 'yaml.constructor'",
                                          name="yaml.constructor"), "raygate",
     "raygate check: needs raygate's server extra (yaml is not installed): "
     "pip install 'raygate[server]'\n", 2),
]


def _raising(error: BaseException) -> Callable[[], int]:
    def command() -> int:
        raise error

    return command


@pytest.mark.parametrize(("error", "prog", "said", "status"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_error_has_its_line_and_status(error: BaseException, prog: str, said: str,
                                            status: int) -> None:
    stderr = io.StringIO()
    assert run(_raising(error), prog, name="check", extras=EXTRA_OF, stderr=stderr) == status
    assert stderr.getvalue() == said


def test_the_cases_cover_every_row() -> None:
    assert {kind for kind in CLI_ERRORS
            if any(isinstance(error, kind) for _, error, *_ in CASES)} == set(CLI_ERRORS)


@pytest.mark.parametrize(("error", "extras"), [
    (ValueError("a bug"), EXTRA_OF),
    (ImportError("cannot import name 'x' from 'raygate'"), EXTRA_OF),
    (ModuleNotFoundError("No module named 'nothere'", name="nothere"), EXTRA_OF),
    # Where no extra is named (raygate-autoscaler, python -m raygate.client), none brings it.
    (ModuleNotFoundError("No module named 'yaml'", name="yaml"), {}),
], ids=["bug", "import", "no-extra-has-it", "no-extras-named"])
def test_what_the_table_does_not_name_comes_out_whole(error: BaseException,
                                                      extras: dict[str, str]) -> None:
    stderr = io.StringIO()
    with pytest.raises(type(error)) as raised:
        run(_raising(error), name="check", extras=extras, stderr=stderr)
    assert raised.value is error
    assert stderr.getvalue() == ""


@pytest.mark.parametrize("status", [0, 1, 3])
def test_a_commands_own_status_is_its_exit_status(status: int) -> None:
    stderr = io.StringIO()
    assert run(lambda: status, stderr=stderr) == status
    assert stderr.getvalue() == ""


def test_the_most_specific_row_wins() -> None:
    # A RayUnusable is an ImportError too, a ConfigError a ValueError: their rows are the
    # command's, as RayClusterNotFound's is raygate's error reply's.
    assert exit_for(RayUnusable(RAY)) is CLI_ERRORS[CommandError]
    assert exit_for(ConfigError(["x"])) is CLI_ERRORS[CommandError]
    assert exit_for(RayClusterNotFound("ray", "demo", synced=False)) is CLI_ERRORS[RaygateError]
    assert exit_for(ValueError("a bug")) is None
