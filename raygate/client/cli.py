"""The admission-status API from a shell, one JSON document per line (the HTTP API's
shapes, either transport): ``python -m raygate.client URL get NS NAME | list [NS] | watch
[NS [NAME]]``, and ``raygate admission get|list|watch ... --server URL`` (raygate.cli).
Both, and ``raygate explain --server``, send the bearer token of ``--token-file``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

import msgspec

from raygate.client import (
    ENV_TOKEN_FILE,
    SERVICE_ACCOUNT_TOKEN,
    GrpcAdmissionClient,
    HttpAdmissionClient,
    Token,
    connect,
    token_file,
)
from raygate.contract.command import CommandError
from raygate.process.exits import run as run_command

__all__ = ["add_arguments", "add_token_argument", "connected", "main", "run", "token_for"]

VERBS = ("get", "list", "watch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb and its NAMESPACE [NAME], after whatever names the server; the token."""
    parser.add_argument("verb", choices=VERBS,
                        help="get NAMESPACE NAME: one RayCluster; list [NAMESPACE]: every one; "
                             "watch [NAMESPACE [NAME]]: each change, as it happens")
    parser.add_argument("args", nargs="*", metavar="NAMESPACE [NAME]")
    add_token_argument(parser)


def add_token_argument(parser: argparse.ArgumentParser) -> None:
    """``--token-file``: what a command that asks a running raygate sends it."""
    parser.add_argument(
        "--token-file", metavar="PATH",
        help="send the bearer token in PATH, read on each call: raygate checks its callers "
             "in-cluster (RBAC: the ClusterRole raygate-status-reader); e.g. "
             "<(kubectl -n NS create token SERVICEACCOUNT). Default: $RAYGATE_TOKEN_FILE, "
             "else the pod's service account token when one is mounted; \"\": none")


def token_for(given: str | None, env: Mapping[str, str] | None = None,
              mounted: str | None = None) -> Token | None:
    """The token of ``--token-file`` (``given``), else of ``$RAYGATE_TOKEN_FILE``, else
    the service account token ``mounted`` (default: a pod's) when there is one. An empty
    path sends none; a path that cannot be read is refused now, not with a 401 later."""
    env = os.environ if env is None else env
    source, path = (("--token-file", given) if given is not None
                    else (f"${ENV_TOKEN_FILE}", env.get(ENV_TOKEN_FILE)))
    if path is None:
        mounted = mounted or SERVICE_ACCOUNT_TOKEN
        return token_file(mounted) if os.path.isfile(mounted) else None
    if not path:
        return None
    # No read here: a pipe (<(kubectl create token ...)) gives its token once.
    if os.path.isdir(path) or not os.access(path, os.R_OK):
        raise CommandError(f"{source}: cannot read {path!r}")
    return token_file(path)


def connected(url: str, token: Token | None) -> HttpAdmissionClient | GrpcAdmissionClient:
    """``connect``, a URL it cannot use said as the command's usage error."""
    try:
        return connect(url, token=token)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def run(parser: argparse.ArgumentParser, url: str, options: argparse.Namespace) -> int:
    """Ask raygate at ``url`` what ``options`` (``add_arguments``'s) say; raises the
    ``RaygateError`` raygate answers, or the ``Unavailable`` of a raygate not reached."""
    if len(options.args) > 2 or (options.verb == "get" and len(options.args) != 2):
        parser.error("get takes NAMESPACE NAME; list and watch take [NAMESPACE [NAME]]")
    namespace, name = [*options.args, None, None][:2]
    encode = msgspec.json.encode
    with connected(url, token_for(options.token_file)) as client:
        if options.verb == "get":
            sys.stdout.buffer.write(encode(client.get(str(namespace), str(name))) + b"\n")
        elif options.verb == "list":
            sys.stdout.buffer.write(encode(client.list(namespace)) + b"\n")
        else:
            with client.watch(namespace, name) as events:
                for event in events:
                    sys.stdout.buffer.write(encode(event) + b"\n")
                    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m raygate.client URL get NS NAME | list [NS] | watch [NS [NAME]]``: the
    API from a shell, one JSON document per line (the HTTP API's shapes, either transport)."""
    parser = argparse.ArgumentParser(prog="python -m raygate.client", description=main.__doc__)
    parser.add_argument("url", help="http://HOST:PORT or grpc://HOST:PORT")
    add_arguments(parser)
    options = parser.parse_args(argv)
    return run_command(lambda: run(parser, options.url, options))
