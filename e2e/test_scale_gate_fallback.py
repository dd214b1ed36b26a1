"""The fast fallback on the real components: raygate's scale gate moves Ray's demand from a
worker group that gets no node to the next one at once, where Ray 2.60's stock autoscaler
waits for its ALLOCATED timeout (issue #40, item 4).

Ray 2.60's autoscaler v2 (stock, or under ``raygate-autoscaler``), the real Karpenter 1.15
(kwok provider), KubeRay 1.6.1 with the testbed's stand-in CRD (worker-group ``priority``
and ``scaleStrategy.scaleGate`` keyed by ``type``), kube-scheduler with raygate. The
RayCluster: a head on a static node of the scenario, and two CPU-only worker groups of
the same shape (2 CPU, 4Gi), so Ray's utilization score ties and ``priority`` decides:

- ``large``, priority 10: its pods select the NodePool ``large-<scenario>``, whose
  ``limits`` are ``cpu: 0``. Karpenter says ``FailedScheduling`` ("all available instance
  types exceed limits for nodepool"), raygate's admission status says ``NoNodeComing``
  and its leader writes ``raygate.io/no-node-coming`` on the group;
- ``small``, priority 0: the NodePool ``small-<scenario>``, with room.

Demand: one bundle of 2 CPU (``request_resources``). Measured on each side: the seconds
from the demand to a ``small`` pod Running on a node Karpenter bought. Ray's ALLOCATED
timeout (``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S``) is ``TIMEOUT`` on both
sides; Ray 2.60's default is ``DEFAULT_TIMEOUT``. Then, under ``raygate-autoscaler``, the
limit is lifted: Karpenter buys a node, the waiting ``large`` pod binds, raygate removes its
gate, and new demand goes to ``large``. The raylets of the ``small`` worker and then of
that ``large`` one are started locally once their pods run, as their containers would:
Ray replaces a pod that runs no Ray at its timeout.

What the stock autoscaler does (seen, and asserted): it moves on at the timeout, not
before. The instance goes ``ALLOCATION_TIMEOUT``, its pod is deleted, Ray's
``CloudResourceMonitor`` ranks ``large`` down, and ``small`` is launched in the same loop.

The foreign gate. Any writer's gate closes a group to ``raygate-autoscaler``, so one on
``large`` before the demand would move the demand itself and leave nothing of raygate's to
measure. Read here as: another controller (``example.com/maintenance``, written with JSON
Patch under its own field manager, as Kueue writes its gate) puts its gate on ``large``
once raygate's is there and the fallback is measured, and it stays through every later
write to the group's gates (raygate's removal among them: every version of the gates a
watch sees holds it) until its owner, the test, removes it before the new demand.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import report
from e2e.admission import AdmissionRecorder
from e2e.nodeclaims import NodeClaims, clear_scenario
from e2e.objects import SCENARIO_LABEL, Group, node, raycluster
from e2e.ray import TIMEOUT, RayCluster, ray_cluster, request
from e2e.scenario import PodHistory, Scenario, wait_until
from raygate.policy.admission.gates import NO_NODE_COMING
from raygate.ray_autoscaler.gates import gates_of
from testbed.api import ApiError
from testbed.cluster import Testbed
from testbed.karpenter import NODEPOOLS, POOL_LABEL, Karpenter, node_pool
from testbed.kuberay_standin import GATE_KEY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLUSTER = "work"  # the name ray_cluster's autoscaler and role binding use
DEFAULT_TIMEOUT = 3600  # Ray 2.60's default for it
FOREIGN = "example.com/maintenance"
PRIORITIES = {"large": 10, "small": 0}
CPU = 2  # one worker of either group
QUICK = {"terminationGracePeriodSeconds": 1}  # the scenario's pods go at once at the end
# How long a wait may take on a loaded machine: bounds, never what is measured.
SLOW = 120.0
MEASURED: dict[str, float | None] = {}
"""The stock side's seconds from the demand to a running small worker, for the raygate
side's report (None: none within its wait)."""


def pool(scenario: Scenario, group: str) -> str:
    return f"{group}-{scenario.name}"


def fallback_raycluster(scenario: Scenario) -> dict[str, Any]:
    groups = [Group(name, 0, str(CPU), min=0, max=3, pod_spec={**QUICK, "nodeSelector": {
        SCENARIO_LABEL: scenario.name, POOL_LABEL: pool(scenario, name)}})
        for name in PRIORITIES]
    body = raycluster(CLUSTER, scenario.namespace, scenario.name, groups, head_cpu="1",
                      head_pod_spec=QUICK)
    body["spec"]["autoscalerOptions"] = {"version": "v2"}
    body["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    for group in body["spec"]["workerGroupSpecs"]:
        group["priority"] = PRIORITIES[group["groupName"]]
    return body


@pytest.fixture
def claims(scenario: Scenario, karpenter: Karpenter) -> Iterator[NodeClaims]:
    """A static node for the head; the NodePools ``large-…`` (at its limit: cpu 0) and
    ``small-…``; a recorder of their NodeClaims. Afterwards the pods and pools go."""
    scenario.setup([node(f"{scenario.name}-head", scenario.name, cpu=4)])
    recorder = NodeClaims(scenario, karpenter)
    scope = {SCENARIO_LABEL: scenario.name}
    karpenter.create_pools([node_pool(pool(scenario, "large"), scope, ["cpu-4x"], cpu_limit=0),
                            node_pool(pool(scenario, "small"), scope, ["cpu-4x"])])
    scenario.step("NodePools large (limit cpu 0) and small Ready, no node")
    yield recorder
    recorder.close()
    clear_scenario(scenario, karpenter)


class GateHistory:
    """Every version of the RayCluster's scale gates a watch sees: (t, gates by group)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.seen: list[tuple[float, dict[str, tuple[str, ...]]]] = []
        self._closed = threading.Event()
        threading.Thread(target=self._run, name=f"gates-{scenario.name}", daemon=True).start()

    def close(self) -> None:
        self._closed.set()

    def _run(self) -> None:
        api = self.scenario.testbed.api()  # one client per thread
        path = f"/apis/ray.io/v1/namespaces/{self.scenario.namespace}/rayclusters"
        while not self._closed.is_set():
            try:
                listing = api.get(path)
                for item in listing["items"]:
                    self._observe(item)
                for _, item in api.watch(path, listing["metadata"]["resourceVersion"],
                                         timeout_seconds=60):
                    if self._closed.is_set():
                        return
                    self._observe(item)
            except (ApiError, ValueError):  # no answer, a broken stream: list again
                self._closed.wait(0.5)

    def _observe(self, cluster: dict[str, Any]) -> None:
        gates = gates_of(cluster)
        if not self.seen or self.seen[-1][1] != gates:
            self.seen.append((self.scenario.now(), gates))

    def of(self, group: str) -> list[tuple[float, set[str]]]:
        return [(t, set(gates.get(group, ()))) for t, gates in list(self.seen)]

    def when(self, group: str, gate: str, *, on: bool = True, after: float = 0.0
             ) -> float | None:
        """When ``gate`` was first seen on ``group`` (``on``), or off it, from ``after``."""
        return next((t for t, gates in self.of(group) if t >= after and (gate in gates) == on),
                    None)

    def wait(self, group: str, gate: str, *, on: bool = True, after: float = 0.0) -> float:
        return wait_until(f"{gate} {'on' if on else 'off'} {group}", lambda: self.when(
            group, gate, on=on, after=after), timeout=SLOW)

    def table(self) -> str:
        lines = ["", "| t (s) | gates on large | gates on small |", "|---:|---|---|"]
        lines += [f"| {t:.1f} | {', '.join(sorted(gates.get('large', ()))) or '-'} "
                  f"| {', '.join(sorted(gates.get('small', ()))) or '-'} |"
                  for t, gates in list(self.seen)]
        return "\n".join(lines) + "\n"


def cluster_path(scenario: Scenario) -> str:
    return f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{CLUSTER}"


def foreign_gate(scenario: Scenario, *, add: bool) -> None:
    """Another controller's gate on ``large``, added or removed by JSON Patch under its own
    field manager, each step tested where it stands (raygate's gate is there already)."""
    groups = scenario.api.get(cluster_path(scenario))["spec"]["workerGroupSpecs"]
    index = next(i for i, g in enumerate(groups) if g["groupName"] == "large")
    gates = f"/spec/workerGroupSpecs/{index}/scaleStrategy/scaleGate"
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"/spec/workerGroupSpecs/{index}/groupName", "value": "large"}]
    if add:
        ops.append({"op": "add", "path": f"{gates}/-", "value": {GATE_KEY: FOREIGN}})
    else:
        at = [e[GATE_KEY] for e in groups[index]["scaleStrategy"]["scaleGate"]].index(FOREIGN)
        ops += [{"op": "test", "path": f"{gates}/{at}/{GATE_KEY}", "value": FOREIGN},
                {"op": "remove", "path": f"{gates}/{at}"}]
    scenario.api.request("PATCH", cluster_path(scenario), ops, "application/json-patch+json",
                         query=[("fieldManager", "example")])
    scenario.step(f"{'added' if add else 'removed'} {FOREIGN} on large (field manager example)")


def pods_of(scenario: Scenario, group: str) -> list[PodHistory]:
    return [h for h in scenario.history() if h.group == group]


def running(scenario: Scenario, group: str, wait: float) -> PodHistory | None:
    """The first pod of ``group`` to run within ``wait`` seconds, else None."""
    try:
        return wait_until(f"a {group} pod running", lambda: next(
            (h for h in pods_of(scenario, group) if h.running is not None), None),
            timeout=wait, every=0.2)
    except AssertionError:
        return None


def seconds(value: float | None, within: float) -> str:
    return f"{value:.1f} s" if value is not None else f"none within {within:.0f} s"


def test_stock_autoscaler_holds_large_until_the_allocated_timeout(
        scenario: Scenario, testbed: Testbed, claims: NodeClaims) -> None:
    gates = GateHistory(scenario)
    try:
        with ray_cluster(scenario, testbed, raygate=False, set_up=False,
                         body=fallback_raycluster(scenario), demand=[{"CPU": CPU}],
                         allocate_timeout=TIMEOUT, first="large") as ray:
            small = running(scenario, "small", TIMEOUT + SLOW)
            scenario.step("a small pod running" if small else "no small pod running")
            decisions = ray.decisions(scenario, PRIORITIES)
    finally:
        gates.close()
    large = pods_of(scenario, "large")[0]
    took = MEASURED["stock"] = (None if small is None or small.running is None
                                else small.running - ray.demanded)
    gated = gates.when("large", NO_NODE_COMING)
    report.add("scale-gate-fallback-1-stock", scenario.timeline(
        f"Scale-gate fallback, Ray 2.60's stock autoscaler: it holds `large` until its "
        f"ALLOCATED timeout ({TIMEOUT} s here, {DEFAULT_TIMEOUT} s by default), deletes its "
        f"pod, ranks `large` down and launches `small`: demand to a running small worker "
        f"{seconds(took, TIMEOUT + SLOW)}; raygate's gate, which it does not read, came "
        f"{seconds(None if gated is None else gated - ray.demanded, SLOW)} after the demand")
        + claims.timeline() + gates.table() + decisions)
    assert gated is not None, "raygate gates large whichever autoscaler runs"
    assert large.bound is None, "no node comes for large"
    assert small is not None and large.deleting is not None and took is not None
    assert large.deleting - large.created >= TIMEOUT - 5 and small.created > large.deleting, (
        "the stock autoscaler waits out its ALLOCATED timeout on large, then tries small")


def fall_back(scenario: Scenario, ray: RayCluster, gates: GateHistory) -> dict[str, float]:
    """raygate's gate on ``large``, the demand on ``small``: the small worker's raylet
    started once its pod runs (as its container would), then the foreign gate added."""
    gated = gates.wait("large", NO_NODE_COMING)
    scenario.step(f"raygate's {NO_NODE_COMING} on large")
    small = running(scenario, "small", SLOW)
    assert small is not None and small.running is not None, "the demand goes to small"
    scenario.step(f"{small.name} running")
    ray.add_worker(small.name, "small", cpu=CPU)
    scenario.step(f"raylet of {small.name} joined")
    foreign_gate(scenario, add=True)
    return {"gated": gated, "small created": small.created, "small": small.running,
            "foreign": gates.wait("large", FOREIGN)}


def lift(scenario: Scenario, ray: RayCluster, gates: GateHistory,
         karpenter: Karpenter) -> dict[str, float]:
    """The NodePool's limit lifted: the waiting ``large`` pod binds (its raylet started),
    raygate removes its gate; the foreign gate removed by its owner; new demand."""
    large = pods_of(scenario, "large")[0]
    karpenter.api().json_patch(f"{NODEPOOLS}/{pool(scenario, 'large')}", [
        {"op": "replace", "path": "/spec/limits/cpu", "value": "64"}])
    lifted = scenario.now()
    scenario.step("NodePool large: limit cpu 64")
    removed = gates.wait("large", NO_NODE_COMING, on=False, after=lifted)
    scenario.step(f"raygate's {NO_NODE_COMING} removed")
    wait_until(f"{large.name} bound", lambda: large.bound, timeout=SLOW)
    scenario.step(f"{large.name} bound")
    ray.add_worker(large.name, "large", cpu=CPU)
    scenario.step(f"raylet of {large.name} joined")
    foreign_gate(scenario, add=False)
    cleared = gates.wait("large", FOREIGN, on=False, after=lifted)
    again = request(ray.gcs, [{"CPU": CPU}] * 3) - scenario.started
    scenario.steps.append((again, f"requested 3 × {CPU} CPU (2 workers running)"))
    new = wait_until("a new large pod", lambda: next(
        (h for h in pods_of(scenario, "large") if h.name != large.name), None), timeout=SLOW)
    scenario.step(f"{new.name} created")
    assert large.bound is not None
    return {"lifted": lifted, "removed": removed, "bound": large.bound, "cleared": cleared,
            "again": again, "new": new.created}


def test_raygate_gate_moves_the_demand_to_small_at_once(
        scenario: Scenario, testbed: Testbed, claims: NodeClaims, karpenter: Karpenter,
        reader_token: str) -> None:
    gates = GateHistory(scenario)
    admission = AdmissionRecorder(testbed.raygate_grpc, reader_token, scenario.namespace,
                                  scenario.started)
    try:
        with ray_cluster(scenario, testbed, raygate=True, set_up=False,
                         body=fallback_raycluster(scenario), demand=[{"CPU": CPU}],
                         allocate_timeout=TIMEOUT, first="large") as ray:
            at = {"demand": ray.demanded} | fall_back(scenario, ray, gates)
            at |= lift(scenario, ray, gates, karpenter)
            decisions = ray.decisions(scenario, PRIORITIES)
    finally:
        gates.close()
        admission.close()
    large, small = pods_of(scenario, "large"), pods_of(scenario, "small")
    at["nominated"] = next(t for t, pod, reason, _ in claims.pod_events()
                           if pod == large[0].name and reason == "Nominated")
    report.add("scale-gate-fallback-2-raygate", summary(at) + scenario.timeline(
        "Scale-gate fallback under raygate-autoscaler") + claims.timeline() + gates.table()
        + decisions + "\nraygate's admission API about the pods:\n\n" + admission.table())
    assert "NoNodeComing" in admission.states(large[0].name)
    assert at["small created"] < large[0].created + TIMEOUT, (
        "the demand goes to small at raygate's gate, before Ray's timeout would move it")
    assert large[0].deleting is None, "the large pod is kept while it waits: it runs later"
    assert len(small) == 1 and len(large) == 2, "one small worker; the new demand on large"
    held = [g for t, g in gates.of("large") if at["foreign"] <= t < at["cleared"]]
    assert held and all(FOREIGN in g for g in held), "the foreign gate stays through it all"
    assert at["removed"] < at["cleared"], "raygate removed its gate beside the foreign one"


def summary(at: dict[str, float]) -> str:
    """The numbers, beside the stock side's when it ran in this session."""
    took = at["small"] - at["demand"]
    stock = seconds(MEASURED["stock"], TIMEOUT + SLOW) if "stock" in MEASURED else "not run"
    return (
        "### Scale gates: the fallback on Karpenter, stock autoscaler against raygate's gate\n\n"
        f"Two CPU-only groups of one shape: `large` (priority 10, its NodePool at `limits` "
        f"cpu 0) and `small` (priority 0). From the demand (one 2-CPU bundle) to a running "
        f"`small` worker: **{took:.1f} s** under `raygate-autoscaler` with raygate's "
        f"`{NO_NODE_COMING}` (written {at['gated'] - at['demand']:.1f} s after the demand); "
        f"**{stock}** under Ray 2.60's stock autoscaler on the same setup, with Ray's "
        f"ALLOCATED timeout at {TIMEOUT} s (set by the test; its default is "
        f"{DEFAULT_TIMEOUT} s). The limit lifted: Karpenter nominated a node for the "
        f"waiting `large` pod {at['nominated'] - at['lifted']:.1f} s later, raygate removed "
        f"its gate {at['removed'] - at['nominated']:.1f} s after that, the pod was bound "
        f"{at['bound'] - at['lifted']:.1f} s after the lift; new demand made a new `large` "
        f"pod {at['new'] - at['again']:.1f} s after it was stated. `{FOREIGN}`, written under "
        f"another field manager once raygate's gate was on, stayed in every version of the "
        f"group's gates until the test removed it.\n\n")
