"""The Ray side of a scenario, as the autoscaler scenarios run it: an autoscaled
RayCluster's head as a local ``ray start --head`` (kwok runs the head pod), its autoscaler
(Ray 2.60's stock one or ``raygate-autoscaler``) under the RayCluster's ServiceAccount, the
driver's demand (``request_resources``), raylets for worker pods, and what the
autoscaler's ``monitor.log`` says it decided (``testbed.ray_head`` runs the processes).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.objects import Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from testbed.cluster import Testbed
from testbed.ray_head import start_autoscaler, start_head, start_worker

__all__ = ["RAY_STOP", "TIMEOUT", "RayCluster", "autoscaled_raycluster",
           "autoscaler_decisions", "ray_cluster", "request"]

TIMEOUT = 30  # seconds a pod may sit ALLOCATED before Ray replaces it
LOOP = 5  # Ray's AUTOSCALER_UPDATE_INTERVAL_S: raygate's last "keep" is up to one loop old
RAY_STOP = 1.0  # seconds a Ray node is given to exit on SIGTERM before SIGKILL
STATED = "demand-stated-at"  # the driver's line that says when


def autoscaled_raycluster(scenario: Scenario) -> dict[str, Any]:
    body = raycluster("work", scenario.namespace, scenario.name,
                      [Group("overflow", 0, "8", min=0, max=3)], head_cpu="1")
    body["spec"]["autoscalerOptions"] = {"version": "v2"}
    body["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    return body


def request(gcs: str, bundles: list[dict[str, float]]) -> float:
    """Demand as a driver states it; it stays with the GCS after the driver exits.
    Returns when it was stated (``time.monotonic()``, the machine's clock: the driver's
    start and exit take seconds either side)."""
    done = subprocess.run([sys.executable, "-c", (
        "import time, ray; from ray.autoscaler.sdk import request_resources; "
        f"ray.init({gcs!r}); request_resources(bundles={bundles!r}); "
        f"print({STATED!r}, time.monotonic(), flush=True)")],
        check=True, capture_output=True, timeout=120, text=True)
    # Ray may print on stdout too (a warning as the driver exits).
    return float(next(line.split()[1] for line in done.stdout.splitlines()
                      if line.startswith(STATED)))


@dataclass
class RayCluster:
    """The running Ray side of one scenario."""
    gcs: str
    logs: Path
    """The head's session log folder; the autoscaler writes ``monitor.log`` there."""
    testbed: Testbed
    names: list[str]
    demanded: float = 0.0
    """When the demand was stated (scenario seconds)."""

    def add_worker(self, pod: str, group: str, cpu: int) -> None:
        self.names.append(start_worker(self.testbed, pod, group, self.gcs, cpu=cpu).name)

    def decisions(self, scenario: Scenario, groups: Iterable[str] = ("overflow",)) -> str:
        """The autoscaler's own log lines about the workers of ``groups``: each instance
        transition, scale request and pod deletion, and raygate's rulings."""
        return autoscaler_decisions(self.logs / "monitor.log", groups)


@contextmanager
def ray_cluster(scenario: Scenario, testbed: Testbed, *, raygate: bool,
                body: dict[str, Any] | None = None, set_up: bool = True,
                demand: list[dict[str, float]] | None = None,
                allocate_timeout: int = TIMEOUT, first: str = "overflow",
                ) -> Iterator[RayCluster]:
    """One 4-CPU node (unless the caller ``set_up`` the scenario), the autoscaled
    RayCluster (``body``, else ``autoscaled_raycluster``), its head and autoscaler (Ray's
    ALLOCATED timeout ``allocate_timeout``), and the ``demand`` (else one bundle of 8 CPU);
    the block starts once a pod of group ``first`` is; stops them (by process group)
    after the block."""
    if set_up:
        scenario.setup([node(f"{scenario.name}-cpu-a", scenario.name, cpu=4)])
    scenario.create(body or autoscaled_raycluster(scenario))
    head = wait_until("the head running", lambda: next(
        (p["metadata"]["name"] for p in scenario.running("headgroup")), None), timeout=90)
    if raygate:
        # The autoscaler asks raygate's admission API (authz on) under its own token.
        testbed.kubectl("create", "rolebinding", "work-reads-admission", "-n",
                        scenario.namespace, "--clusterrole=raygate-status-reader",
                        f"--serviceaccount={scenario.namespace}:work")
    gcs = start_head(testbed, head)
    ray = RayCluster(gcs, (testbed.workdir / "ray" / "session_latest").resolve() / "logs",
                     testbed, [f"ray-head-{head}"])
    scenario.step("Ray head up (local, as the head pod)")
    autoscaler = None
    try:
        autoscaler = start_autoscaler(testbed, "work", scenario.namespace, head, gcs,
                                      raygate=raygate, allocate_timeout=allocate_timeout).name
        bundles = demand or [{"CPU": 8}]
        ray.demanded = request(gcs, bundles) - scenario.started
        scenario.steps.append((ray.demanded, f"requested {len(bundles)} × "
                               f"{bundles[0]['CPU']:g} CPU"))
        wait_until(f"a {first} pod", lambda: scenario.group_pods(first), timeout=120)
        scenario.step(f"first {first} pod created")
        yield ray
    finally:
        # The autoscaler is stopped first: a raylet stopped before it is a Ray node gone
        # DEAD, whose pod it deletes, after the scenario's last look but before the
        # assertions read the pods. A Ray node takes ~30 s to exit on SIGTERM, past the
        # 15 s a stop waits before SIGKILL: nothing after the scenario needs its graceful
        # exit, so it is killed after 1 s.
        if autoscaler is not None:
            testbed.processes.pop(autoscaler).stop()
        for name in reversed(ray.names):
            testbed.processes.pop(name).stop(timeout=RAY_STOP)


# What the autoscaler decided, as its log says: every transition of a worker instance of
# the groups asked about, the scale requests to KubeRay, pod deletions, a group ranked
# down after a timeout, and raygate's rulings and gates.
DECISION = (r"(New instance|Update instance) \S+ \(id=\S+, type=({groups})\b"
            r"|Submitting a scale request|Terminating worker pods|raygate: "
            r"|worker group \S+ is (no longer )?gated|Cloud Resource Type")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\s+\w+\s+\S+\s+--\s+(.*)$")


def autoscaler_decisions(log: Path, groups: Iterable[str]) -> str:
    decision = re.compile(DECISION.format(groups="|".join(map(re.escape, groups))))
    if not log.exists():
        return "\n(no monitor.log)\n"
    lines = ["", "The autoscaler's decisions (its `monitor.log`, as written):", "", "```"]
    kept = 0
    for line in log.read_text(errors="replace").splitlines():
        match = STAMP.match(line)
        text = match.group(2) if match else line
        if decision.search(text):
            kept += 1
            lines.append((f"{match.group(1)[11:]} " if match else "") + text[:300])
    if not kept:
        lines.append("(none)")
    return "\n".join([*lines, "```", ""])
