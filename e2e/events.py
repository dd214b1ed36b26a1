"""raygate's Events as the real kube-apiserver stores them and ``kubectl describe`` shows
them."""

from __future__ import annotations

from typing import Any

from e2e.scenario import Scenario, wait_until

REPORTING_CONTROLLER = "raygate.io/raygate"
Obj = dict[str, Any]


def raygate_events(scenario: Scenario, kind: str, name: str) -> list[Obj]:
    """raygate's Events about the object, oldest first."""
    items = scenario.api.items(f"/apis/events.k8s.io/v1/namespaces/{scenario.namespace}/events")
    return sorted((e for e in items if e.get("reportingController") == REPORTING_CONTROLLER
                   and e["regarding"]["kind"] == kind and e["regarding"]["name"] == name),
                  key=lambda e: e["eventTime"])


def told_reasons(scenario: Scenario, kind: str, name: str) -> list[str]:
    return [e["reason"] for e in raygate_events(scenario, kind, name)]


def wait_for_reason(scenario: Scenario, kind: str, name: str, reason: str,
                    timeout: float = 30, *, count: int = 1) -> list[Obj]:
    """raygate's ``count`` Events of ``reason`` about the object, once they are there."""
    def told() -> list[Obj] | None:
        found = [e for e in raygate_events(scenario, kind, name) if e["reason"] == reason]
        return found if len(found) >= count else None

    found: list[Obj] = wait_until(f"{count} {reason} on {kind} {name}", told, timeout=timeout)
    return found


def described(scenario: Scenario, kind: str, name: str) -> str:
    """The ``Events:`` part of ``kubectl describe``, as an operator reads it."""
    out = scenario.testbed.kubectl("describe", kind.lower(), name, "-n",
                                   scenario.namespace).stdout
    return out[out.index("Events:"):].rstrip() if "Events:" in out else "(no Events: part)"
