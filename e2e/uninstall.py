"""The parts of e2e/test_uninstall.py: a testbed the chart is installed into, raygate run
as the chart's account behind the chart's own webhook configuration, and the kubelet's
part for the uninstall hook's pod.

The session's testbed applies deploy/kube-scheduler-second by kubectl, whose objects
(ClusterRole ``raygate``, ``raygate-ray-pods``...) Helm would refuse to take over and
uninstall would delete from under every other scenario. So the chart gets a control plane
of its own: etcd, kube-apiserver and the CRDs, kube-controller-manager with the job
controller (the hook is a Job; the session's testbed runs no Jobs), and the KubeRay
operator. No scheduler and no kwok: the scenario needs pods held at raygate's gate,
never bound.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from testbed import components, kuberay_standin
from testbed.addon import answers
from testbed.cluster import REPO, Testbed, running_testbed
from testbed.common import binary, write_kubeconfig
from testbed.processes import Process, wait_for

__all__ = ["HOOK", "ChartRaygate", "chart_testbed", "play_kubelet", "widen_scale_strategy"]

NAMESPACE = "raygate-system"
HOOK = "raygate-uninstall"
CONTROLLERS = ("serviceaccount,serviceaccount-token,namespace,garbage-collector-controller,"
               "root-ca-certificate-publisher-controller,job-controller")


@contextmanager
def chart_testbed(workdir: Path) -> Iterator[Testbed]:
    with running_testbed(workdir, control_plane_only=True) as bed:
        assert bed.pki is not None
        process = bed.run("kube-controller-manager", [
            binary("kubernetes", "kube-controller-manager"),
            f"--kubeconfig={bed.admin_kubeconfig}",
            f"--authentication-kubeconfig={bed.admin_kubeconfig}",
            f"--authorization-kubeconfig={bed.admin_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={bed.ports.controller_manager}",
            f"--controllers={CONTROLLERS}",
            f"--service-account-private-key-file={bed.pki.service_account_key}",
            f"--root-ca-file={bed.pki.ca_cert}", "--leader-elect=false", "--v=1"])
        wait_for("kube-controller-manager (the default ServiceAccount)", lambda: bed.kubectl(
            "get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
            60, process)
        bed.add(components.KubeRay())
        yield bed


def widen_scale_strategy(bed: Testbed) -> None:
    """Make sure KubeRay's RayCluster CRD has ``workerGroupSpecs[].scaleStrategy.scaleGate``,
    which KubeRay 1.6.1's prunes: the testbed's stand-in (``testbed.kuberay_standin``, a
    list-map keyed by ``type``, as kuberay#5094 has it), which the KubeRay add-on gives it
    already; idempotent."""
    kuberay_standin.extend(bed)


class ChartRaygate:
    """raygate as the chart's ray-scheduler pod runs it (mode second): the chart's
    ServiceAccount (a TokenRequest token), the chart's raygate.yaml, the downward API's
    environment. The chart's MutatingWebhookConfiguration calls the Service
    raygate-webhook, which has no endpoints here: it is pointed at this process by URL,
    with the API server's serving certificate (as testbed.webhook does)."""

    def __init__(self, bed: Testbed) -> None:
        self.bed = bed
        self.process: Process | None = None

    def start(self) -> None:
        bed, ports = self.bed, self.bed.ports
        assert bed.pki is not None
        config = bed.workdir / "chart-raygate.yaml"
        config.write_text(bed.kubectl("get", "configmap", "raygate-config", "-n", NAMESPACE,
                                      "-o", "jsonpath={.data.raygate\\.yaml}").stdout)
        kubeconfig = bed.service_account_kubeconfig("ray-scheduler", NAMESPACE)
        self.process = bed.run("raygate", [
            sys.executable, "-m", "raygate", "serve", f"--kubeconfig={kubeconfig}",
            f"--config={config}", f"--http-addr=127.0.0.1:{ports.raygate_http}",
            f"--grpc-addr=127.0.0.1:{ports.raygate_grpc}",
            f"--webhook-addr=127.0.0.1:{ports.raygate_webhook}",
            f"--webhook-cert={bed.pki.apiserver_cert}", f"--webhook-key={bed.pki.apiserver_key}",
            "--shutdown-delay-seconds=0"],
            env={"PYTHONPATH": str(REPO), "POD_NAME": "ray-scheduler-testbed",
                 "POD_NAMESPACE": NAMESPACE})
        wait_for("raygate /readyz", lambda: answers(
            f"{bed.raygate_url}/readyz"), 60, self.process)
        client_config = {"url": f"https://127.0.0.1:{ports.raygate_webhook}/mutate/ray-pods",
                         "caBundle": base64.b64encode(bed.pki.ca_cert.read_bytes()).decode()}
        bed.kubectl("patch", "mutatingwebhookconfiguration", "raygate-ray-pods", "--type=json",
                    "-p", json.dumps([{"op": "replace", "path": "/webhooks/0/clientConfig",
                                       "value": client_config}]))

    def stop(self) -> None:
        """As the kubelet stops the container of a pod its Deployment scaled away."""
        process = self.bed.processes.pop("raygate", None)
        if process is not None:
            process.stop()


def _pod(bed: Testbed, selector: str) -> dict[str, Any] | None:
    found = json.loads(bed.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector,
                                   "-o", "json").stdout)["items"]
    return found[0] if found else None


Ran = subprocess.CompletedProcess[str]


def play_kubelet(bed: Testbed, timeout: float = 120.0) -> tuple[Ran, dict[str, Any]]:
    """What a kubelet would do for the hook's pod, which no kubelet runs here: run its
    container's command (``raygate`` is the image's entrypoint) with a token of the pod's
    ServiceAccount bound to the pod, then write the pod's end as the kubelet would:
    Succeeded when the command exited 0, else Failed. Returns the command's run, the pod."""
    deadline = time.monotonic() + timeout
    while (pod := _pod(bed, f"job-name={HOOK}")) is None:
        assert time.monotonic() < deadline, "the hook's Job made no pod"
        time.sleep(0.2)
    meta, spec = pod["metadata"], pod["spec"]
    assert bed.pki is not None
    token = bed.kubectl("create", "token", spec["serviceAccountName"], "-n", NAMESPACE,
                        "--bound-object-kind=Pod", f"--bound-object-name={meta['name']}",
                        f"--bound-object-uid={meta['uid']}").stdout.strip()
    kubeconfig = write_kubeconfig(bed.workdir / "hook.kubeconfig", bed.server,
                                  bed.pki.ca_cert, {"token": token})
    (container,) = spec["containers"]
    ran = subprocess.run([sys.executable, "-m", "raygate", *container.get("args", []),
                          f"--kubeconfig={kubeconfig}"], capture_output=True, text=True,
                         timeout=timeout, check=False, cwd=REPO)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": ran.returncode, "startedAt": now, "finishedAt": now,
                  "reason": "Completed" if ran.returncode == 0 else "Error"}
    status = {"phase": "Succeeded" if ran.returncode == 0 else "Failed", "containerStatuses": [
        {"name": container["name"], "image": container["image"], "imageID": "", "ready": False,
         "restartCount": 0, "state": {"terminated": terminated}}]}
    bed.kubectl("patch", "pod", meta["name"], "-n", NAMESPACE, "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": status}))
    return ran, pod


def yaml_of(bed: Testbed, *argv: str) -> Any:
    return yaml.safe_load(bed.kubectl("get", *argv, "-o", "yaml").stdout)
