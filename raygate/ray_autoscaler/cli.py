"""``raygate-autoscaler``: ``ray kuberay-autoscaler`` with raygate's advice.

For ``autoscalerOptions`` of a RayCluster (autoscaler v2), with the image of
deploy/ray-autoscaler:

    image: raygate-autoscaler:0.1.0
    env: [{name: RAYGATE_URL, value: "http://raygate.raygate-system:8888"}]

KubeRay starts ``ray kuberay-autoscaler --cluster-name ... --cluster-namespace ...`` in a
login shell; the image's profile sends it here, arguments and all, while ``RAYGATE_URL``
is set. The cluster name and namespace default to ``$RAY_CLUSTER_NAME`` and
``$RAY_CLUSTER_NAMESPACE``, which KubeRay sets in the autoscaler container.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from raygate.process.exits import run as run_command
from raygate.process.version import describe
from raygate.ray_autoscaler.settings import (
    ENV_CA_FILE,
    ENV_CERT_FILE,
    ENV_KEY_FILE,
    ENV_POLL_INTERVAL,
    ENV_SERVER_NAME,
    ENV_TIMEOUT,
    ENV_TOKEN_FILE,
    ENV_URL,
    AutoscalerSettings,
)

__all__ = ["main"]

ENVIRONMENT = f"""environment:
  {ENV_URL:<30} raygate's API: http://host:8888, grpc://host:9090 (https://, grpcs://)
  {ENV_TIMEOUT:<30} the longest a loop waits for raygate (default 2)
  {ENV_POLL_INTERVAL:<30} reuse an answer younger than this (default 0: every loop)
  {ENV_CA_FILE:<30} PEM CA bundle for https:// and grpcs://
  {ENV_CERT_FILE:<30} PEM client certificate (mutual TLS), with {ENV_KEY_FILE}
  {ENV_SERVER_NAME:<30} the name to check raygate's certificate against (gRPC)
  {ENV_TOKEN_FILE:<30} bearer token sent to raygate, re-read on every call (default:
  {"":<30} the pod's service account token; set and empty: none)
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raygate-autoscaler",
        description="The stock KubeRay autoscaler (v2), following raygate's admission advice.",
        epilog=ENVIRONMENT, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster-name", default=os.environ.get("RAY_CLUSTER_NAME"),
                        help="the RayCluster's metadata.name (default: $RAY_CLUSTER_NAME)")
    parser.add_argument("--cluster-namespace", default=os.environ.get("RAY_CLUSTER_NAMESPACE"),
                        help="its namespace (default: $RAY_CLUSTER_NAMESPACE)")
    parser.add_argument("--gcs-address", help="host:port of the GCS (default: <node ip>:6379)")
    # Ray's version beside raygate's: the provider runs only on the versions it was
    # tested with (TESTED_RAY_VERSIONS).
    parser.add_argument("--version", action="version", version=describe(
        "raygate-autoscaler", "ray"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_command(lambda: _run(args), "raygate-autoscaler")


def _run(args: argparse.Namespace) -> int:
    """Run the autoscaler, or refuse to start before it: ``ConfigError`` with every
    problem at once, ``RayUnusable``."""
    missing = [f"--{flag}: required (or ${env})" for flag, env, value in (
        ("cluster-name", "RAY_CLUSTER_NAME", args.cluster_name),
        ("cluster-namespace", "RAY_CLUSTER_NAMESPACE", args.cluster_namespace)) if not value]
    settings = AutoscalerSettings.from_env(os.environ, also=missing)
    # The provider first: it raises RayUnusable where Ray is missing or untested, before
    # Ray's own imports would fail with a traceback.
    from raygate.ray_autoscaler.provider import install

    # isort: split
    from ray.autoscaler._private.kuberay.run_autoscaler import run_kuberay_autoscaler

    from raygate.ray_autoscaler.advice import Advisor

    def advisor(namespace: str, name: str) -> Advisor:
        return Advisor(settings, namespace, name)

    installation = install(advisor)
    try:
        # Blocks: waits for the head, sets up Ray's logging, then runs the autoscaler
        # loop (raygate's hooks act in autoscaler v2: `autoscalerOptions.version: v2`).
        run_kuberay_autoscaler(args.cluster_name, args.cluster_namespace, args.gcs_address)
    finally:
        installation.undo()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
