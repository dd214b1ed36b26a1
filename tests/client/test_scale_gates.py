"""``raygate.ray_autoscaler.gates`` on its own (no Ray): which scale gates a RayCluster
carries, which ``raygate-autoscaler`` honours (fail open on raygate's own), the log of
their changes, and the scale-down write that keeps them (applied as RFC 6902 says)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import jsonpatch
import pytest

from raygate.ray_autoscaler.gates import ScaleGates, gates_of, keep_gates

KUEUE = "kueue.k8s.io/quota-exceeded"
NO_NODE = "raygate.io/no-node-coming"
THRASH = "raygate.io/thrash-guard"


def cluster(**strategies: Any) -> dict[str, Any]:
    """A RayCluster whose worker groups (in the order given) have these scaleStrategy
    values; None: the group has no scaleStrategy."""
    groups = [{"groupName": name, "replicas": 1} if strategy is None else
              {"groupName": name, "replicas": 1, "scaleStrategy": strategy}
              for name, strategy in strategies.items()]
    return {"metadata": {"name": "demo", "resourceVersion": "7"},
            "spec": {"workerGroupSpecs": groups}}


@pytest.mark.parametrize(("strategies", "gates"), [
    ({"large": None, "small": {}}, {}),
    ({"large": {"scaleGate": [{"type": KUEUE}]}}, {"large": (KUEUE,)}),
    ({"large": {"scaleGate": [{"name": KUEUE}]}}, {"large": (KUEUE,)}),  # earlier #5094
    ({"large": {"scaleGate": [{"type": NO_NODE}, {"name": KUEUE}, {"type": NO_NODE}]}},
     {"large": (KUEUE, NO_NODE)}),
    ({"large": {"scaleGate": [{"type": NO_NODE, "name": "ignored"}]}}, {"large": (NO_NODE,)}),
    ({"large": {"scaleGate": []}, "small": {"workersToDelete": ["a"]}}, {}),
    ({"large": {"scaleGate": [{}, {"type": ""}, "x", None, {"reason": "full"}]}}, {}),
    ({"large": {"scaleGate": None}, "small": {"scaleGate": [{"type": THRASH}]}},
     {"small": (THRASH,)}),
], ids=["none", "type", "name", "several", "type-first", "empty", "malformed", "one-group"])
def test_the_gates_of_a_raycluster(strategies: dict[str, Any],
                                   gates: dict[str, tuple[str, ...]]) -> None:
    assert gates_of(cluster(**strategies)) == gates


def test_a_raycluster_without_worker_groups_has_no_gates() -> None:
    assert gates_of({"spec": {}}) == gates_of({"spec": {"workerGroupSpecs": None}}) == {}


BOTH = {"large": {"scaleGate": [{"type": KUEUE}, {"type": NO_NODE}]},
        "small": {"scaleGate": [{"name": THRASH}]}}


@pytest.mark.parametrize(("answers", "honoured", "ignored"), [
    (True, {"large": (KUEUE, NO_NODE), "small": (THRASH,)}, set()),
    (False, {"large": (KUEUE,)}, {("large", NO_NODE), ("small", THRASH)}),
], ids=["raygate-answers", "raygate-silent"])
def test_other_writers_gates_always_count_raygates_only_while_it_answers(
        answers: bool, honoured: dict[str, tuple[str, ...]],
        ignored: set[tuple[str, str]]) -> None:
    gates = ScaleGates("ray", "demo")
    assert gates.update(cluster(**BOTH), raygate_answers=answers) == honoured
    assert gates.honoured == honoured
    assert gates.ignored == ignored
    assert gates.failed_open == len(ignored)


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    out = [(r.levelname, r.getMessage()) for r in caplog.records
           if r.name == "raygate.autoscaler"]
    caplog.clear()
    return out


def test_changes_and_fail_open_are_logged_once_per_transition_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="raygate.autoscaler")
    gates = ScaleGates("ray", "demo")
    gated = cluster(large={"scaleGate": [{"type": NO_NODE}]}, small=None)
    steps: list[tuple[dict[str, Any], bool, list[tuple[str, str]]]] = [
        (gated, True, [("INFO", "worker group large is gated (raygate.io/no-node-coming): "
                                "no new workers, its pending ones not counted on, demand goes "
                                "to the other groups")]),
        (gated, True, []),
        (gated, False, [
            ("WARNING", "raygate does not answer: not honouring its scale gates (large: "
                        "raygate.io/no-node-coming) until it does, as a gate nobody can "
                        "lift must not hold a group (1 left unhonoured so far)"),
            ("INFO", "worker group large is no longer gated (was raygate.io/no-node-coming): "
                     "it scales up again")]),
        (gated, False, []),
        (gated, True, [
            ("INFO", "raygate's scale gates are honoured again (large: "
                     "raygate.io/no-node-coming had been ignored)"),
            ("INFO", "worker group large is gated (raygate.io/no-node-coming): no new "
                     "workers, its pending ones not counted on, demand goes to the other "
                     "groups")]),
        (cluster(large={}, small=None), True, [
            ("INFO", "worker group large is no longer gated (was raygate.io/no-node-coming): "
                     "it scales up again")]),
        (cluster(large={"scaleGate": [{"type": KUEUE}]}, small=None), False, [
            ("INFO", "worker group large is gated (kueue.k8s.io/quota-exceeded): no new "
                     "workers, its pending ones not counted on, demand goes to the other "
                     "groups")]),
    ]
    for n, (state, answers, logged) in enumerate(steps):
        gates.update(state, raygate_answers=answers)
        assert messages(caplog) == logged, n
    assert gates.failed_open == 1
    assert all(r.__dict__.get("raycluster") == "demo" for r in caplog.records)


def scale_down(index: int, victims: list[str]) -> dict[str, Any]:
    """What Ray 2.60 writes (``node_provider.worker_delete_patch``)."""
    return {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/scaleStrategy",
            "value": {"workersToDelete": victims}}


REPLICAS = {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 0}


@pytest.mark.parametrize(("strategies", "payload", "written"), [
    # A gated group: workersToDelete alone; the gate stays.
    ({"large": {"scaleGate": [{"type": KUEUE}]}}, [REPLICAS, scale_down(0, ["a"])],
     [REPLICAS,
      {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "large"},
      {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy/workersToDelete",
       "value": ["a"]}]),
    # Clearing the list after the deletes, beside another group's replicas.
    ({"small": None, "large": {"scaleGate": [{"type": NO_NODE}], "workersToDelete": ["a"]}},
     [REPLICAS, scale_down(1, [])],
     [REPLICAS,
      {"op": "test", "path": "/spec/workerGroupSpecs/1/groupName", "value": "large"},
      {"op": "add", "path": "/spec/workerGroupSpecs/1/scaleStrategy/workersToDelete",
       "value": []}]),
    # No scaleStrategy yet: made whole, on the version read.
    ({"large": None}, [scale_down(0, ["a"])],
     [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
      {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "large"},
      {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
       "value": {"workersToDelete": ["a"]}}]),
    # Anything else is Ray's write as it is.
    ({"large": {}}, [REPLICAS, {"op": "replace", "path": "/spec/workerGroupSpecs/0/"
                                "scaleStrategy", "value": {"other": 1}}],
     [REPLICAS, {"op": "replace", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
                 "value": {"other": 1}}]),
    ({"large": None}, [], []),
], ids=["gated", "clear", "no-strategy", "other-ops", "nothing"])
def test_a_scale_down_writes_workers_to_delete_alone(
        strategies: dict[str, Any], payload: list[dict[str, Any]],
        written: list[dict[str, Any]]) -> None:
    before = cluster(**strategies)
    assert keep_gates(before, payload) == written
    # Applied (RFC 6902, all or nothing), it changes what Ray meant to change and keeps
    # every gate.
    after = jsonpatch.apply_patch(before, written)
    assert gates_of(after) == gates_of(before)


def test_a_gate_written_between_the_read_and_the_write_is_kept() -> None:
    """The group had no scaleStrategy when Ray read the RayCluster; another writer's gate
    came before Ray's write: the write is refused (Ray retries it next loop), not let
    replace the gate."""
    read = cluster(large=None)
    written = keep_gates(read, [scale_down(0, ["a"])])
    now = copy.deepcopy(read)
    now["metadata"]["resourceVersion"] = "8"
    now["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {"scaleGate": [{"type": KUEUE}]}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(now, written)


def test_a_group_moved_to_another_index_is_not_written() -> None:
    read = cluster(large={"scaleGate": [{"type": KUEUE}]}, small={})
    written = keep_gates(read, [scale_down(0, ["a"])])
    moved = cluster(small={}, large={"scaleGate": [{"type": KUEUE}]})
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, written)
