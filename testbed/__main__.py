"""``python -m testbed build`` builds the components; ``python -m testbed up`` starts a
cluster and keeps it until Ctrl-C, printing how to reach it."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

from testbed.build import COMPONENTS, BuildError, build_all
from testbed.cluster import Testbed, TestbedError
from testbed.karpenter import start_karpenter
from testbed.processes import StartError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the components (cached outside the repo)")
    build.add_argument("components", nargs="*", metavar="COMPONENT",
                       help=f"some of: {', '.join(COMPONENTS)} (default: all)")
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    up = commands.add_parser("up", help="start a cluster in the foreground until Ctrl-C")
    up.add_argument("--workdir", type=Path, help="where its state and logs go "
                    "(default: a new temporary folder)")
    up.add_argument("--no-raygate", action="store_true",
                    help="leave raygate out (start your own against the printed kubeconfig)")
    up.add_argument("--karpenter", action="store_true",
                    help="start Karpenter too: its CRDs, the KWOKNodeClass `testbed` and the "
                    "instance types of testbed/karpenter.py, no NodePool (create your own)")
    args = parser.parse_args(argv)

    try:
        if args.command == "build":
            build_all(args.components or None, force=args.force)
            return 0
        build_all()
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="raygate-testbed-"))
        testbed = Testbed(workdir, raygate=not args.no_raygate)
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        testbed.start()
        try:
            if args.karpenter:
                start_karpenter(testbed)
            print(f"export KUBECONFIG={testbed.admin_kubeconfig}")
            print(f"# kubectl: {COMPONENTS['kubernetes'].path('kubectl')}")
            if testbed.with_raygate:
                print(f"# raygate: {testbed.raygate_url} (gRPC {testbed.raygate_grpc})")
            print(f"# logs: {testbed.logs}; Ctrl-C stops everything", flush=True)
            stop.wait()
        finally:
            testbed.stop()
        return 0
    except (BuildError, TestbedError, StartError) as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
