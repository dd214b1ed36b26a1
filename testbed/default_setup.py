"""``deploy/kube-scheduler-default`` on the testbed: raygate as an extender of a scheduler
that schedules every pod.

``start_default_setup`` starts, on a running testbed (the first scenario that needs it), a
kube-scheduler add-on (``testbed.components.KubeScheduler``) with the setup's
KubeSchedulerConfiguration (the extender, called for every pod: no ``managedResources``,
the marker being off by default) whose profile is renamed ``SCHEDULER``: the testbed's
stock ``default-scheduler`` keeps its name. The Ray-pod webhook (the gate of raygate's
native placement) is the testbed's own, as in every setup. ``NAMESPACE_LABEL`` marks the
scenarios that use this setup.
"""

from __future__ import annotations

from typing import Any

import yaml

from testbed.cluster import Testbed
from testbed.common import DEPLOY, TestbedError
from testbed.processes import free_port

__all__ = ["NAMESPACE_LABEL", "SCHEDULER", "start_default_setup"]

SETUP = DEPLOY / "kube-scheduler-default"
SCHEDULER = "default-setup"
NAMESPACE_LABEL = "testbed.raygate.dev/default-setup"


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
    """Start the setup's scheduler on ``testbed``."""
    config = testbed.workdir / f"{SCHEDULER}.yaml"
    config.write_text(yaml.safe_dump(_scheduler_configuration(testbed)))
    testbed.start_scheduler(SCHEDULER, config, str(testbed.admin_kubeconfig), free_port())
