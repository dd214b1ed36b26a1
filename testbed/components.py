"""The add-ons every testbed starts after its control plane (``Testbed.start``), in this
order: ``ray-scheduler`` and ``default-scheduler`` (``KubeScheduler``), the KubeRay
operator (``KubeRay``), kwok (``Kwok``) and raygate (``Raygate``)."""

from __future__ import annotations

import ssl
import sys
from pathlib import Path
from typing import Any

import yaml

from testbed import kuberay_standin
from testbed.addon import AddOn, answers
from testbed.build import COMPONENTS
from testbed.common import DEPLOY, RAYGATE_ACCOUNT, RAYGATE_NAMESPACE, REPO, binary
from testbed.control_plane import ControlPlane
from testbed.processes import Process
from testbed.webhook import NATIVE_PLACEMENT_OFF, webhook_configuration

__all__ = ["SCHEDULER_SETUP", "KubeRay", "KubeScheduler", "Kwok", "Raygate",
           "ray_scheduler_configuration", "schedulers"]

SCHEDULER_SETUP = DEPLOY / "kube-scheduler-second"


class KubeScheduler(AddOn):
    """A kube-scheduler named ``name`` reading ``config``, its health on ``port``."""

    def __init__(self, name: str, config: Path, kubeconfig: str, port: int) -> None:
        super().__init__()
        self.name = name
        self.config = config
        self.kubeconfig = kubeconfig
        self.port = port

    def launch(self, testbed: ControlPlane) -> None:
        self.run(self.name, [
            binary("kubernetes", "kube-scheduler"), f"--config={self.config}",
            "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            # Tests scrape its metrics without a token.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--cert-dir={testbed.workdir / (self.name + '-certs')}", "--v=2",
            *testbed.gate_flags(),
        ])

    def ready(self) -> bool:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        return answers(f"https://127.0.0.1:{self.port}/healthz", insecure)


def ray_scheduler_configuration(testbed: ControlPlane) -> dict[str, Any]:
    """deploy/kube-scheduler-second's KubeSchedulerConfiguration, the extender's address
    and the kubeconfig path (the ``ray-scheduler`` ServiceAccount's) rewritten for
    ``testbed``."""
    documents = yaml.safe_load_all((SCHEDULER_SETUP / "scheduler.yaml").read_text())
    configmap = next(d for d in documents if d and d.get("kind") == "ConfigMap"
                     and d["metadata"]["name"] == "ray-scheduler-config")
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    for extender in config.get("extenders", []):
        extender["urlPrefix"] = f"{testbed.raygate_url}/scheduler"
    kubeconfig = testbed.service_account_kubeconfig("ray-scheduler")
    config["clientConnection"] = {**config.get("clientConnection", {}),
                                  "kubeconfig": str(kubeconfig)}
    return config


def schedulers(testbed: ControlPlane) -> list[KubeScheduler]:
    """``ray-scheduler`` with exactly the KubeSchedulerConfiguration of
    deploy/kube-scheduler-second (``ray_scheduler_configuration``), and the stock
    ``default-scheduler`` (no extender), as every cluster has."""
    config = ray_scheduler_configuration(testbed)
    kubeconfig = config["clientConnection"]["kubeconfig"]
    path = testbed.workdir / "ray-scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    default = testbed.workdir / "default-scheduler.yaml"
    default.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(testbed.admin_kubeconfig)},
        "leaderElection": {"leaderElect": False}}))
    return [KubeScheduler("ray-scheduler", path, kubeconfig, testbed.ports.ray_scheduler),
            KubeScheduler("default-scheduler", default, str(testbed.admin_kubeconfig),
                          testbed.ports.default_scheduler)]


class KubeRay(AddOn):
    """The KubeRay operator, with ``--batch-scheduler`` when ``batch_scheduler`` is set
    (KubeRay reads it at start: ``Testbed.restart_kuberay`` changes it), its RayCluster
    CRD extended first (``testbed.kuberay_standin``)."""

    name = "kuberay-operator"

    def __init__(self, batch_scheduler: str = "") -> None:
        super().__init__()
        self.batch_scheduler = batch_scheduler

    def launch(self, testbed: ControlPlane) -> None:
        kuberay_standin.extend(testbed)  # its CRD with 1.7's priority and the scale gates
        self.run(self.name, [
            binary("kuberay", "kuberay-operator"),
            f"--metrics-addr=127.0.0.1:{testbed.ports.kuberay_metrics}",
            f"--health-probe-bind-address=127.0.0.1:{testbed.ports.kuberay_health}",
            "--enable-leader-election=false",
            *([f"--batch-scheduler={self.batch_scheduler}"] if self.batch_scheduler else []),
        ], env={"KUBECONFIG": str(testbed.admin_kubeconfig)})

    def ready(self) -> bool:
        return answers(f"http://127.0.0.1:{self.testbed.ports.kuberay_health}/readyz")


class Kwok(AddOn):
    """kwok, which keeps every node Ready and runs bound pods (there is no kubelet); ready
    once it runs."""

    name = "kwok"

    def launch(self, testbed: ControlPlane) -> None:
        stages = COMPONENTS["kwok"].path("stages")
        self.run(self.name, [
            binary("kwok", "kwok"), f"--kubeconfig={testbed.admin_kubeconfig}",
            "--manage-all-nodes", "--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
            f"--config={stages / 'node' / 'fast'}",
            f"--config={stages / 'node' / 'heartbeat'}",
            f"--config={stages / 'pod' / 'fast' / 'pod-ready.yaml'}",
            f"--config={stages / 'pod' / 'fast' / 'pod-complete.yaml'}",
            # A deleted pod goes after its grace period (at most), as a kubelet's does;
            # the fast stage would force-delete it at once.
            f"--config={stages / 'pod' / 'general' / 'pod-delete.yaml'}",
        ])


class Raygate(AddOn):
    """raygate as an operator deploys it: the ``raygate`` ServiceAccount of deploy/, the
    settings of deploy/base/configmap.yaml, authz on, and the Ray-pod webhook of
    deploy/native-placement (every namespace but raygate's, kube-system and those
    labelled ``NATIVE_PLACEMENT_OFF``: the gate on each new CPU-only Ray pod), installed
    once raygate is ready."""

    name = "raygate"
    readiness = "raygate /readyz"

    def launch(self, testbed: ControlPlane) -> None:
        assert testbed.pki is not None
        configmap = yaml.safe_load((DEPLOY / "base" / "configmap.yaml").read_text())
        config = testbed.workdir / "raygate.yaml"
        config.write_text(configmap["data"]["raygate.yaml"])
        kubeconfig = testbed.service_account_kubeconfig(RAYGATE_ACCOUNT)
        ports = testbed.ports
        self.run(self.name, [
            sys.executable, "-m", "raygate", "serve", f"--kubeconfig={kubeconfig}",
            f"--config={config}", f"--http-addr=127.0.0.1:{ports.raygate_http}",
            f"--grpc-addr=127.0.0.1:{ports.raygate_grpc}", "--authz=on",
            f"--webhook-addr=127.0.0.1:{ports.raygate_webhook}",
            f"--webhook-cert={testbed.pki.apiserver_cert}",
            f"--webhook-key={testbed.pki.apiserver_key}",
            # The Deployment waits 5 s for endpoints controllers; there are none here.
            "--shutdown-delay-seconds=0",
        ], env={"PYTHONPATH": str(REPO),
                # The downward API's, as in the Deployment: its leader election holds the
                # Lease in raygate's namespace, where deploy/'s Role grants it.
                "POD_NAME": "raygate-testbed", "POD_NAMESPACE": RAYGATE_NAMESPACE})

    def ready(self) -> bool:
        return answers(f"{self.testbed.raygate_url}/readyz")

    def start(self, testbed: ControlPlane) -> None:
        super().start(testbed)
        assert testbed.pki is not None
        testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(webhook_configuration(
            "raygate-ray-pods", f"https://127.0.0.1:{testbed.ports.raygate_webhook}",
            testbed.pki.ca_cert, {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": ["kube-system", RAYGATE_NAMESPACE]},
                {"key": NATIVE_PLACEMENT_OFF, "operator": "NotIn", "values": ["true"]}]})))

    def started(self) -> Process:
        """Its process (``Testbed.start_raygate`` returns it)."""
        process = self.process
        assert process is not None
        return process
