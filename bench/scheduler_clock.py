"""The clock of ``bench.scheduler_throughput``'s bursts: when each pod's create was sent and
answered (this driver), and when a watch of the pods first showed it (ADDED), released
from raygate's gate and bound — the same watch, the same way, for every contender.

The pods' ``creationTimestamp`` counts whole seconds, too coarse for a burst of a few
seconds; every time here is this process's ``time.monotonic()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from raygate.policy.native import GATE, LABEL_RULE
from testbed.api import ApiError, KubeApi

__all__ = ["GATE", "LABEL_RULE", "BurstClock", "Sent", "create_burst", "latencies", "marked"]

Obj = dict[str, Any]
CREATE_THREADS = 8


@dataclass
class Sent:
    """One create: when it was sent and when the API server answered."""

    sent: float
    answered: float


def create_burst(api: KubeApi, path: str, pods: list[Obj]) -> dict[str, Sent]:
    """Create ``pods`` at once (``CREATE_THREADS`` clients, as a controller's workers),
    the same way for every contender; each pod's send and answer times."""
    def one(pod: Obj) -> tuple[str, Sent]:
        sent = time.monotonic()
        api.ensure(path, pod)
        return pod["metadata"]["name"], Sent(sent, time.monotonic())

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        return dict(pool.map(one, pods))


@dataclass
class BurstClock:
    """Follows ``path``'s pods from a list until ``expected`` pods are bound."""

    api: KubeApi
    path: str
    expected: int
    added: dict[str, float] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    """Pods the watch first showed with raygate's gate (the webhook added it)."""
    released: dict[str, float] = field(default_factory=dict)
    """Gated pods: when the watch first showed them without the gate."""
    bound: dict[str, float] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def start(self) -> None:
        listed = self.api.request("GET", self.path)
        self._see_all(listed["items"])
        version = listed["metadata"]["resourceVersion"]
        threading.Thread(target=self._guard, args=(version,), daemon=True).start()

    def wait(self, check: Callable[[], None]) -> None:
        """Until every pod is bound; ``check`` every second (a component that exited)."""
        while not self.done.wait(1.0):
            if self.error is not None:
                raise RuntimeError(f"the bench's pod watch failed: {self.error}")
            check()

    def see(self, pod: Obj) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        gates = {g["name"] for g in pod["spec"].get("schedulingGates") or []}
        if name not in self.added:
            self.added[name] = now
            if GATE in gates:
                self.gated.add(name)
        if name in self.gated and GATE not in gates:
            self.released.setdefault(name, now)
        if pod["spec"].get("nodeName") and name not in self.bound:
            self.bound[name] = now
            if len(self.bound) == self.expected:
                self.done.set()

    def _see_all(self, pods: list[Obj]) -> None:
        for pod in pods:
            self.see(pod)

    def _guard(self, version: str) -> None:
        try:
            self._follow(version)
        except BaseException as exc:  # reported by wait()
            self.error = exc

    def _follow(self, version: str) -> None:
        # kube-apiserver closes a watch that falls behind a burst ("Forcing pods watcher
        # close due to unresponsiveness", ten events of buffer): watch again from the
        # last version seen, as an informer does; relist on 410.
        while not self.done.is_set():
            try:
                for _, pod in self.api.watch(self.path, version):
                    version = pod["metadata"]["resourceVersion"]
                    self.see(pod)
                    if self.done.is_set():
                        return
            except ApiError as exc:
                if exc.status not in (0, 410):
                    raise
                if exc.status == 0:  # the stream broke: a component's check will say why
                    time.sleep(0.1)
                else:
                    listed = self.api.request("GET", self.path)
                    version = listed["metadata"]["resourceVersion"]
                    self._see_all(listed["items"])


def marked(pod: Obj) -> bool:
    """Whether raygate's webhook took ``pod`` in hand: gated (decided later, at the
    release), or decided at admission (labelled ``raygate.io/rule``)."""
    gates = {g["name"] for g in pod["spec"].get("schedulingGates") or []}
    return GATE in gates or LABEL_RULE in (pod["metadata"].get("labels") or {})


def latencies(since: dict[str, float], until: dict[str, float]) -> list[float]:
    """Seconds from ``since`` to ``until`` for every pod in both."""
    return sorted(until[n] - since[n] for n in until if n in since)
