"""``python -m raygate.client URL get NS NAME | list [NS] | watch [NS [NAME]]``."""

from __future__ import annotations

import msgspec

from raygate.client import connect
from raygate.contract.errors import RaygateError


def main(argv: list[str] | None = None) -> int:
    """``python -m raygate.client URL get NS NAME | list [NS] | watch [NS [NAME]]``: the
    API from a shell, one JSON document per line (the HTTP API's shapes, either transport)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m raygate.client", description=main.__doc__)
    parser.add_argument("url", help="http://HOST:PORT or grpc://HOST:PORT")
    parser.add_argument("verb", choices=["get", "list", "watch"])
    parser.add_argument("args", nargs="*", metavar="NAMESPACE [NAME]")
    options = parser.parse_args(argv)
    if len(options.args) > 2 or (options.verb == "get" and len(options.args) != 2):
        parser.error("get takes NAMESPACE NAME; list and watch take [NAMESPACE [NAME]]")
    namespace, name = [*options.args, None, None][:2]
    encode = msgspec.json.encode
    try:
        with connect(options.url) as client:
            if options.verb == "get":
                sys.stdout.buffer.write(encode(client.get(str(namespace), str(name))) + b"\n")
            elif options.verb == "list":
                sys.stdout.buffer.write(encode(client.list(namespace)) + b"\n")
            else:
                with client.watch(namespace, name) as events:
                    for event in events:
                        sys.stdout.buffer.write(encode(event) + b"\n")
                        sys.stdout.flush()
    except RaygateError as exc:
        print(f"raygate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
