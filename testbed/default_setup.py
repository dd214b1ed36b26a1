"""``deploy/kube-scheduler-default`` on the testbed: raygate as an extender of a scheduler
that schedules every pod, scoped to Ray pods by raygate's marker webhook.

``start_default_setup`` starts, on a running testbed (the first scenario that needs it):

- a second raygate process serving the Ray-pod marker webhook over HTTPS, as the setup's
  Deployment patch runs it (``--webhook-addr``, ``--webhook-cert``, ``--webhook-key``).
  Its certificate is the API server's own serving certificate (signed by the testbed's
  CA, 127.0.0.1 among its names), which is all the API server checks on a call to
  ``https://127.0.0.1:<port>``;
- the setup's MutatingWebhookConfiguration, called by URL (no Service, no cert-manager)
  and narrowed to namespaces labelled ``NAMESPACE_LABEL``, so it marks only the pods of
  the scenarios that ask for it;
- a kube-scheduler with the setup's KubeSchedulerConfiguration (the extender with
  ``managedResources: raygate.io/managed, ignoredByScheduler: true``) whose profile is
  renamed ``SCHEDULER``: the testbed's stock ``default-scheduler`` keeps its name.
"""

from __future__ import annotations

import base64
import sys
import urllib.request
from typing import Any

import yaml

from testbed.cluster import DEPLOY, REPO, Testbed, TestbedError
from testbed.processes import free_port, wait_for

__all__ = ["NAMESPACE_LABEL", "SCHEDULER", "start_default_setup"]

SETUP = DEPLOY / "kube-scheduler-default"
NATIVE_PLACEMENT = DEPLOY / "native-placement"
SCHEDULER = "default-setup"
NAMESPACE_LABEL = "testbed.raygate.dev/default-setup"


def _webhook_configuration(url: str, ca_bundle: str) -> dict[str, Any]:
    documents = yaml.safe_load_all((NATIVE_PLACEMENT / "webhook.yaml").read_text())
    configuration: dict[str, Any] = next(
        d for d in documents if d and d["kind"] == "MutatingWebhookConfiguration")
    configuration["metadata"].pop("annotations", None)  # cert-manager's CA injection
    for webhook in configuration["webhooks"]:
        path = webhook["clientConfig"]["service"]["path"]
        webhook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
        webhook["namespaceSelector"] = {"matchLabels": {NAMESPACE_LABEL: "true"}}
    return configuration


def _scheduler_configuration(testbed: Testbed) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((SETUP / "scheduler-config.yaml").read_text())
    if [p["schedulerName"] for p in config["profiles"]] != ["default-scheduler"]:
        raise TestbedError(f"{SETUP}/scheduler-config.yaml: expected one profile, "
                           "default-scheduler")
    config["profiles"][0]["schedulerName"] = SCHEDULER
    for extender in config["extenders"]:
        extender["urlPrefix"] = f"{testbed.raygate_url}/scheduler"
    config["clientConnection"] = {"kubeconfig": str(testbed.admin_kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    return config


def start_default_setup(testbed: Testbed) -> None:
    """Start the marker webhook and the setup's scheduler on ``testbed``."""
    assert testbed.pki is not None
    pki = testbed.pki
    raygate_config = testbed.workdir / "raygate.yaml"  # the testbed's raygate's settings
    if not raygate_config.is_file():
        raise TestbedError(f"{raygate_config} is missing: the testbed runs without raygate")
    http, webhook = free_port(), free_port()
    process = testbed.run("raygate-webhook", [
        sys.executable, "-m", "raygate", "serve",
        f"--kubeconfig={testbed.service_account_kubeconfig('raygate')}",
        f"--config={raygate_config}", f"--http-addr=127.0.0.1:{http}",
        f"--grpc-addr=127.0.0.1:{free_port()}", "--authz=on", "--shutdown-delay-seconds=0",
        f"--webhook-addr=127.0.0.1:{webhook}", f"--webhook-cert={pki.apiserver_cert}",
        f"--webhook-key={pki.apiserver_key}",
    ], env={"PYTHONPATH": str(REPO)})
    wait_for("raygate-webhook /readyz", lambda: urllib.request.urlopen(
        f"http://127.0.0.1:{http}/readyz", timeout=2).status == 200, 60, process)
    ca_bundle = base64.b64encode(pki.ca_cert.read_bytes()).decode()
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        _webhook_configuration(f"https://127.0.0.1:{webhook}", ca_bundle)))
    config = testbed.workdir / f"{SCHEDULER}.yaml"
    config.write_text(yaml.safe_dump(_scheduler_configuration(testbed)))
    testbed.start_scheduler(SCHEDULER, config, str(testbed.admin_kubeconfig), free_port())
