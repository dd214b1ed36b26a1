"""The ``raygate`` command, on every install.

``pip install raygate`` (no extra) brings the contract's libraries only (msgspec, grpcio,
protobuf): enough to ask a running raygate, ``raygate explain NS/POD --server URL`` and
``raygate admission get|list|watch``, but not to serve, check manifests or explain
offline, which need the ``server`` extra. Such a command says so in one line and exits 2,
the status ``raygate-autoscaler`` exits with when Ray is missing: never a traceback.

The server's command line (``raygate.server.cli``) builds its parser from the standard
library and the contract alone and imports each command's modules when it runs; this
module sits above it and the client side (``raygate.client``, which the server may not
import), so that ``raygate`` can offer both: the admission commands, and ``explain``, whose
``--server`` half is the client's and offline half the server's
(tests/client/test_cli_light.py runs every command with the server's dependencies
refused).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from raygate.contract.command import CommandError
from raygate.process.exits import run as run_command

if TYPE_CHECKING:
    from raygate.contract.explain import ExplainReply
    from raygate.server.cli import Subcommands

__all__ = ["EXTRA_OF", "main"]

EXTRA_OF: dict[str, str] = {
    module: "server" for module in (
        "uvicorn", "uvloop", "httptools", "grpc_health", "grpc_reflection", "yaml",
        "kubernetes", "urllib3", "immutables", "prometheus_client", "jsonschema")
}
"""The extra that installs each module a command may need and a bare install lacks (the
``server`` extra's; tests/client/test_cli_light.py holds it to pyproject.toml's)."""

DEFAULT_SERVER = "http://127.0.0.1:8888"


def _admission_parser(commands: Subcommands) -> None:
    """``raygate admission``: the admission-status API, as ``python -m raygate.client``;
    and ``explain --server``'s token (its parser is the server's, which may not import the
    client)."""
    from raygate.client.cli import add_arguments, add_token_argument

    add_token_argument(commands.choices["explain"])

    admission = commands.add_parser(
        "admission", help="ask a running raygate why a RayCluster's pods are not running "
                          "(the admission-status API, one JSON document per line)")
    add_arguments(admission)
    admission.set_defaults(admission=admission)  # its usage line, for a wrong NAMESPACE [NAME]
    admission.add_argument("--server", default=DEFAULT_SERVER, metavar="URL",
                           help="a running raygate: http://host:8888 or grpc://host:9090 "
                                "(default %(default)s)")


def _explain(args: argparse.Namespace,
             offline: Callable[[argparse.Namespace, str, str, list[str] | None],
                               ExplainReply]) -> int:
    """``raygate explain``: ask a running raygate (every install has the libraries), or
    explain ``offline`` (the server's: its cache and snapshot loader need the extra)."""
    import msgspec

    from raygate.client.cli import connected, token_for
    from raygate.client.explain_table import render_table

    namespace, _, name = args.pod.partition("/")
    if not namespace or not name:
        raise CommandError("give the pod as NAMESPACE/NAME")
    nodes = args.nodes.split(",") if args.nodes else None
    if args.snapshot or args.demo:
        if args.token_file is not None:
            raise CommandError("--token-file is for --server: offline, nothing is asked")
        reply = offline(args, namespace, name, nodes)
    else:
        with connected(args.server, token_for(args.token_file)) as client:
            reply = client.explain(namespace, name, nodes)
    if args.output == "json":
        print(msgspec.json.encode(reply).decode())
    else:
        print(render_table(reply), end="")
    return 0


def _run(argv: list[str]) -> int:
    from raygate.server import cli as server

    args = server.build_parser(_admission_parser).parse_args(argv)
    if args.command == "admission":
        from raygate.client.cli import run

        return run(args.admission, args.server, args)
    if args.command == "explain":
        return _explain(args, server.explain_offline)
    return server.run(args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), "")
    # Parsing too may need the extra: check's --max-size is read by the check module. A
    # missing module an extra brings is said with the extra to install.
    return run_command(lambda: _run(argv), name=command, extras=EXTRA_OF)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
