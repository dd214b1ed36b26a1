"""Volcano on the testbed: its controller manager and its scheduler, with
exactly the scheduler configuration of ``deploy/volcano`` (raygate's address rewritten).

Its CRDs are installed with the testbed's own. ``start_volcano`` starts the add-on
``Volcano`` on a running testbed (the first Volcano scenario does); it stops with the
testbed. Two Volcano processes run:

- ``vc-controller-manager`` with the queue and PodGroup controllers only: the queue
  controller opens queues (Volcano's scheduler allocates nothing from a queue that is not
  ``Open``) and the PodGroup controller gives a plain pod of ``schedulerName: volcano``
  its own PodGroup, as in a cluster;
- ``vc-scheduler`` as scheduler ``volcano``, raygate as its ``extender`` plugin.

No admission webhook runs (``vc-webhook-manager``): it validates and mutates Volcano
Jobs, which no scenario uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testbed.addon import AddOn, answers
from testbed.cluster import Testbed
from testbed.common import DEPLOY, TestbedError, binary
from testbed.control_plane import ControlPlane
from testbed.processes import free_port, wait_for

__all__ = ["VOLCANO_SETUP", "Volcano", "scheduler_configuration", "start_volcano"]

VOLCANO_SETUP = DEPLOY / "volcano"
NAMESPACE = "volcano-system"
CONFIGMAP = VOLCANO_SETUP / "volcano-scheduler-configmap.yaml"


def scheduler_configuration(raygate_url: str) -> dict[str, Any]:
    """deploy/volcano's ``volcano-scheduler.conf``, with only ``extender.urlPrefix``
    pointing at this testbed's raygate."""
    configmap = yaml.safe_load(CONFIGMAP.read_text())
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["volcano-scheduler.conf"])
    extenders = [plugin for tier in config["tiers"] for plugin in tier["plugins"]
                 if plugin["name"] == "extender"]
    if len(extenders) != 1:
        raise TestbedError(f"{CONFIGMAP}: expected one extender plugin, found {len(extenders)}")
    extenders[0]["arguments"]["extender.urlPrefix"] = f"{raygate_url}/volcano"
    return config


def _queue_open(testbed: ControlPlane, name: str) -> bool:
    state = testbed.kubectl("get", "queue", name, "-o", "jsonpath={.status.state}",
                            check=False).stdout
    return state == "Open"


class Volcano(AddOn):
    """Volcano's controllers, then its scheduler; ready once the ``default`` queue is open
    (the scheduler creates it at start, the queue controller opens it). ``config``: the
    scheduler configuration file it reads."""

    name = "volcano"
    readiness = "the default queue Open"

    def __init__(self) -> None:
        super().__init__()
        self.config = Path()
        self.health = {"vc-controller-manager": free_port(), "vc-scheduler": free_port()}

    def launch(self, testbed: ControlPlane) -> None:
        if testbed.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
            testbed.kubectl("create", "namespace", NAMESPACE)
        kubeconfig = f"--kubeconfig={testbed.admin_kubeconfig}"
        health = self.health["vc-controller-manager"]
        controllers = self.run("vc-controller-manager", [
            binary("volcano", "vc-controller-manager"), kubeconfig, "--leader-elect=false",
            "--controllers=queue-controller,pg-controller", "--scheduler-name=volcano",
            "--enable-healthz", f"--healthz-address=127.0.0.1:{health}",
            f"--listen-address=127.0.0.1:{free_port()}", "--v=2",
        ])
        wait_for("vc-controller-manager", lambda: self._healthy("vc-controller-manager"), 60,
                 controllers)
        self.config = testbed.workdir / "volcano-scheduler.conf"
        self.config.write_text(yaml.safe_dump(scheduler_configuration(testbed.raygate_url)))
        scheduler = self.run("vc-scheduler", [
            binary("volcano", "vc-scheduler"), kubeconfig, "--leader-elect=false",
            f"--scheduler-conf={self.config}", "--scheduler-name=volcano",
            "--enable-healthz", f"--healthz-address=127.0.0.1:{self.health['vc-scheduler']}",
            "--enable-metrics", f"--listen-address=127.0.0.1:{free_port()}",
            f"--cache-dump-dir={testbed.workdir}", "--v=3",
        ])
        wait_for("vc-scheduler", lambda: self._healthy("vc-scheduler"), 60, scheduler)

    def _healthy(self, process: str) -> bool:
        return answers(f"http://127.0.0.1:{self.health[process]}/healthz")

    def ready(self) -> bool:
        return (all(self._healthy(name) for name in self.health)
                and _queue_open(self.testbed, "default"))


def start_volcano(testbed: Testbed) -> Path:
    """Start Volcano on ``testbed``; returns the scheduler configuration file it reads.
    Returns once the ``default`` queue is open."""
    return testbed.add(Volcano()).config
