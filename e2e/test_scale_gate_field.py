"""The testbed's KubeRay 1.6.1 with the stand-in fields of later releases
(``testbed.kuberay_standin``): a worker group's ``priority`` (KubeRay 1.7) and its
``scaleStrategy.scaleGate`` (ray-project/kuberay#5094), and how the real API server and
the real KubeRay operator treat them.

1. KubeRay's reconcile keeps both through scale-ups, scale-downs and restarts of the
   operator: ``large`` (priority 10) carries a Kueue-style gate written by server-side
   apply under field manager ``kueue`` and a second controller's gate written by a guarded
   JSON Patch, as raygate writes its own (not a ``raygate.io/`` one: the testbed's raygate
   would take back a gate its policy does not want; ``test_scale_gates.py`` shows raygate's
   own); ``small`` leaves its priority to the CRD's default (0).
   ``workerGroupSpecs`` is an atomic list, so an apply of one group's gate alone is
   refused (409 without force, 422 with it: the list would be that one group), a forced
   apply of the whole list read before an autoscaler's write undoes that write, and the
   owner of the whole list changes with every writer.
2. Ray 2.60's own scale-down patch (``worker_delete_patch``, which its KubeRay provider
   sends) replaces a group's whole ``scaleStrategy``: every gate of that group goes.
3. KubeRay 1.6.1 writes a RayCluster's spec once, an Update that adds the GCS
   fault-tolerance finalizer; its Go types lack both fields, so that Update drops them
   (the priority falls back to the CRD's default). A KubeRay that has the fields keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from e2e import report
from e2e.objects import Group, node, raycluster
from e2e.scenario import Scenario, wait_until
from testbed.api import ApiError
from testbed.kuberay_standin import GATE_KEY

pytestmark = pytest.mark.e2e

CLUSTER = "fallback"
KUEUE_GATE = {GATE_KEY: "kueue.k8s.io/quota-exceeded"}
PATCHED_GATE = {GATE_KEY: "capacity.example.com/no-node-coming"}
PATCHER = "capacity-controller"
FT_FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"
Fields = dict[str, tuple[Any, list[dict[str, str]]]]
"""Each worker group's (priority, scale gates) as stored."""


def bring_up(scenario: Scenario, large: int, gates: list[dict[str, str]] | None = None,
             **spec: Any) -> dict[str, Any]:
    """Two 16-CPU nodes and the RayCluster ``CLUSTER``: ``large`` (priority 10, ``large``
    replicas, ``gates`` if given) and ``small`` (1 replica, no priority given), ``spec``
    merged into its spec; returns it as stored once KubeRay made every worker."""
    scenario.setup([node(f"{scenario.name}-{i}", scenario.name, cpu=16) for i in "ab"],
                   native_placement=False)
    body = raycluster(CLUSTER, scenario.namespace, scenario.name,
                      [Group("large", large, "2", max=4), Group("small", 1, "2", max=4)],
                      scheduler="default-scheduler")
    body["spec"]["autoscalerOptions"] = {"version": "v2"}  # what 1.7 asks of a priority
    body["spec"]["workerGroupSpecs"][0]["priority"] = 10
    if gates:
        body["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {"scaleGate": gates}
    body["spec"].update(spec)
    scenario.create(body)  # kubectl's strict field validation: the CRD serves both fields
    workers(scenario, "large", large)
    workers(scenario, "small", 1)
    return scenario.api.get(cluster_path(scenario))


def cluster_path(scenario: Scenario) -> str:
    return f"/apis/ray.io/v1/namespaces/{scenario.namespace}/rayclusters/{CLUSTER}"


def workers(scenario: Scenario, group: str, count: int) -> list[str]:
    """The names of ``group``'s live pods, once KubeRay has exactly ``count``."""
    def names() -> list[str] | None:
        pods = scenario.group_pods(group)
        return sorted(p["metadata"]["name"] for p in pods) if len(pods) == count else None
    if count == 0:
        wait_until(f"no {group} pod", lambda: not scenario.group_pods(group), timeout=90)
        return []
    return wait_until(f"{count} {group} pods", names, timeout=90)


def fields(cluster: dict[str, Any]) -> Fields:
    return {g["groupName"]: (g.get("priority"),
                             g.get("scaleStrategy", {}).get("scaleGate", []))
            for g in cluster["spec"]["workerGroupSpecs"]}


def list_owners(cluster: dict[str, Any]) -> list[str]:
    """The field managers (and their operation) that own ``spec.workerGroupSpecs``."""
    return sorted(f"{m['manager']} ({m['operation']})"
                  for m in cluster["metadata"].get("managedFields", [])
                  if "f:workerGroupSpecs" in json.dumps(m.get("fieldsV1", {})))


def apply(scenario: Scenario, manager: str, body: dict[str, Any], force: bool
          ) -> dict[str, Any]:
    """A server-side apply of ``body`` (the RayCluster's spec) under ``manager``."""
    return scenario.api.request(
        "PATCH", cluster_path(scenario), body, "application/apply-patch+yaml",
        query=[("fieldManager", manager), ("force", str(force).lower())])


def json_patch(scenario: Scenario, manager: str, ops: list[Any]) -> dict[str, Any]:
    return scenario.api.request("PATCH", cluster_path(scenario), ops,
                                "application/json-patch+json",
                                query=[("fieldManager", manager)])


def group_at(cluster: dict[str, Any], group: str) -> tuple[str, dict[str, Any]]:
    """``group``'s JSON Pointer and spec in ``cluster``."""
    index, spec = next((i, g) for i, g in enumerate(cluster["spec"]["workerGroupSpecs"])
                       if g["groupName"] == group)
    return f"/spec/workerGroupSpecs/{index}", spec


def apply_one_group(scenario: Scenario, force: bool) -> int:
    """What the API server answers an apply of ``large``'s gate alone (an HTTP status)."""
    body = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": CLUSTER, "namespace": scenario.namespace},
            "spec": {"workerGroupSpecs": [{"groupName": "large",
                                           "scaleStrategy": {"scaleGate": [KUEUE_GATE]}}]}}
    try:
        apply(scenario, "kueue", body, force)
    except ApiError as refused:
        return refused.status
    return 200


def failed_test_status(scenario: Scenario) -> int:
    """What a JSON Patch whose ``test`` fails is answered (an HTTP status)."""
    try:
        json_patch(scenario, PATCHER, [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}])
    except ApiError as refused:
        return refused.status
    return 200


def retried(what: str, write: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``write`` again while its precondition fails (409 for a stale resourceVersion, 422
    for a failed JSON Patch ``test``): KubeRay's status writes move the resourceVersion."""
    def attempt() -> dict[str, Any] | None:
        try:
            return write()
        except ApiError as failed:
            if failed.status in (409, 422):
                return None
            raise
    return wait_until(what, attempt, timeout=30)


def kueue_apply(scenario: Scenario, cluster: dict[str, Any], *, versioned: bool
                ) -> dict[str, Any]:
    """Kueue's gate on ``large`` as a server-side apply can write it while the list is
    atomic: the whole list of ``cluster`` with the gate added, forced (the list has other
    owners); ``versioned``: under ``cluster``'s resourceVersion, so that a concurrent
    write fails the apply instead of being undone by it."""
    groups = cluster["spec"]["workerGroupSpecs"]
    for group in groups:
        if group["groupName"] == "large":
            group.setdefault("scaleStrategy", {}).setdefault("scaleGate", []).append(KUEUE_GATE)
    metadata = {"name": CLUSTER, "namespace": scenario.namespace}
    if versioned:
        metadata["resourceVersion"] = cluster["metadata"]["resourceVersion"]
    body = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata,
            "spec": {"workerGroupSpecs": groups}}
    return apply(scenario, "kueue", body, force=True)


def kueue_gate(scenario: Scenario) -> dict[str, Any]:
    return retried("kueue's apply", lambda: kueue_apply(
        scenario, scenario.api.get(cluster_path(scenario)), versioned=True))


def gate_patch(cluster: dict[str, Any], group: str, gate: dict[str, str]) -> list[Any]:
    """A JSON Patch that adds ``gate`` to ``group``'s gates and changes nothing else:
    appended to the list where it exists (the group's name tested at its index); where
    it does not, the list (or ``scaleStrategy``) made, on the resourceVersion read only,
    as that ``add`` would replace one made meanwhile."""
    at, spec = group_at(cluster, group)
    ops = [{"op": "test", "path": f"{at}/groupName", "value": group}]
    strategy = spec.get("scaleStrategy")
    if strategy is not None and "scaleGate" in strategy:
        return [*ops, {"op": "add", "path": f"{at}/scaleStrategy/scaleGate/-", "value": gate}]
    ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion",
                   "value": cluster["metadata"]["resourceVersion"]})
    if strategy is None:
        return [*ops, {"op": "add", "path": f"{at}/scaleStrategy",
                       "value": {"scaleGate": [gate]}}]
    return [*ops, {"op": "add", "path": f"{at}/scaleStrategy/scaleGate", "value": [gate]}]


def guarded_patch(scenario: Scenario, gate: dict[str, str]) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        ops = gate_patch(scenario.api.get(cluster_path(scenario)), "large", gate)
        return json_patch(scenario, PATCHER, ops)
    return retried("the guarded JSON Patch", write)


def lost_update(scenario: Scenario) -> dict[str, Any]:
    """An apply of the whole list without a resourceVersion, made from a read that an
    autoscaler's replicas change (``small`` 1 to 2) came after: the change is undone."""
    stale = scenario.api.get(cluster_path(scenario))
    scale_to(scenario, "small", 2, wait=False)
    applied = kueue_apply(scenario, stale, versioned=False)
    # KubeRay may have made small's second worker meanwhile; with autoscaling on it
    # deletes only the workers it is told to.
    scale_down(scenario, "small", 1)
    return applied


def scale_to(scenario: Scenario, group: str, replicas: int, wait: bool = True) -> None:
    """A scale-up as the Ray autoscaler writes it: the group's replicas alone."""
    at, _ = group_at(scenario.api.get(cluster_path(scenario)), group)
    json_patch(scenario, "autoscaler", [
        {"op": "test", "path": f"{at}/groupName", "value": group},
        {"op": "replace", "path": f"{at}/replicas", "value": replicas}])
    scenario.step(f"scaled {group} to {replicas}")
    if wait:
        workers(scenario, group, replicas)


def scale_down(scenario: Scenario, group: str, keep: int) -> None:
    """A scale-down as an autoscaler that keeps the gates writes it: the replicas and
    ``scaleStrategy.workersToDelete`` alone (never the whole ``scaleStrategy``)."""
    at, spec = group_at(scenario.api.get(cluster_path(scenario)), group)
    victims = sorted(p["metadata"]["name"] for p in scenario.group_pods(group))[keep:]
    delete = ({"op": "add", "path": f"{at}/scaleStrategy/workersToDelete", "value": victims}
              if "scaleStrategy" in spec else
              {"op": "add", "path": f"{at}/scaleStrategy", "value": {"workersToDelete": victims}})
    json_patch(scenario, "autoscaler", [
        {"op": "test", "path": f"{at}/groupName", "value": group},
        {"op": "replace", "path": f"{at}/replicas", "value": keep}, delete])
    scenario.step(f"scaled {group} down to {keep}, deleting {', '.join(victims) or 'none'}")
    workers(scenario, group, keep)


def restart_kuberay(scenario: Scenario, group: str, count: int) -> None:
    """The operator restarted, then ``group`` scaled up to ``count``: the new process has
    reconciled the cluster once its pods are there."""
    scenario.testbed.restart_kuberay()
    scenario.step("KubeRay restarted")
    scale_to(scenario, group, count)


def steps(scenario: Scenario) -> list[tuple[str, Callable[[], object]]]:
    """What KubeRay is put through: (what, do it)."""
    def both_down() -> None:
        scale_down(scenario, "small", 0)
        scale_down(scenario, "large", 0)
    return [("large scaled up, 1 to 3", lambda: scale_to(scenario, "large", 3)),
            ("large scaled down, 3 to 1", lambda: scale_down(scenario, "large", 1)),
            ("KubeRay restarted, small scaled up, 1 to 2",
             lambda: restart_kuberay(scenario, "small", 2)),
            ("both scaled down to 0", both_down),
            ("KubeRay restarted, large scaled up, 0 to 2",
             lambda: restart_kuberay(scenario, "large", 2))]


def row(what: str, cluster: dict[str, Any]) -> str:
    def gates(group: str) -> str:
        return ", ".join(f"`{g[GATE_KEY]}`" for g in fields(cluster)[group][1]) or "none"
    priority = {g: fields(cluster)[g][0] for g in ("large", "small")}
    return (f"| {what} | {priority['large']} / {priority['small']} | {gates('large')} | "
            f"{gates('small')} | {', '.join(list_owners(cluster))} |")


def test_kuberay_keeps_priority_and_gates_through_scaling_and_restarts(
        scenario: Scenario) -> None:
    created = bring_up(scenario, large=1)
    assert fields(created) == {"large": (10, []), "small": (0, [])}  # 0: the CRD's default
    rows = [row("created (kubectl create)", created)]

    assert apply_one_group(scenario, force=False) == 409  # the list is kubectl-create's
    assert apply_one_group(scenario, force=True) == 422  # the list would be one group
    undone = lost_update(scenario)
    assert [g["replicas"] for g in undone["spec"]["workerGroupSpecs"]] == [1, 1]
    rows.append(row("small scaled 1 to 2, then kueue applies the list read before, its gate "
                    "added, no resourceVersion: small back to 1", undone))
    rows.append(row(f"{PATCHER} adds its gate (guarded JSON Patch)",
                    guarded_patch(scenario, PATCHED_GATE)))
    expected = {"large": (10, [KUEUE_GATE, PATCHED_GATE]), "small": (0, [])}  # in that order
    assert fields(scenario.api.get(cluster_path(scenario))) == expected
    failed_test = failed_test_status(scenario)
    assert failed_test == 422

    for what, step in steps(scenario):
        step()
        cluster = scenario.api.get(cluster_path(scenario))
        rows.append(row(what, cluster))
        assert fields(cluster) == expected, what
    report.add("scale-gate-field-1-kept", (
        "### KubeRay 1.6.1 keeps a group's priority and scale gates (stand-in CRD)\n\n"
        "The RayCluster CRD with 1.7's `priority` and #5094's `scaleGate` "
        "(`testbed/kuberay_standin.py`). An apply of `large`'s gate alone: 409 without "
        "force, 422 with it (`workerGroupSpecs` is atomic: it would replace the list). "
        f"A JSON Patch whose `test` fails: {failed_test}. `autoscaler` writes replicas and "
        "`workersToDelete` by JSON Patch, as Ray does (never the whole `scaleStrategy`). "
        "Priorities large / small; the owners of `spec.workerGroupSpecs` after each step.\n\n"
        "| after | priority | gates of large | gates of small | owners of the list |\n"
        "|---|---|---|---|---|\n" + "\n".join(rows) + "\n"))


def test_ray_260s_scale_down_patch_drops_the_groups_gates(scenario: Scenario) -> None:
    provider = pytest.importorskip("ray.autoscaler._private.kuberay.node_provider")
    bring_up(scenario, large=2)
    guarded_patch(scenario, PATCHED_GATE)
    kueue_gate(scenario)
    before = fields(scenario.api.get(cluster_path(scenario)))["large"][1]
    assert before == [PATCHED_GATE, KUEUE_GATE]
    victim = workers(scenario, "large", 2)[1]
    # As Ray 2.60's KubeRay provider sends a scale-down of group 0 (its cloud_provider.py).
    scenario.api.json_patch(cluster_path(scenario), [
        provider.worker_replica_patch("0", 1), provider.worker_delete_patch("0", [victim])])
    workers(scenario, "large", 1)
    after = scenario.api.get(cluster_path(scenario))["spec"]["workerGroupSpecs"][0]
    assert after["scaleStrategy"] == {"workersToDelete": [victim]}
    report.add("scale-gate-field-2-ray-patch", (
        "### Ray 2.60's scale-down patch drops a group's scale gates\n\n"
        f"`large` gated by {', '.join(f'`{g[GATE_KEY]}`' for g in before)}; Ray 2.60's "
        "`worker_delete_patch` (a JSON Patch `replace` of "
        "`/spec/workerGroupSpecs/<i>/scaleStrategy`, which its KubeRay provider sends for "
        f"every scale-down and again to clear it) deleting `{victim}`: the group's "
        f"`scaleStrategy` is then `{json.dumps(after['scaleStrategy'])}`, no gate left.\n"))


def test_kuberay_161s_finalizer_update_drops_both_fields(scenario: Scenario) -> None:
    bring_up(scenario, large=0, gates=[KUEUE_GATE],
             gcsFaultToleranceOptions={"redisAddress": "redis.invalid:6379"})

    def finalized() -> dict[str, Any] | None:
        cluster = scenario.api.get(cluster_path(scenario))
        return cluster if FT_FINALIZER in cluster["metadata"].get("finalizers", []) else None
    cluster = wait_until(f"KubeRay's finalizer {FT_FINALIZER}", finalized)
    assert fields(cluster)["large"] == (0, [])
    report.add("scale-gate-field-3-finalizer", (
        "### KubeRay 1.6.1's one spec write drops both fields\n\n"
        "A RayCluster with `gcsFaultToleranceOptions`, created with `large`'s priority 10 "
        f"and the gate `{KUEUE_GATE[GATE_KEY]}`: KubeRay 1.6.1 adds `{FT_FINALIZER}` by an "
        "Update of the whole object, serialised from Go types that have neither field. "
        f"Stored afterwards: `large` priority {fields(cluster)['large'][0]} (the CRD's "
        "default), no gates.\n"))
