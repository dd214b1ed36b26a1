"""``python -m testbed.autoscaler_offpod stock|raygate ARGS``: the Ray autoscaler as
KubeRay's sidecar runs it, outside a pod.

Ray 2.60 reads the ServiceAccount token only from the in-pod path
(``ray/autoscaler/_private/kuberay/node_provider.py``, ``IN_CLUSTER_TOKEN_PATH``, read at
every credential refresh); everything else it takes from the environment. This points
that one path at ``$TESTBED_TOKEN_FILE`` and runs the stock CLI (``ray
kuberay-autoscaler``) or raygate's (``raygate-autoscaler``) unchanged.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    from ray.autoscaler._private.kuberay import node_provider

    node_provider.IN_CLUSTER_TOKEN_PATH = os.environ["TESTBED_TOKEN_FILE"]
    which, args = argv[0], argv[1:]
    if which == "raygate":
        from raygate.ray_autoscaler.cli import main as raygate_main

        return raygate_main(args)
    from ray.scripts.scripts import main as ray_main

    sys.argv = ["ray", "kuberay-autoscaler", *args]
    ray_main()  # click: exits by itself
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
