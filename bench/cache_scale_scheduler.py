"""``bench.cache_scale``'s yardstick: kube-scheduler's own informers synced on the same
loaded API server, in the same run, timed as raygate is (process start to ``/readyz``).

kube-scheduler 1.37 starts its informers at once (leader election off, as the testbed's
``default-scheduler`` runs; ``cmd/kube-scheduler/app/server.go``,
``startInformersAndWaitForSync``), waits for every informer's cache
(``InformerFactory.WaitForCacheSync``) and for its event handlers to have taken the
initial objects (``WaitForHandlersSync``), and only then passes its ``/readyz`` check
``sched-handler-sync``: the moment it could schedule, as ``/readyz`` 200 is raygate's.
Its informers list by the streaming list (client-go 1.37's ``WatchListClient``, on by
default since 1.35: ``k8s.io/client-go/features/known_features.go``) in protobuf, the
content type kube-scheduler's clients ask for. Its log (``--v=2``) says when each
informer's first state was in: the reflector's ``"Caches populated"`` line per type.
"""

from __future__ import annotations

import re
import ssl
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from testbed.components import KubeScheduler
from testbed.control_plane import ControlPlane
from testbed.processes import StartError, free_port

if TYPE_CHECKING:
    from testbed.cluster import Testbed

__all__ = ["SchedulerSync", "SchedulerSynced", "scheduler_sync"]

READY_TIMEOUT_S = 600.0
POLL_S = 0.02
"""As often as the bench asks raygate's ``/readyz``."""
NAME = "kube-scheduler-sync"

POPULATED = re.compile(
    r'^I(\d{4}) (\d\d:\d\d:\d\d\.\d+)\s.*"Caches populated".*type="\*v1\.(\w+)"')
"""klog's header (``Immdd hh:mm:ss.uuuuuu``) and the reflector's line for a type."""


class SchedulerSync(KubeScheduler):
    """A kube-scheduler with no extender and no leader election, its start and its
    ``/readyz`` 200 timed."""

    timeout = READY_TIMEOUT_S
    readiness = "kube-scheduler /readyz (its informers synced)"

    def __init__(self, config: Path, kubeconfig: str) -> None:
        super().__init__(NAME, config, kubeconfig, free_port())
        self.launched = 0.0
        self.launched_wall = 0.0
        self.ready_s = -1.0
        self._insecure = ssl.create_default_context()
        self._insecure.check_hostname = False
        self._insecure.verify_mode = ssl.CERT_NONE

    def start(self, testbed: ControlPlane) -> None:
        """Start it and poll ``/readyz`` every ``POLL_S`` until 200."""
        self._testbed = testbed
        self.launched, self.launched_wall = time.monotonic(), time.time()
        self.launch(testbed)
        deadline = self.launched + self.timeout
        while time.monotonic() < deadline:
            process = self.process
            if process is None or not process.alive:
                raise StartError(f"{self.readiness}: {NAME} exited\n"
                                 f"{process.tail() if process else ''}")
            if self.ready():
                self.ready_s = time.monotonic() - self.launched
                return
            time.sleep(POLL_S)
        raise StartError(f"{self.readiness}: not ready after {self.timeout:.0f} s")

    def ready(self) -> bool:
        url = f"https://127.0.0.1:{self.port}/readyz"
        try:
            with urllib.request.urlopen(url, context=self._insecure, timeout=2) as reply:
                return bool(reply.status == 200)
        except (OSError, ValueError):
            return False

    def populated(self) -> dict[str, float]:
        """Seconds from the start to each type's ``Caches populated`` line (Node, Pod, ...)."""
        process = self.process
        if process is None:
            return {}
        start = datetime.fromtimestamp(self.launched_wall)
        out: dict[str, float] = {}
        text = process.log.read_text(errors="replace")
        # The log is appended to: this start's lines follow its last "--- start" line.
        for line in text[text.rfind("--- start"):].splitlines():
            found = POPULATED.match(line)
            if found is None or found.group(3) in out:
                continue
            at = datetime.strptime(f"{start.year}{found.group(1)} {found.group(2)}",
                                   "%Y%m%d %H:%M:%S.%f")
            out[found.group(3)] = (at - start).total_seconds()
        return out


@dataclass
class SchedulerSynced:
    """kube-scheduler's seconds from its start to ``/readyz`` 200, and to each informer's
    first state (its log)."""

    ready_s: float = -1.0
    populated_s: dict[str, float] = field(default_factory=dict)


def scheduler_sync(testbed: Testbed) -> SchedulerSynced:
    """Start kube-scheduler on ``testbed`` (the admin's kubeconfig), time it to ready,
    stop it."""
    config = testbed.workdir / f"{NAME}.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(testbed.admin_kubeconfig)},
        "leaderElection": {"leaderElect": False}}))
    scheduler = SchedulerSync(config, str(testbed.admin_kubeconfig))
    try:
        testbed.add(scheduler)
        return SchedulerSynced(scheduler.ready_s, scheduler.populated())
    except StartError as exc:
        raise RuntimeError(str(exc)) from None
    finally:
        scheduler.stop()
