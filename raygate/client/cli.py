"""The admission-status API from a shell, one JSON document per line (the HTTP API's
shapes, either transport): ``python -m raygate.client URL get NS NAME | list [NS] | watch
[NS [NAME]]``, and ``raygate admission get|list|watch ... --server URL`` (raygate.cli)."""

from __future__ import annotations

import argparse
import sys

import msgspec

from raygate.client import connect
from raygate.process.exits import run as run_command

__all__ = ["add_arguments", "main", "run"]

VERBS = ("get", "list", "watch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb and its NAMESPACE [NAME], after whatever names the server."""
    parser.add_argument("verb", choices=VERBS,
                        help="get NAMESPACE NAME: one RayCluster; list [NAMESPACE]: every one; "
                             "watch [NAMESPACE [NAME]]: each change, as it happens")
    parser.add_argument("args", nargs="*", metavar="NAMESPACE [NAME]")


def run(parser: argparse.ArgumentParser, url: str, options: argparse.Namespace) -> int:
    """Ask raygate at ``url`` what ``options`` (``add_arguments``'s) say; raises the
    ``RaygateError`` raygate answers, or the ``Unavailable`` of a raygate not reached."""
    if len(options.args) > 2 or (options.verb == "get" and len(options.args) != 2):
        parser.error("get takes NAMESPACE NAME; list and watch take [NAMESPACE [NAME]]")
    namespace, name = [*options.args, None, None][:2]
    encode = msgspec.json.encode
    with connect(url) as client:
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
