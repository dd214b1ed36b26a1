"""What every part of the testbed shares: the repository's paths, the error a start
fails with, the built binaries, kubeconfig files, the components' ports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testbed.build import COMPONENTS, cache_root
from testbed.processes import free_port

__all__ = ["DEPLOY", "RAYGATE_ACCOUNT", "RAYGATE_NAMESPACE", "REPO", "Ports", "TestbedError",
           "binary", "write_kubeconfig"]

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
RAYGATE_NAMESPACE = "raygate-system"
RAYGATE_ACCOUNT = "ray-scheduler"
"""The ServiceAccount raygate runs as in deploy/kube-scheduler-second: a sidecar of the
ray-scheduler pod, whose account holds raygate's roles (that setup ships no other)."""


class TestbedError(Exception):
    """The testbed cannot start: a component is not built, or one did not come up."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name


def binary(component: str, name: str) -> Path:
    path = COMPONENTS[component].path(name)
    if not path.is_file():
        raise TestbedError(f"{path} is missing: build the testbed first (`make testbed`; "
                           f"the cache is {cache_root()})")
    return path


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "testbed",
        "clusters": [{"name": "testbed",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "testbed", "user": user}],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "testbed"}}],
    }))
    path.chmod(0o600)
    return path


@dataclass
class Ports:
    """The loopback ports of a testbed's components, picked when it is made."""

    etcd: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    ray_scheduler: int = field(default_factory=free_port)
    default_scheduler: int = field(default_factory=free_port)
    kuberay_metrics: int = field(default_factory=free_port)
    kuberay_health: int = field(default_factory=free_port)
    raygate_http: int = field(default_factory=free_port)
    raygate_grpc: int = field(default_factory=free_port)
    raygate_webhook: int = field(default_factory=free_port)
