"""The one shape of every component beyond the control plane (etcd, kube-apiserver,
kube-controller-manager): the schedulers, KubeRay, kwok, raygate, and on demand Volcano,
Kueue, Karpenter, a Ray head and its autoscaler.

An add-on has a ``name`` (unique among a testbed's add-ons), ``start(testbed)`` (returns
once it is ready), ``ready()`` (does it answer now) and ``stop()`` (it may start again).
It starts on the control plane (``testbed.control_plane.ControlPlane``, which knows no
add-on; ``testbed.cluster.Testbed`` is one with its add-ons).
``Testbed.add`` starts one and keeps it in ``Testbed.addons``; ``Testbed.stop`` stops them
last started first, then the control plane. An add-on's processes are the testbed's
(``run``): supervised, restarted when they exit, their logs in the testbed's ``logs/``.
"""

from __future__ import annotations

import ssl
import urllib.request
from abc import ABC, abstractmethod
from typing import Any

from testbed.control_plane import ControlPlane
from testbed.processes import Process, wait_for

__all__ = ["AddOn", "answers"]


def answers(url: str, context: ssl.SSLContext | None = None) -> bool:
    """``url`` answers 200 now (a health endpoint); False on any error."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as reply:
            return bool(reply.status == 200)
    except (OSError, ValueError):
        return False


class AddOn(ABC):
    """A subclass sets ``name``, ``timeout`` (seconds ``start`` waits for ``ready``) and
    ``readiness`` (what it waits for, in the error when it does not come), starts its
    processes in ``launch`` with ``run`` (waiting there for whatever must be ready before
    the next step) and says in ``ready`` when it answers; by default, when every process
    it started is alive."""

    name: str = ""
    timeout: float = 60.0
    readiness: str = ""

    def __init__(self) -> None:
        self._testbed: ControlPlane | None = None
        self.process_names: list[str] = []
        """The names of its processes in ``Testbed.processes``, in start order."""

    @property
    def testbed(self) -> ControlPlane:
        if self._testbed is None:
            raise RuntimeError(f"add-on {self.name} has not started")
        return self._testbed

    @property
    def processes(self) -> list[Process]:
        """Its processes the testbed runs now (a killed or stopped one is not)."""
        running = self.testbed.processes if self._testbed is not None else {}
        return [running[name] for name in self.process_names if name in running]

    @property
    def process(self) -> Process | None:
        """Its last started process, which ``start`` watches while it waits."""
        processes = self.processes
        return processes[-1] if processes else None

    def start(self, testbed: ControlPlane) -> None:
        """Start it on ``testbed``; returns once it is ready."""
        self._testbed = testbed
        self.launch(testbed)
        wait_for(self.readiness or self.name, self.ready, self.timeout, self.process)

    @abstractmethod
    def launch(self, testbed: ControlPlane) -> None:
        """Start its processes (``run``) and what they need."""

    def ready(self) -> bool:
        processes = self.processes
        return bool(processes) and all(process.alive for process in processes)

    def stop(self) -> None:
        """Stop its processes, last started first (they are no longer supervised)."""
        if self._testbed is None:
            return
        for name in reversed(self.process_names):
            process = self._testbed.processes.pop(name, None)
            if process is not None:
                process.stop()

    def run(self, name: str, argv: list[Any], env: dict[str, str] | None = None) -> Process:
        """Start one of its processes under the testbed's supervisor."""
        process = self.testbed.run(name, argv, env)
        if name not in self.process_names:
            self.process_names.append(name)
        return process
