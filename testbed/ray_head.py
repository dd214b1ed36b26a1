"""A real Ray head and a real Ray autoscaler beside the testbed, standing in for the head
pod of a RayCluster that KubeRay manages there (kwok runs the pod; no container runs).

- ``ray start --head --num-cpus=0 --block`` on loopback, with the environment KubeRay gives
  the head container (``RAY_CLOUD_INSTANCE_ID`` = the head pod's name,
  ``RAY_NODE_TYPE_NAME=headgroup``, autoscaler v2 on): the autoscaler matches Ray nodes to
  pods by that name, and scales nothing while the head is not matched.
- the autoscaler as KubeRay's sidecar runs it — stock ``ray kuberay-autoscaler`` or
  ``raygate-autoscaler`` — with the RayCluster's ServiceAccount token. Ray reads the API
  server's address and CA from the environment, but the token only from the in-pod path
  (``node_provider.IN_CLUSTER_TOKEN_PATH``); ``testbed.autoscaler_offpod`` points that at a
  file, nothing else.

Each is an add-on (``RayHead``, ``RayWorker``, ``RayAutoscaler``; ``start_head``,
``start_worker`` and ``start_autoscaler`` add them): they run under the testbed's
supervisor and stop by process group (never ``ray stop``, which kills every Ray process of
the machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testbed.addon import AddOn
from testbed.cluster import Testbed
from testbed.common import REPO
from testbed.control_plane import ControlPlane
from testbed.processes import Process, free_port

__all__ = ["RayAutoscaler", "RayHead", "RayWorker", "cluster_nodes", "start_autoscaler",
           "start_head", "start_worker"]


def _ray_env(pod: str, group: str) -> dict[str, str]:
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "RAY_CLOUD_INSTANCE_ID": pod, "RAY_NODE_TYPE_NAME": group,
            "RAY_enable_autoscaler_v2": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def _ray() -> Path:
    return Path(sys.executable).parent / "ray"


class RayHead(AddOn):
    """The head of ``pod``; ``address``: its GCS address."""

    readiness = "the Ray head"

    def __init__(self, pod: str) -> None:
        super().__init__()
        self.name = f"ray-head-{pod}"
        self.pod = pod
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"

    def launch(self, testbed: ControlPlane) -> None:
        self.run(self.name, [
            _ray(), "start", "--head", "--block", "--num-cpus=0",
            f"--port={self.port}", "--include-dashboard=false", "--no-monitor",
            f"--ray-client-server-port={free_port()}", f"--temp-dir={testbed.workdir / 'ray'}",
            "--object-store-memory=100000000", "--disable-usage-stats",
        ], env=_ray_env(self.pod, "headgroup"))

    def ready(self) -> bool:
        return subprocess.run(
            [str(_ray()), "health-check", "--address", self.address, "--skip-version-check"],
            capture_output=True, check=False, timeout=20).returncode == 0


class RayWorker(AddOn):
    """The raylet the worker container of ``pod`` would start (kwok runs no container):
    ``ray start --address`` with the environment KubeRay gives a worker, so the
    autoscaler matches the new Ray node to its pod and instance. Every port is free-picked:
    the head on this machine holds the defaults. Ready once the autoscaler's view lists
    it."""

    def __init__(self, pod: str, group: str, gcs: str, *, cpu: int) -> None:
        super().__init__()
        self.name = f"ray-worker-{pod}"
        self.readiness = f"the raylet of {pod}"
        self.pod, self.group, self.gcs, self.cpu = pod, group, gcs, cpu

    def launch(self, testbed: ControlPlane) -> None:
        self.run(self.name, [
            _ray(), "start", f"--address={self.gcs}", "--block",
            f"--num-cpus={self.cpu}", "--object-store-memory=100000000", "--disable-usage-stats",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
        ], env=_ray_env(self.pod, self.group))

    def ready(self) -> bool:
        return any(n["instance_id"] == self.pod for n in cluster_nodes(self.gcs))


def start_head(testbed: Testbed, head_pod: str) -> str:
    """The head of ``head_pod``; returns the GCS address."""
    return testbed.add(RayHead(head_pod)).address


def start_worker(testbed: Testbed, pod: str, group: str, gcs: str, *, cpu: int) -> Process:
    """``RayWorker``; returns its process."""
    process = testbed.add(RayWorker(pod, group, gcs, cpu=cpu)).process
    assert process is not None
    return process


def cluster_nodes(gcs: str) -> list[dict[str, str]]:
    """The Ray nodes the autoscaler's own view (``get_cluster_status``) lists as active or
    idle: instance id (the pod), node type, status."""
    script = (
        "import json, sys; from ray.autoscaler.v2.sdk import get_cluster_status; "
        f"s = get_cluster_status({gcs!r}); "
        "json.dump([{'instance_id': n.instance_id, 'type': n.ray_node_type_name, "
        "'status': n.node_status} for n in s.active_nodes + s.idle_nodes], sys.stdout)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True,
                         timeout=60, text=True).stdout
    return list(json.loads(out))


class RayAutoscaler(AddOn):
    """The autoscaler of ``namespace/cluster``, under its ServiceAccount's token (KubeRay
    makes the ServiceAccount, Role and RoleBinding of an autoscaled RayCluster): raygate's
    (``raygate``) or the stock one. ``allocate_timeout``: Ray's
    ``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S`` (3600 s by default in Ray 2.60),
    after which a pod that never ran Ray is replaced. Ready once it runs."""

    def __init__(self, cluster: str, namespace: str, head_pod: str, gcs: str, *,
                 raygate: bool, allocate_timeout: int) -> None:
        super().__init__()
        self.which = "raygate" if raygate else "stock"
        self.name = f"autoscaler-{self.which}-{namespace}"
        self.cluster, self.namespace, self.head_pod, self.gcs = cluster, namespace, head_pod, gcs
        self.allocate_timeout = allocate_timeout

    def launch(self, testbed: ControlPlane) -> None:
        self.run(self.name, [
            sys.executable, "-m", "testbed.autoscaler_offpod", self.which,
            "--cluster-name", self.cluster, "--cluster-namespace", self.namespace,
            "--gcs-address", self.gcs,
        ], env=self._env(testbed))

    def _env(self, testbed: ControlPlane) -> dict[str, str]:
        assert testbed.pki is not None
        token = testbed.workdir / f"{self.namespace}.{self.cluster}.token"
        # No trailing newline: Ray sends the file as it is, and a header may not hold one.
        token.write_text(testbed.kubectl("create", "token", self.cluster, "-n", self.namespace,
                                         "--duration=24h").stdout.strip())
        env = {**_ray_env(self.head_pod, "headgroup"), "PYTHONPATH": str(REPO),
               "KUBERNETES_SERVICE_HOST": "127.0.0.1",
               "KUBERNETES_SERVICE_PORT_HTTPS": str(testbed.ports.apiserver),
               "RAY_KUBERAY_CA_CERT_PATH": str(testbed.pki.ca_cert),
               "TESTBED_TOKEN_FILE": str(token), "KUBERAY_CRD_VER": "v1",
               "RAY_HEAD_POD_NAME": self.head_pod, "AUTOSCALER_METRIC_PORT": str(free_port()),
               "NO_PROXY": "127.0.0.1",
               "RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S": str(self.allocate_timeout)}
        if self.which == "raygate":
            env |= {"RAYGATE_URL": testbed.raygate_url, "RAYGATE_TOKEN_FILE": str(token)}
        return env


def start_autoscaler(testbed: Testbed, cluster: str, namespace: str, head_pod: str,
                     gcs: str, *, raygate: bool, allocate_timeout: int) -> Process:
    """``RayAutoscaler``; returns its process."""
    process = testbed.add(RayAutoscaler(cluster, namespace, head_pod, gcs, raygate=raygate,
                                        allocate_timeout=allocate_timeout)).process
    assert process is not None
    return process
