"""What Karpenter did in a scenario: each NodeClaim's life and the events Karpenter wrote
on the scenario's pods, both from watches (a claim that came and went is recorded too,
and an event at the time it was seen).

Karpenter copies its NodePool's template labels onto each NodeClaim, so the scenario's
label (``testbed.raygate.dev/scenario``, on every pool a scenario makes) picks its claims.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from e2e.objects import SCENARIO_LABEL
from e2e.scenario import Scenario
from testbed.api import ApiError
from testbed.karpenter import GPU_LABELS, NODECLAIMS, POOL_LABEL, Karpenter, wrote_on_pod

__all__ = ["ClaimHistory", "NodeClaims"]

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# NodeClaim conditions in the order Karpenter sets them: the instance exists, its node
# joined, the node is Ready with its resources registered.
STAGES = ("Launched", "Registered", "Initialized")


@dataclass
class ClaimHistory:
    name: str
    pool: str
    created: float
    instance_type: str = ""
    node: str = ""
    gpu: bool = False
    """From its pool's GPU labels, which the claim and its node carry."""
    stages: dict[str, float] = field(default_factory=dict)
    """When each of ``STAGES`` was first seen True."""
    deleting: float | None = None
    deleted: float | None = None

    @property
    def kind(self) -> str:
        return "GPU" if self.gpu else "CPU"

    def at(self, stage: str) -> float | None:
        return self.stages.get(stage)


class NodeClaims:
    """Records the scenario's NodeClaims from a watch until ``close()``; also names the
    nodes they bring (CPU or GPU) in the scenario's pod timeline."""

    def __init__(self, scenario: Scenario, karpenter: Karpenter) -> None:
        self.scenario = scenario
        self.karpenter = karpenter
        self.claims: dict[str, ClaimHistory] = {}
        self.events: list[tuple[float, str, str, str]] = []
        """(t, pod, reason, message) of each event Karpenter wrote on the scenario's pods."""
        self._seen_events: set[str] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"claims-{scenario.name}",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _run(self) -> None:
        events = threading.Thread(target=self._follow, args=(self._events_path, self._said),
                                  name=f"karpenter-events-{self.scenario.name}", daemon=True)
        events.start()
        self._follow(NODECLAIMS, self._observe)

    @property
    def _events_path(self) -> str:
        return f"/api/v1/namespaces/{self.scenario.namespace}/events"

    def _follow(self, path: str, observe: Callable[[str, dict[str, Any]], None]) -> None:
        """List, then watch ``path`` until ``close()``; a broken watch lists again (what
        was seen already is recorded once)."""
        api = self.karpenter.api()  # one client per thread
        while not self._closed.is_set():
            try:
                listing = api.get(path)
                for item in listing["items"]:
                    observe("ADDED", item)
                version = listing["metadata"]["resourceVersion"]
                for kind, item in api.watch(path, version, timeout_seconds=60):
                    if self._closed.is_set():
                        return
                    observe(kind, item)
            except (ApiError, ValueError):  # no answer, a broken stream: list again
                self._closed.wait(0.5)

    def _said(self, kind: str, event: dict[str, Any]) -> None:
        """Karpenter's events on pods, at the time they were seen (an Event's own
        timestamps are whole seconds). Karpenter writes each reason once per pod in a
        while (it dedupes for minutes), so the first sight is the one that counts."""
        if kind == "DELETED" or not wrote_on_pod(event):
            return
        key = event["metadata"]["uid"]
        with self._lock:
            if key not in self._seen_events:
                self._seen_events.add(key)
                self.events.append((self.scenario.now(), event["involvedObject"]["name"],
                                    event.get("reason", ""), event.get("message", "")))

    def _observe(self, kind: str, claim: dict[str, Any]) -> None:
        meta, status = claim["metadata"], claim.get("status") or {}
        labels = meta.get("labels") or {}
        if labels.get(SCENARIO_LABEL) != self.scenario.name:
            return
        t = self.scenario.now()
        with self._lock:
            history = self.claims.get(meta["name"])
            if history is None:
                history = self.claims[meta["name"]] = ClaimHistory(
                    meta["name"], labels.get(POOL_LABEL, ""), t, stages={})
            history.instance_type = labels.get(INSTANCE_TYPE) or history.instance_type
            history.gpu = all(labels.get(k) == v for k, v in GPU_LABELS.items())
            if status.get("nodeName") and not history.node:
                history.node = status["nodeName"]
                self.scenario.node_kinds[history.node] = history.kind
            for condition in status.get("conditions") or []:
                if condition["type"] in STAGES and condition["status"] == "True":
                    history.stages.setdefault(condition["type"], t)
            if meta.get("deletionTimestamp") and history.deleting is None:
                history.deleting = t
            if kind == "DELETED":
                history.deleted = t

    def history(self) -> list[ClaimHistory]:
        with self._lock:
            return sorted(self.claims.values(), key=lambda h: h.created)

    def initialized(self) -> list[ClaimHistory]:
        return [h for h in self.history() if h.at("Initialized") is not None]

    def pod_events(self) -> list[tuple[float, str, str, str]]:
        with self._lock:
            return sorted(self.events)

    def nominated(self, pod: str) -> list[str]:
        """What Karpenter's ``Nominated`` events on ``pod`` say it should schedule on."""
        return [message.removeprefix("Pod should schedule on: ")
                for _, name, reason, message in self.pod_events()
                if name == pod and reason == "Nominated"]

    def timeline(self) -> str:
        """The NodeClaims and Karpenter's words, as markdown (after the pods' timeline)."""
        def at(value: float | None) -> str:
            return "" if value is None else f"{value:.1f}"

        lines = ["", "| NodeClaim | pool | instance type | created | launched | registered "
                 "| initialized | deleting | gone |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {h.name} | {h.pool} | {h.instance_type} ({h.kind}) | {at(h.created)} "
                  f"| {at(h.at('Launched'))} | {at(h.at('Registered'))} "
                  f"| {at(h.at('Initialized'))} | {at(h.deleting)} | {at(h.deleted)} |"
                  for h in self.history()]
        if not self.claims:
            lines.append("| (none) | | | | | | | | |")
        lines += ["", "| t (s) | pod | Karpenter's event | message |", "|---:|---|---|---|"]
        lines += [f"| {t:.1f} | {pod} | {reason} | {message.replace('|', '/')} |"
                  for t, pod, reason, message in self.pod_events()]
        return "\n".join(lines) + "\n"


def clear_scenario(scenario: Scenario, karpenter: Karpenter) -> None:
    """After a Karpenter scenario: its RayClusters, pods and NodePools deleted, not waited
    for (Karpenter deletes the nodes in the background; its fixture waits at the end)."""
    kubectl = scenario.testbed.kubectl
    kubectl("delete", "raycluster", "--all", "-n", scenario.namespace, "--wait=false")
    # A second's grace, not the pods' 30: Karpenter deletes a node once its pods are gone
    # (kwok keeps a deleted pod up to its grace), and the scenario is over.
    kubectl("delete", "pod", "--all", "-n", scenario.namespace, "--wait=false",
            "--grace-period=1")
    karpenter.delete_pools(f"{SCENARIO_LABEL}={scenario.name}")
