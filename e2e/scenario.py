"""One scenario on the testbed: its namespace and nodes, the API calls it makes, and a
timeline of what happened to its pods (for the assertions and for the report).

The timeline comes from a watch on the scenario's pods, so it records what the real
kube-scheduler, KubeRay and kwok did, when: created, bound (to which node), running,
marked by a ``DisruptionTarget`` condition, terminating, gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from e2e.objects import DRA_GPUS_LABEL, SCENARIO_LABEL
from testbed.api import ApiError
from testbed.cluster import Testbed
from testbed.webhook import NATIVE_PLACEMENT_OFF

__all__ = ["PodHistory", "Scenario", "wait_until"]

T = TypeVar("T")


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 60.0,
               every: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` and the
    last value seen. Scenario waits are bounded by the behaviour they wait for, never by
    a latency goal: a slow machine only makes a test take longer."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


@dataclass
class PodHistory:
    name: str
    group: str
    created: float
    node: str | None = None
    bound: float | None = None
    running: float | None = None
    disruption: str | None = None
    disrupted: float | None = None
    deleting: float | None = None
    deleted: float | None = None
    pending_reason: str | None = None
    unschedulable: float | None = None
    """When the scheduler's first ``PodScheduled=False`` verdict was seen."""


@dataclass
class Scenario:
    testbed: Testbed
    name: str
    started: float = field(default_factory=time.monotonic)
    pods: dict[str, PodHistory] = field(default_factory=dict)
    steps: list[tuple[float, str]] = field(default_factory=list)
    node_kinds: dict[str, str] = field(default_factory=dict)
    observers: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)
    """Also called with each (event type, pod) the timeline's watch sees, on its thread."""

    def __post_init__(self) -> None:
        self.api = self.testbed.api()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def now(self) -> float:
        return time.monotonic() - self.started

    def step(self, text: str) -> None:
        self.steps.append((self.now(), text))

    # --- setting up ---------------------------------------------------------------------

    def setup(self, nodes: list[dict[str, Any]], *, native_placement: bool = True
              ) -> Scenario:
        """The namespace and ``nodes``; ``native_placement=False``: raygate's webhook
        gates none of its pods (a baseline without raygate's native rule)."""
        labels = {} if native_placement else {NATIVE_PLACEMENT_OFF: "true"}
        self.api.create("/api/v1/namespaces",
                        {"metadata": {"name": self.namespace, "labels": labels}})
        # The ServiceAccount admission plugin refuses pods until kube-controller-manager
        # has made the namespace's default ServiceAccount.
        wait_until(f"the default ServiceAccount of {self.namespace}", lambda: self.api.exists(
            f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default"))
        for body in nodes:
            self.add_node(body)
        self._watcher = threading.Thread(target=self._record, name=f"watch-{self.name}",
                                         daemon=True)
        self._watcher.start()
        self.step(f"{len(nodes)} nodes Ready")
        return self

    def add_node(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        gpu = ("nvidia.com/gpu" in body["status"]["allocatable"]
               or DRA_GPUS_LABEL in body["metadata"]["labels"])
        self.node_kinds[name] = "GPU" if gpu else "CPU"
        self.api.create("/api/v1/nodes", body)
        wait_until(f"node {name} Ready (kwok)", lambda: self._node_ready(name))

    def _node_ready(self, name: str) -> bool:
        node = self.api.get(f"/api/v1/nodes/{name}")
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node.get("status", {}).get("conditions") or [])

    def close(self) -> None:
        self._closed.set()

    # --- objects ------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> None:
        """Create an object from YAML with kubectl, as an operator does."""
        self.testbed.kubectl("create", "-f", "-", input=yaml.safe_dump(body))
        self.step(f"created {body['kind']} {body['metadata']['name']}")

    def scale(self, cluster: str, group: str, replicas: int) -> None:
        """Set a worker group's replicas, as the Ray autoscaler does."""
        path = f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters/{cluster}"
        groups = self.api.get(path)["spec"]["workerGroupSpecs"]
        index = next(i for i, g in enumerate(groups) if g["groupName"] == group)
        self.api.json_patch(path, [{"op": "replace", "value": replicas,
                                    "path": f"/spec/workerGroupSpecs/{index}/replicas"}])
        self.step(f"scaled {cluster}/{group} to {replicas} replicas")

    def live_pods(self, selector: str = "") -> list[dict[str, Any]]:
        """The namespace's pods as the API has them now."""
        return self.api.items(self.pods_path, labelSelector=selector)

    def group_pods(self, group: str, *, alive: bool = True) -> list[dict[str, Any]]:
        pods = self.live_pods(f"ray.io/group={group}")
        if alive:
            pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return pods

    def running(self, group: str) -> list[dict[str, Any]]:
        return [p for p in self.group_pods(group) if p["status"].get("phase") == "Running"]

    def node_kind(self, pod: dict[str, Any]) -> str:
        """CPU or GPU: the kind of node the pod is bound to ("" when unbound)."""
        return self.node_kinds.get(pod["spec"].get("nodeName") or "", "")

    # --- the timeline -------------------------------------------------------------------

    def _record(self) -> None:
        # A watch ends when the API server restarts (a scenario may do that): start over
        # with a new list; what was seen already is recorded once.
        while not self._closed.is_set():
            try:
                listing = self.api.get(self.pods_path)
                for pod in listing["items"]:
                    self._observe("ADDED", pod)
                version = listing["metadata"]["resourceVersion"]
                for kind, pod in self.api.watch(self.pods_path, version, timeout_seconds=60):
                    if self._closed.is_set():
                        return
                    self._observe(kind, pod)
            except (ApiError, ValueError):  # no answer, a broken stream: list again
                self._closed.wait(0.5)

    def _observe(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
        t = self.now()
        with self._lock:
            history = self.pods.get(meta["name"])
            if history is None:
                group = meta.get("labels", {}).get("ray.io/group", meta["name"])
                history = self.pods[meta["name"]] = PodHistory(meta["name"], group, t)
            if spec.get("nodeName") and history.bound is None:
                history.node, history.bound = spec["nodeName"], t
            if status.get("phase") == "Running" and history.running is None:
                history.running = t
            for condition in status.get("conditions") or []:
                if (condition["type"] == "DisruptionTarget" and condition["status"] == "True"
                        and history.disrupted is None):
                    history.disruption, history.disrupted = condition.get("reason"), t
                if (condition["type"] == "PodScheduled" and condition["status"] == "False"
                        and condition.get("message")):
                    history.pending_reason = condition["message"]
                    if history.unschedulable is None:
                        history.unschedulable = t
            if meta.get("deletionTimestamp") and history.deleting is None:
                history.deleting = t
            if kind == "DELETED":
                history.deleted = t
        for observer in self.observers:
            observer(kind, pod)

    def history(self) -> list[PodHistory]:
        with self._lock:
            return sorted(self.pods.values(), key=lambda h: h.created)

    def timeline(self, title: str) -> str:
        """The scenario as markdown: its steps, then each pod's life."""
        def at(value: float | None) -> str:
            return "" if value is None else f"{value:.1f}"

        lines = [f"### {title}", "", "| t (s) | step |", "|---:|---|"]
        lines += [f"| {t:.1f} | {text} |" for t, text in self.steps]
        lines += ["", "| pod | group | created | bound to | at | running | disruption | "
                  "terminating | gone |", "|---|---|---:|---|---:|---:|---|---:|---:|"]
        for h in self.history():
            short = (h.node or "").removeprefix(f"{self.name}-")
            where = f"{short} ({self.node_kinds.get(h.node, '?')})" if h.node else (
                f"pending: {h.pending_reason}" if h.pending_reason else "")
            disruption = f"{h.disruption} at {h.disrupted:.1f}" if h.disrupted else ""
            lines.append(f"| {h.name} | {h.group} | {h.created:.1f} | {where} | {at(h.bound)} "
                         f"| {at(h.running)} | {disruption} | {at(h.deleting)} "
                         f"| {at(h.deleted)} |")
        return "\n".join(lines) + "\n"

    def scenario_nodes(self) -> str:
        return f"{SCENARIO_LABEL}={self.name}"
