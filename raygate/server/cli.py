"""The ``raygate`` command line: ``serve``, ``check``, ``explain``, ``uninstall``
(``raygate.cli`` is the entry point, which adds the admission client's commands)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from raygate.contract.command import CommandError
from raygate.process.version import describe

# Only what the parser needs, so that `raygate --version` and `--help` answer at once,
# and on an install without the server extra (raygate.cli): each command imports the
# servers, the Kubernetes client and the checks it runs.
from raygate.server.config.settings import (
    ENV_CONFIG,
    ENV_CONTEXT,
    ENV_DEMO,
    ENV_KUBECONFIG,
    ENV_SNAPSHOT,
    SETTINGS,
    ServeSettings,
)

if TYPE_CHECKING:
    from raygate.contract.explain import ExplainReply

__all__ = ["KUBERAY_VERSIONS", "Subcommands", "build_parser", "explain_offline", "main", "run"]

KUBERAY_VERSIONS = ("1.6", "1.7")
"""``check.VERSIONS``, the last the default, spelled here so that building the parser
loads no check module (tests/server/test_cli.py holds the two equal)."""

# What add_subparsers returns: argparse has no public name for it, and its class takes
# a type argument only for the type checker.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"



class _Given(argparse.Action):
    """Store the value, and note that the flag was on the command line."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        given: set[str] | None = getattr(namespace, "given", None)
        if given is None:
            given = set()
            namespace.given = given
        given.add(self.dest)


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags, by ``ServeSettings`` field."""
    flags: dict[str, Any] = {name: getattr(args, name) for name in getattr(args, "given", ())}
    for name in ("snapshot", "demo", "kubeconfig", "context", "config_file"):
        if getattr(args, name):
            flags["snapshots" if name == "snapshot" else name] = getattr(args, name)
    return flags


def _parser() -> argparse.ArgumentParser:
    return build_parser()


def build_parser(*more: Callable[[Subcommands], None]) -> argparse.ArgumentParser:
    """The parser of ``raygate``'s commands, and of those ``more`` adds (raygate.cli adds
    the admission client's, which this package may not import)."""
    parser = argparse.ArgumentParser(
        prog="raygate",
        description="raygate: the scheduler extender and admission-status API for Ray "
                    "clusters on Kubernetes.",
        epilog="raygate COMMAND --help lists each command's flags.")
    parser.add_argument("--version", action="version", version=describe())
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_serve_parser, _check_parser, _explain_parser, _uninstall_parser, *more):
        add(commands)
    return parser


def _serve_parser(commands: Subcommands) -> None:
    """``raygate serve``: where the cluster state comes from, and every setting's flag."""
    serve = commands.add_parser("serve", help="serve the scheduler extender and raygate's API")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--snapshot", action="append", default=[], metavar="FILE",
                        help="cluster objects from a YAML/JSON file (repeatable; env "
                             f"{ENV_SNAPSHOT}, files separated by {os.pathsep!r})")
    source.add_argument("--demo", action="store_true",
                        help=f"serve the demo cluster shipped with raygate (env {ENV_DEMO})")
    source.add_argument("--kubeconfig", metavar="FILE",
                        help="follow the cluster of this kubeconfig (default: in-cluster "
                             "config, else $KUBECONFIG, else ~/.kube/config; env "
                             f"{ENV_KUBECONFIG})")
    serve.add_argument("--context", metavar="NAME",
                       help=f"the kubeconfig context to use (env {ENV_CONTEXT})")
    serve.add_argument("--config", dest="config_file", metavar="FILE",
                       help=f"YAML config file with server: and policy: sections (env "
                            f"{ENV_CONFIG}); its policy is reloaded when it changes")
    serve.add_argument("--print-config", action="store_true",
                       help="print the effective settings as a config file, with where each "
                            "value came from, and exit: 0, or 2 when serve would refuse them")
    # Each flag of the settings table; precedence: flag > RAYGATE_* > config file > default.
    # The parser's defaults are the documented ones (for --help), but only a flag on the
    # command line outranks the environment and the file: _Given records which were.
    defaults = ServeSettings()
    for setting in SETTINGS:
        serve.add_argument(
            setting.flag, dest=setting.name, action=_Given,
            default=getattr(defaults, setting.name), metavar=setting.metavar or None,
            choices=setting.choices or None,
            help=f"{setting.help + '; ' if setting.help else ''}env {setting.env}, file "
                 f"{setting.file_key}; default {_default(getattr(defaults, setting.name))}")


def _default(value: object) -> str:
    """A default as an operator would type it: ``0.0.0.0:8888``, ``10.0``, ``none``."""
    if isinstance(value, tuple):
        value = ",".join(value)
    # argparse formats help with %: a literal percent sign would be taken for a field.
    return (str(value) or "none").replace("%", "%%")


def _check_parser(commands: Subcommands) -> None:
    """``raygate check``: files, or a live cluster."""
    check = commands.add_parser(
        "check", help="check RayClusters (and RayJobs, RayServices) against KubeRay's CRD and "
                      "for configurations that silently break gang preemption")
    check.add_argument("files", nargs="*", metavar="FILE",
                       help="manifests with RayClusters, RayJobs, RayServices, RayCronJobs "
                            "(YAML or JSON, Lists and multi-document; a folder: its .yaml, "
                            ".yml and .json files, recursively; - reads stdin)")
    check.add_argument("--kuberay-version", choices=KUBERAY_VERSIONS, metavar="X.Y",
                       help="check against this KubeRay release's CRDs "
                            f"({', '.join(KUBERAY_VERSIONS)}; default: files "
                            f"{KUBERAY_VERSIONS[-1]}, a live cluster the RayCluster CRD it "
                            "serves)")
    check.add_argument("--kubeconfig", metavar="FILE",
                       help="lint the RayClusters of a live cluster instead of files")
    check.add_argument("--context", metavar="NAME", help="the kubeconfig context (live)")
    check.add_argument("--namespace", metavar="NS", help="only this namespace (live)")
    check.add_argument("--output", choices=["text", "json"], default="text",
                       help="text: a table for people; json: the findings and their summary "
                            "as one JSON document, for scripts (default %(default)s)")
    check.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    check.add_argument("--config", metavar="FILE", help="YAML config file with a policy: section")
    # A string default goes through `type` only when `check` runs: --version and --help
    # need not import the checks.
    check.add_argument("--max-size", type=_byte_size, default="8Mi", metavar="SIZE",
                       help="refuse a file larger than this, unread (a quantity: 8Mi, 500k; "
                            "default %(default)s)")


def _byte_size(text: str) -> int:
    from raygate.server.check.inputs import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _explain_parser(commands: Subcommands) -> None:
    """``raygate explain``: against a running raygate, or offline."""
    explain = commands.add_parser(
        "explain", help="why raygate would place a pod where it would, node by node")
    explain.add_argument("pod", metavar="NAMESPACE/NAME", help="the pod to explain")
    where = explain.add_mutually_exclusive_group()
    where.add_argument("--server", default="http://127.0.0.1:8888", metavar="URL",
                       help="a running raygate: http://host:8888 or grpc://host:9090 "
                            "(default %(default)s)")
    where.add_argument("--snapshot", action="append", default=[], metavar="FILE",
                       help="explain offline from cluster objects in a file (repeatable)")
    where.add_argument("--demo", action="store_true", help="explain offline on the demo cluster")
    explain.add_argument("--nodes", metavar="NODE,...", help="only these nodes")
    explain.add_argument("--output", choices=["text", "json"], default="text",
                         help="text: a table, a row per node; json: the explanation as one "
                              "JSON document, for scripts (default %(default)s)")
    explain.add_argument("--config", metavar="FILE", help="YAML config (offline only)")


def _uninstall_parser(commands: Subcommands) -> None:
    """``raygate uninstall``: what raygate wrote, taken back (the chart's pre-delete hook
    runs it; docs/operations.md, "Uninstall")."""
    uninstall = commands.add_parser(
        "uninstall", help="before or after removing raygate: stop its webhook, release every "
                          "pod its gate holds, delete its budgets and scale gates, list the "
                          "RayClusters that name ray-scheduler")
    uninstall.add_argument("--kubeconfig", metavar="FILE",
                           help="the cluster (default: in-cluster config, else $KUBECONFIG, "
                                "else ~/.kube/config)")
    uninstall.add_argument("--context", metavar="NAME", help="the kubeconfig context")
    uninstall.add_argument("--webhook-configuration", default="raygate-ray-pods", metavar="NAME",
                           help="raygate's MutatingWebhookConfiguration, deleted first "
                                "(default %(default)s; \"\" leaves it)")
    uninstall.add_argument("--stop", action="append", default=[], metavar="NAMESPACE/DEPLOYMENT",
                           help="a Deployment that runs raygate: scaled to 0, its pods waited "
                                "for, before anything is released (repeatable)")
    uninstall.add_argument("--stop-timeout", type=float, default=120.0, metavar="SECONDS",
                           help="how long to wait for those pods (default %(default)g); then "
                                "a warning, and the rest goes on")
    uninstall.add_argument("--dry-run", action="store_true",
                           help="write nothing: say what would be done")


def _uninstall(args: argparse.Namespace) -> int:
    from raygate.server.kube.client import KubeTransport, load_connection
    from raygate.server.uninstall import Options, Uninstall

    stop = [tuple(s.split("/")) for s in args.stop]
    if any(len(s) != 2 or not all(s) for s in stop):
        raise CommandError("give --stop as NAMESPACE/DEPLOYMENT")
    transport = KubeTransport(load_connection(args.kubeconfig, args.context))
    options = Options(args.webhook_configuration, tuple((ns, n) for ns, n in stop),
                      args.stop_timeout, args.dry_run)
    try:
        summary = Uninstall(transport, options, sys.stdout, sys.stderr).run()
    finally:
        transport.close()
    return 1 if summary.failures else 0


def explain_offline(args: argparse.Namespace, namespace: str, name: str,
                    nodes: list[str] | None) -> ExplainReply:
    """``raygate explain`` without ``--server`` (raygate.cli runs the command): the
    explanation from a snapshot file or the demo cluster."""
    from raygate.policy.config import PolicyConfig
    from raygate.server.cache.cluster import ClusterCache
    from raygate.server.cache.editor import build_snapshot
    from raygate.server.cache.snapshot_files import demo_text, load_files, load_text
    from raygate.server.config.file import load_config_file
    from raygate.server.fronts.explain.service import ExplainService

    policy = load_config_file(args.config) if args.config else PolicyConfig()
    objects = load_text(demo_text(), "demo") if args.demo else load_files(args.snapshot)
    cache = ClusterCache(policy, "offline")
    cache.publish(build_snapshot(objects, policy))
    return ExplainService(cache).explain(namespace, name, nodes)


def _check(args: argparse.Namespace) -> int:
    from raygate.policy.config import PolicyConfig
    from raygate.server.check.run import live_inputs, run_check
    from raygate.server.config.file import load_config_file
    from raygate.server.kube.client import load_connection

    live_mode = bool(args.kubeconfig or args.context)
    if bool(args.files) == live_mode:
        raise CommandError("give manifest FILEs or --kubeconfig/--context for a live "
                           f"cluster, {'not both' if live_mode else 'one of them'}")
    policy = load_config_file(args.config) if args.config else PolicyConfig()
    live = None
    if live_mode:
        live = live_inputs(load_connection(args.kubeconfig, args.context), args.namespace,
                           policy)
    return run_check(args.files, args.output, args.strict, policy,
                     kuberay=args.kuberay_version, live=live, max_bytes=args.max_size)


def _serve(args: argparse.Namespace) -> int:
    from raygate.server.app import check_startup, serve
    from raygate.server.config.load import load_settings
    from raygate.server.config.render import render_config

    loaded = load_settings(_flags(args), os.environ)
    if args.print_config:
        print(render_config(loaded, os.environ), end="")
        # Every refusal serve would make before it listens; no port is bound, so that it
        # runs beside a raygate serving (kubectl exec).
        check_startup(loaded.settings)
        return 0
    serve(loaded)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the command ``_parser`` parsed. What it cannot use raises a ``CommandError``,
    raygate's error reply a ``RaygateError``, a dependency the install lacks
    ``ModuleNotFoundError``: ``raygate.process.exits.run`` says each (with the extra to
    install, from raygate.cli)."""
    if args.command == "serve":
        return _serve(args)
    if args.command == "check":
        return _check(args)
    if args.command == "uninstall":
        return _uninstall(args)
    # explain: raygate.cli runs it (its --server half is the client's); argparse rejects
    # the rest.
    return 2  # pragma: no cover


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Imported once parsed: --version and --help answer without the contract's libraries.
    from raygate.process.exits import run as run_command

    return run_command(lambda: run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
