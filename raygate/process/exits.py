"""How a raygate command ends on an error: the command line's table, as
``raygate.contract.errors`` holds the HTTP and gRPC fronts'. Each error type has the line
stderr gets and the exit status; every entry point (``raygate``, ``raygate-autoscaler``,
``python -m raygate.client``, ``python -m raygate.server.cli``) runs its command through
``run``, so that no command writes its own ``except`` or its own ``raygate: ...``.

An error the table does not name is a bug, or a broken install: it is raised again, and
Python shows it whole.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TextIO

from raygate.contract.command import CommandError
from raygate.contract.errors import Forbidden, RaygateError, Unauthorized

__all__ = ["CLI_ERRORS", "Exit", "exit_for", "line_for", "run", "said_for"]

_NO_EXTRAS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Exit:
    status: int
    line: str = ""
    """What stderr gets, ``str.format``-ed with ``prog``, ``error`` and ``command`` (and
    for a missing module, ``module`` and ``extra``); empty: nothing."""


CLI_ERRORS: Mapping[type[BaseException], Exit] = MappingProxyType({
    # What the command was given cannot be used; 2, as argparse's own usage errors.
    CommandError: Exit(2, "{prog}: {error}"),
    # raygate answered an error, or could not be reached.
    RaygateError: Exit(1, "{prog}: {error}"),
    # raygate checks its callers (in-cluster, by default) and refused this one: what to
    # give the commands that ask it (--token-file, raygate.client.cli).
    Unauthorized: Exit(1, "{prog}: {error}; give one the API server accepts with "
                          "--token-file PATH, e.g. <(kubectl -n NAMESPACE create token "
                          "SERVICEACCOUNT)"),
    Forbidden: Exit(1, "{prog}: {error}; let that user read it (a RoleBinding or "
                       "ClusterRoleBinding to the ClusterRole raygate-status-reader), or "
                       "give another token with --token-file PATH"),
    # A module the install lacks, which an extra brings (``run``'s ``extras``); one of no
    # extra is a broken install, raised again.
    ModuleNotFoundError: Exit(2, "{prog} {command}: needs raygate's {extra} extra "
                                 "({module} is not installed): pip install 'raygate[{extra}]'"),
    # Ctrl-C, how a watch ends: no traceback; 128 + SIGINT, what a shell would report.
    KeyboardInterrupt: Exit(130),
})
"""The exit of each error a command may end on; the most specific type wins."""


def exit_for(error: BaseException) -> Exit | None:
    """The row of the most specific type ``error`` is; None for an error the table does
    not name."""
    return next((CLI_ERRORS[kind] for kind in type(error).__mro__ if kind in CLI_ERRORS),
                None)


def said_for(error: BaseException, prog: str = "raygate", command: str = "",
             extras: Mapping[str, str] = _NO_EXTRAS) -> tuple[str, int] | None:
    """The line ``error`` ends a command with ("": none) and its exit status; None when
    it is no command's error (not in the table, or a module no extra brings)."""
    said = exit_for(error)
    if said is None:
        return None
    fields: dict[str, object] = {"prog": prog, "error": error, "command": command}
    if isinstance(error, ModuleNotFoundError):
        module = (error.name or "").partition(".")[0]
        if module not in extras:
            return None
        fields.update(module=module, extra=extras[module])
    return said.line.format(**fields), said.status


def line_for(error: CommandError | RaygateError, prog: str = "raygate") -> str:
    """The line a command says ``error`` with, where it goes on past it too (``raygate
    check``, a file it cannot read)."""
    said = said_for(error, prog)
    assert said is not None  # both types have their row
    return said[0]


def run(command: Callable[[], int], prog: str = "raygate", *, name: str = "",
        extras: Mapping[str, str] = _NO_EXTRAS, stderr: TextIO | None = None) -> int:
    """``command``'s exit status, or that of the error it raised, said on ``stderr``.
    ``name`` is the subcommand, ``extras`` the extra that installs each module a bare
    install may lack (``raygate.cli.EXTRA_OF``)."""
    try:
        return command()
    except tuple(CLI_ERRORS) as error:
        said = said_for(error, prog, name, extras)
        if said is None:
            raise
        if said[0]:
            print(said[0], file=stderr or sys.stderr)
        return said[1]
