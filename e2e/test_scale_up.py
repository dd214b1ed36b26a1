"""The all-or-nothing scale-up (``raygate.io/scale-up: all-or-nothing``) on the real Ray
autoscaler (Ray 2.60, v2, under ``raygate-autoscaler``), KubeRay and kube-scheduler, no
node autoscaler: the Ray autoscaler asks for four 2-CPU workers at once on a cluster with
room for one. raygate holds all four at its gate, past Ray's ALLOCATED timeout (30 s), and
the admission API says what the batch waits for; a node with room comes and the four are
released in one pass and bound. (With a node autoscaler: ``test_karpenter_seed.py``.)

raygate's policy says ``nodeAutoscaler: absent`` for this scenario: a suite that ran the
Karpenter scenarios first leaves Karpenter's CRDs served, which ``auto`` reads as Karpenter
running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.admission import AdmissionRecorder
from e2e.events import described, told_reasons, wait_for_reason
from e2e.lagging import metric
from e2e.objects import Group, node, raycluster
from e2e.policy import policy_changed
from e2e.ray import LOOP, TIMEOUT, ray_cluster
from e2e.scenario import Scenario, wait_until
from e2e.test_autoscaler import overflow, per_minute
from raygate.policy.native import LABEL_ROLE
from raygate.policy.scale_up import ALL_OR_NOTHING, ANNOTATION
from testbed.cluster import Testbed

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKERS = 4
SPREAD = 2.0
"""Seconds within which the releases of one batch must all be seen: raygate sends them in
one pass of its loop, a few patches in parallel; anything wider is two passes."""


class Releases:
    """When each pod was first seen released by raygate (labelled with its role), from the
    scenario's pod watch."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.at: dict[str, float] = {}
        self._lock = threading.Lock()
        scenario.observers.append(self._observe)

    def _observe(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if LABEL_ROLE in (meta.get("labels") or {}):
            with self._lock:
                self.at.setdefault(meta["name"], self.scenario.now())

    def of(self, names: list[str]) -> list[float]:
        with self._lock:
            return [self.at[n] for n in names if n in self.at]

    def table(self, names: list[str]) -> str:
        with self._lock:
            rows = [f"| {n} | {self.at[n]:.1f} |" if n in self.at else f"| {n} | held |"
                    for n in names]
        return "| pod | released at (s) |\n|---|---:|\n" + "\n".join(rows) + "\n"


def scale_up_pods(scenario: Scenario) -> list[str]:
    """The names of the scale-up's workers, once KubeRay made all of them."""
    names = wait_until(f"{WORKERS} overflow pods", lambda: (
        [h.name for h in overflow(scenario)] if len(overflow(scenario)) >= WORKERS
        else None), timeout=60)
    scenario.step(f"{WORKERS} overflow pods created")
    return names


def bound(scenario: Scenario, pods: list[str], timeout: float) -> None:
    wait_until("all of them bound", lambda: all(
        h.bound for h in overflow(scenario) if h.name in pods), timeout=timeout)
    scenario.step("all of them bound")


def released_whole(releases: Releases, pods: list[str], after: float) -> None:
    """Every pod released, in one pass of raygate's loop, after ``after``; none of the
    scale-up deleted and recreated on the way."""
    released = releases.of(pods)
    assert len(released) == len(pods) and min(released) >= after, (released, after)
    assert max(released) - min(released) < SPREAD, f"one release of the batch: {released}"
    assert [h.name for h in overflow(releases.scenario)] == pods, "none deleted and recreated"


def all_or_nothing_raycluster(scenario: Scenario) -> dict[str, Any]:
    """A 1-CPU head (Ray gets none of it) and ``overflow``: 0..4 workers of 2 CPU, all
    surplus, released all or nothing."""
    body = raycluster("work", scenario.namespace, scenario.name,
                      [Group("overflow", 0, "2", min=0, max=WORKERS)], head_cpu="1")
    body["metadata"]["annotations"] = {ANNOTATION: ALL_OR_NOTHING}
    body["spec"]["autoscalerOptions"] = {"version": "v2", "upscalingMode": "Aggressive"}
    body["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    return body


@pytest.fixture
def no_node_autoscaler(testbed: Testbed) -> Iterator[None]:
    with policy_changed(testbed, lambda policy: policy.update(nodeAutoscaler="absent")):
        yield


def told_while_held(scenario: Scenario, pods: list[str]) -> str:
    """kubectl describe tells the admission API's story: the batch held on the RayCluster,
    each pod held; returns what it shows."""
    (held,) = wait_for_reason(scenario, "RayCluster", "work", "ScaleUpHeld")
    assert "held together until all fit: 1 of 4" in held["note"]
    assert held["type"] == "Normal" and held["action"] == "HoldScaleUp"
    for name in pods:
        wait_for_reason(scenario, "Pod", name, "Held")
    return described(scenario, "RayCluster", "work") + "\n\n" + described(
        scenario, "Pod", pods[0])


def told_once_released(scenario: Scenario, pods: list[str]) -> str:
    """The batch released on the RayCluster, each pod held then released."""
    wait_for_reason(scenario, "RayCluster", "work", "ScaleUpReleased")
    told = {name: told_reasons(scenario, "Pod", name) for name in pods}
    assert told == {name: ["Held", "Released"] for name in pods}
    return described(scenario, "Pod", pods[0])


def test_a_scale_up_is_held_whole_then_released_whole(
        scenario: Scenario, testbed: Testbed, reader_token: str,
        no_node_autoscaler: None) -> None:
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    releases = Releases(scenario)
    try:
        with ray_cluster(scenario, testbed, raygate=True,
                         body=all_or_nothing_raycluster(scenario),
                         demand=[{"CPU": 2}] * WORKERS) as ray:
            pods = scale_up_pods(scenario)
            for name in pods:
                admission.wait_for_state(name, "WaitingForCapacity", timeout=30)
            scenario.step("raygate's admission API: all held, WaitingForCapacity")
            time.sleep(max(overflow(scenario)[0].created + TIMEOUT + 2 * LOOP - scenario.now(), 0))
            scenario.step(f"watched past Ray's ALLOCATED timeout ({TIMEOUT} s) and a loop")
            assert releases.of(pods) == [], "one fits, four asked: none may go"
            assert not any(h.deleting for h in overflow(scenario)), "held pods are kept"
            held = admission.status("work")
            told_held = told_while_held(scenario, pods)
            held_pods = metric(testbed.raygate_url, "raygate_scale_up_held_pods",
                               namespace=scenario.namespace, raycluster="work")
            batches = metric(testbed.raygate_url, "raygate_scale_up_releases_total",
                             trigger="fits")
            added = scenario.now()
            scenario.add_node(node(f"{scenario.name}-cpu-b", scenario.name, cpu=8))
            scenario.step("added an 8-CPU node: room for all four")
            bound(scenario, pods, timeout=60)
            told_released = told_once_released(scenario, pods)
            decisions = ray.decisions(scenario)
            batches = metric(testbed.raygate_url, "raygate_scale_up_releases_total",
                             trigger="fits") - batches
    finally:
        admission.close()
    released_whole(releases, pods, after=added)
    assert (held_pods, batches) == (WORKERS, 1), "raygate's metrics: four held, one batch"
    assert held is not None
    reasons = {p.reason for p in held.pods if p.name in pods}
    assert len(reasons) == 1 and "held together until all fit: 1 of 4" in reasons.pop()
    group = next(g for g in held.groups if g.name == "overflow")
    assert group.scale_up.action == "hold", group
    report.add("scale-up-1-held", scenario.timeline(
        "All-or-nothing scale-up, no node autoscaler: the Ray autoscaler asks for four "
        "workers, one fits; raygate holds all four past Ray's timeout, then releases them "
        "in one pass when a node with room comes")
        + "\nraygate's releases:\n\n" + releases.table(pods)
        + per_minute(scenario) + decisions
        + "\nraygate's admission API about the RayCluster's pods:\n\n" + admission.table()
        + "\n`kubectl describe` while held:\n\n```\n" + told_held
        + "\n```\n\nand once released:\n\n```\n" + told_released + "\n```\n")
