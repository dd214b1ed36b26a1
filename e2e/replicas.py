"""A second raygate replica beside the testbed's, as two replicas of deploy/'s Deployment
run: the same ServiceAccount, settings and webhook certificate, its own ports and
``POD_NAME``, ``POD_NAMESPACE=raygate-system``, so both contend for the leader Lease
``raygate-system/raygate``, and both serve the Ray-pod webhook (the second through a
configuration of its own, for one namespace). Which replica leads, SIGKILL to either."""

from __future__ import annotations

import sys
import urllib.request

import yaml

from e2e.scenario import wait_until
from testbed.cluster import RAYGATE_NAMESPACE, REPO, Testbed
from testbed.common import RAYGATE_ACCOUNT
from testbed.processes import free_port, wait_for
from testbed.webhook import webhook_configuration

__all__ = ["SECOND", "Replicas", "leads"]

SECOND, SECOND_WEBHOOK = "raygate-replica-b", "raygate-ray-pods-replica-b"


def leads(url: str) -> bool:
    """Whether the raygate at ``url`` says it leads (its ``raygate_leader`` gauge)."""
    try:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    except OSError:  # killed, or not up yet
        return False
    return any(line.split() == ["raygate_leader", "1.0"] for line in text.splitlines())


class Replicas:
    """The testbed's raygate and, once ``start_second``, a second replica (the webhook
    serves ``namespace`` from both); ``close`` leaves the testbed's running and the
    second stopped, its webhook configuration deleted."""

    def __init__(self, testbed: Testbed, namespace: str) -> None:
        self.testbed = testbed
        self.namespace = namespace
        election = yaml.safe_load((testbed.workdir / "raygate.yaml").read_text())[
            "server"]["leaderElection"]
        self.lease = float(election["leaseSeconds"])
        self.retry = float(election["retrySeconds"])
        self.urls = {"raygate": testbed.raygate_url}

    def start_second(self) -> None:
        testbed = self.testbed
        assert testbed.pki is not None
        http, webhook = free_port(), free_port()
        process = testbed.run(SECOND, [
            sys.executable, "-m", "raygate", "serve",
            f"--kubeconfig={testbed.service_account_kubeconfig(RAYGATE_ACCOUNT)}",
            f"--config={testbed.workdir / 'raygate.yaml'}", f"--http-addr=127.0.0.1:{http}",
            f"--grpc-addr=127.0.0.1:{free_port()}", "--authz=on",
            f"--webhook-addr=127.0.0.1:{webhook}", f"--webhook-cert={testbed.pki.apiserver_cert}",
            f"--webhook-key={testbed.pki.apiserver_key}", "--shutdown-delay-seconds=0",
        ], env={"PYTHONPATH": str(REPO), "POD_NAME": SECOND,
                "POD_NAMESPACE": RAYGATE_NAMESPACE})
        url = self.urls[SECOND] = f"http://127.0.0.1:{http}"
        wait_for(f"{SECOND} /readyz", lambda: urllib.request.urlopen(
            f"{url}/readyz", timeout=2).status == 200, 120, process)
        testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(webhook_configuration(
            SECOND_WEBHOOK, f"https://127.0.0.1:{webhook}", testbed.pki.ca_cert,
            {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}})))

    def leader(self) -> str:
        """The replica that leads, once one does (within a lease and a retry)."""
        return wait_until("a leading replica", lambda: next(
            (name for name, url in self.urls.items() if leads(url)), None),
            timeout=self.lease + self.retry + 5)

    def kill(self, name: str) -> None:
        """SIGKILL; the testbed's supervisor does not start it again."""
        if name == "raygate":
            self.testbed.kill_raygate()
        else:
            self.testbed.processes.pop(name).kill()
        self.urls.pop(name)

    def close(self) -> None:
        if "raygate" not in self.testbed.processes:
            self.testbed.start_raygate()
        second = self.testbed.processes.pop(SECOND, None)
        if second is not None:
            second.stop()  # releases the Lease if it holds it: the testbed's takes it
        self.testbed.kubectl("delete", "mutatingwebhookconfiguration", SECOND_WEBHOOK,
                             "--ignore-not-found")
