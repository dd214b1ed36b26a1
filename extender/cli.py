"""``raygate`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

import msgspec

from extender import logs
from extender.cache import ClusterCache, Snapshot
from extender.check import live_inputs, run_check
from extender.errors import RaygateError
from extender.explain import ExplainService, fetch, render_table
from extender.kube.client import (
    ClusterConfigError,
    KubeTransport,
    NoClusterConfig,
    load_connection,
)
from extender.kube.source import LiveSource
from extender.server import RaygateServer, WebhookListener, bind_socket
from extender.settings import load_config_file, parse_addr
from extender.snapshot_files import SnapshotError, demo_text, load_files, load_text
from plugin.config import ConfigError, PolicyConfig

__all__ = ["main"]

log = logging.getLogger("raygate")

NO_CLUSTER = """raygate: no cluster to follow and no cluster state to serve. Give it one of:
  in-cluster config   run raygate in a pod (KUBERNETES_SERVICE_HOST, its service account)
  --kubeconfig FILE   a kubeconfig (and --context NAME to choose a context)
  $KUBECONFIG         a kubeconfig, else ~/.kube/config
  --snapshot FILE     objects as `kubectl get ... -o yaml|json` prints them (repeatable)
  --demo              the demo cluster shipped with raygate"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raygate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the scheduler extender and raygate's API")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--snapshot", action="append", default=[], metavar="FILE",
                        help="cluster objects from a YAML/JSON file (repeatable)")
    source.add_argument("--demo", action="store_true",
                        help="serve the demo cluster shipped with raygate")
    source.add_argument("--kubeconfig", metavar="FILE",
                        help="follow the cluster of this kubeconfig (default: in-cluster "
                             "config, else $KUBECONFIG, else ~/.kube/config)")
    serve.add_argument("--context", metavar="NAME", help="the kubeconfig context to use")
    serve.add_argument("--config", metavar="FILE", help="YAML config file with a `policy:` section")
    serve.add_argument("--http-addr", default="0.0.0.0:8888", metavar="HOST:PORT")
    serve.add_argument("--grpc-addr", default="0.0.0.0:9090", metavar="HOST:PORT")
    serve.add_argument("--webhook-addr", metavar="HOST:PORT",
                       help="serve the Ray-pod marker webhook over HTTPS here "
                            "(needs --tls-cert and --tls-key)")
    serve.add_argument("--tls-cert", metavar="FILE", help="PEM certificate (chain)")
    serve.add_argument("--tls-key", metavar="FILE", help="PEM private key")
    serve.add_argument("--log-level", default=os.environ.get("RAYGATE_LOG_LEVEL", "info"),
                       choices=logs.LEVELS)
    serve.add_argument("--log-format", default=os.environ.get("RAYGATE_LOG_FORMAT", "auto"),
                       choices=logs.FORMATS,
                       help="json: one JSON object a line; text: for people; auto (default): "
                            "text on a terminal, else json")
    check = commands.add_parser(
        "check", help="find RayCluster configurations that silently break gang preemption")
    check.add_argument("files", nargs="*", metavar="FILE",
                       help="RayCluster manifests (YAML or JSON, Lists and multi-document)")
    check.add_argument("--kubeconfig", metavar="FILE",
                       help="lint the RayClusters of a live cluster instead of files")
    check.add_argument("--context", metavar="NAME", help="the kubeconfig context (live)")
    check.add_argument("--namespace", metavar="NS", help="only this namespace (live)")
    check.add_argument("--output", choices=["text", "json"], default="text")
    check.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    check.add_argument("--config", metavar="FILE", help="YAML config file with a `policy:` section")
    explain = commands.add_parser(
        "explain", help="why raygate would place a pod where it would, node by node")
    explain.add_argument("pod", metavar="NAMESPACE/NAME")
    where = explain.add_mutually_exclusive_group()
    where.add_argument("--server", default="http://127.0.0.1:8888", metavar="URL",
                       help="a running raygate: http://host:8888 or grpc://host:9090 "
                            "(default %(default)s)")
    where.add_argument("--snapshot", action="append", default=[], metavar="FILE",
                       help="explain offline from cluster objects in a file (repeatable)")
    where.add_argument("--demo", action="store_true", help="explain offline on the demo cluster")
    explain.add_argument("--nodes", metavar="NODE,...", help="only these nodes")
    explain.add_argument("--output", choices=["text", "json"], default="text")
    explain.add_argument("--config", metavar="FILE", help="YAML config (offline only)")
    return parser


def _explain(args: argparse.Namespace) -> int:
    namespace, _, name = args.pod.partition("/")
    if not namespace or not name:
        print("raygate: give the pod as NAMESPACE/NAME", file=sys.stderr)
        return 2
    nodes = args.nodes.split(",") if args.nodes else None
    try:
        if args.snapshot or args.demo:
            policy = load_config_file(args.config) if args.config else PolicyConfig()
            objects = load_text(demo_text(), "demo") if args.demo else load_files(args.snapshot)
            cache = ClusterCache(policy, "offline")
            cache.publish(Snapshot(objects, policy))
            reply = ExplainService(cache).explain(namespace, name, nodes)
        else:
            reply = fetch(args.server, namespace, name, nodes)
    except (ConfigError, SnapshotError, RaygateError) as exc:
        print(f"raygate: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, RaygateError) else 2
    if args.output == "json":
        print(msgspec.json.encode(reply).decode())
    else:
        print(render_table(reply), end="")
    return 0


def _check(args: argparse.Namespace) -> int:
    live_mode = bool(args.kubeconfig or args.context)
    if bool(args.files) == live_mode:
        print("raygate: give manifest FILEs, or --kubeconfig/--context for a live cluster",
              file=sys.stderr)
        return 2
    try:
        policy = load_config_file(args.config) if args.config else PolicyConfig()
        live = None
        if live_mode:
            live = live_inputs(load_connection(args.kubeconfig, args.context),
                               args.namespace, policy)
        return run_check(args.files, args.output, args.strict, policy, live=live)
    except (ConfigError, SnapshotError, NoClusterConfig, ClusterConfigError) as exc:
        print(f"raygate: {exc}", file=sys.stderr)
        return 2


def _serve(args: argparse.Namespace) -> int:
    try:
        policy = load_config_file(args.config) if args.config else PolicyConfig()
        host, port = parse_addr(args.http_addr, "--http-addr")
        parse_addr(args.grpc_addr, "--grpc-addr")
        if args.demo:
            objects, source = load_text(demo_text(), "demo"), "demo cluster"
        elif args.snapshot:
            objects, source = load_files(args.snapshot), "snapshot " + ", ".join(args.snapshot)
        else:
            try:
                connection = load_connection(args.kubeconfig, args.context)
            except NoClusterConfig:
                print(NO_CLUSTER, file=sys.stderr)
                return 2
            objects, source = None, f"cluster {connection.description}"
    except (ConfigError, SnapshotError, ClusterConfigError) as exc:
        print(f"raygate: {exc}", file=sys.stderr)
        return 2
    # Once the arguments hold: a refusal above is a line on stderr, not a log record.
    logs.configure(args.log_level, args.log_format)
    cache = ClusterCache(policy, source)
    if objects is not None:
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
    live = None
    if objects is None:
        # Serving starts at once: /readyz answers 503 until every kind is listed.
        live = LiveSource(cache, KubeTransport(connection))
        live.start()
        log.info("following %s", source)
    try:
        import uvloop

        uvloop.run(server.run())
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        asyncio.run(server.run())
    finally:
        if live is not None:
            live.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "check":
        return _check(args)
    if args.command == "explain":
        return _explain(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
