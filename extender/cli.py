"""``raygate`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from extender.cache import ClusterCache, Snapshot
from extender.check import run_check
from extender.server import RaygateServer, WebhookListener, bind_socket
from extender.settings import load_config_file, parse_addr
from extender.snapshot_files import SnapshotError, demo_text, load_files, load_text
from plugin.config import ConfigError, PolicyConfig

__all__ = ["main"]

log = logging.getLogger("raygate")

NO_CLUSTER = """raygate: no cluster state to serve. Give it one of:
  --snapshot FILE   objects as `kubectl get ... -o yaml|json` prints them (repeatable)
  --demo            the demo cluster shipped with raygate
Live list/watch of a cluster (in-cluster config, --kubeconfig, $KUBECONFIG) is not built yet."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raygate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the scheduler extender and raygate's API")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--snapshot", action="append", default=[], metavar="FILE",
                        help="cluster objects from a YAML/JSON file (repeatable)")
    source.add_argument("--demo", action="store_true",
                        help="serve the demo cluster shipped with raygate")
    serve.add_argument("--config", metavar="FILE", help="YAML config file with a `policy:` section")
    serve.add_argument("--http-addr", default="0.0.0.0:8888", metavar="HOST:PORT")
    serve.add_argument("--grpc-addr", default="0.0.0.0:9090", metavar="HOST:PORT")
    serve.add_argument("--webhook-addr", metavar="HOST:PORT",
                       help="serve the Ray-pod marker webhook over HTTPS here "
                            "(needs --tls-cert and --tls-key)")
    serve.add_argument("--tls-cert", metavar="FILE", help="PEM certificate (chain)")
    serve.add_argument("--tls-key", metavar="FILE", help="PEM private key")
    serve.add_argument("--log-level", default=os.environ.get("RAYGATE_LOG_LEVEL", "info"),
                       choices=["debug", "info", "warning", "error"])
    check = commands.add_parser(
        "check", help="find RayCluster configurations that silently break gang preemption")
    check.add_argument("files", nargs="+", metavar="FILE",
                       help="RayCluster manifests (YAML or JSON, Lists and multi-document)")
    check.add_argument("--output", choices=["text", "json"], default="text")
    check.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    check.add_argument("--config", metavar="FILE", help="YAML config file with a `policy:` section")
    return parser


def _check(args: argparse.Namespace) -> int:
    try:
        policy = load_config_file(args.config) if args.config else PolicyConfig()
        return run_check(args.files, args.output, args.strict, policy)
    except (ConfigError, SnapshotError) as exc:
        print(f"raygate: {exc}", file=sys.stderr)
        return 2


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        policy = load_config_file(args.config) if args.config else PolicyConfig()
        host, port = parse_addr(args.http_addr, "--http-addr")
        parse_addr(args.grpc_addr, "--grpc-addr")
        if args.demo:
            objects, source = load_text(demo_text(), "demo"), "demo cluster"
        elif args.snapshot:
            objects, source = load_files(args.snapshot), "snapshot " + ", ".join(args.snapshot)
        else:
            print(NO_CLUSTER, file=sys.stderr)
            return 2
    except (ConfigError, SnapshotError) as exc:
        print(f"raygate: {exc}", file=sys.stderr)
        return 2
    cache = ClusterCache(policy, source)
    cache.publish(Snapshot(objects, policy))
    counts = cache.snapshot.counts()
    log.info("loaded %s: %s; ignored %s", source,
             ", ".join(f"{v} {k}" for k, v in counts.items()),
             dict(objects.ignored) or "nothing")
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        print(f"raygate: cannot listen on {args.http_addr}: {exc.strerror}", file=sys.stderr)
        return 2
    webhook = None
    if args.webhook_addr:
        if not (args.tls_cert and args.tls_key):
            print("raygate: --webhook-addr needs --tls-cert and --tls-key "
                  "(the API server calls webhooks over HTTPS only)", file=sys.stderr)
            return 2
        try:
            webhook = WebhookListener(bind_socket(*parse_addr(args.webhook_addr,
                                                              "--webhook-addr")),
                                      args.tls_cert, args.tls_key)
        except (OSError, ConfigError) as exc:
            print(f"raygate: cannot listen on {args.webhook_addr}: {exc}", file=sys.stderr)
            return 2
    server = RaygateServer(cache, sock, args.grpc_addr, webhook=webhook)
    try:
        import uvloop

        uvloop.run(server.run())
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        asyncio.run(server.run())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "check":
        return _check(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
