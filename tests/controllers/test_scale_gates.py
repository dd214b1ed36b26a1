"""The scale-gate writer (``raygate.server.controllers.scale_gates``) and its JSON Patch
(``scale_gate_patch``): against a double of the API server that applies each patch with
jsonpatch and answers a failed ``test`` 422, as kube-apiserver does (the e2e scenario
writes to the real one); over the admission scenario whose node autoscalers say no node
comes for three groups."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.controllers.scale_gate_patch import gate_key, gate_ops
from raygate.server.controllers.scale_gates import ScaleGates
from raygate.server.kube.transport import ApiError, NotServed
from raygate.server.metrics.registry import Metrics
from testkit.builders import T0_EPOCH
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, snapshot_of

Obj = dict[str, Any]
NO_NODE = "raygate.io/no-node-coming"
KUEUE = {"type": "kueue.k8s.io/quota-exceeded"}


def openapi(gate: Obj | None) -> Obj:
    strategy = {"properties": {} if gate is None else {"scaleGate": gate}}
    group = {"properties": {"groupName": {"type": "string"}, "scaleStrategy": strategy}}
    return {"components": {"schemas": {"io.ray.v1.RayCluster": {
        "x-kubernetes-group-version-kind": [{"group": "ray.io", "kind": "RayCluster",
                                             "version": "v1"}],
        "properties": {"spec": {"properties": {"workerGroupSpecs": {
            "type": "array", "items": group}}}}}}}}


def listed(key: str) -> Obj:
    return {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": [key], "items": {"properties": {key: {}}}}


@pytest.mark.parametrize(("doc", "key"), [
    (openapi(listed("type")), "type"),
    (openapi(listed("name")), "name"),  # the earlier drafts of kuberay#5094
    (openapi(None), None),  # KubeRay 1.6.1 as released
    (openapi({"type": "array", "x-kubernetes-list-type": "atomic"}), None),
    ({}, None),
])
def test_the_entry_key_is_the_served_schemas(doc: Obj, key: str | None) -> None:
    assert gate_key(doc) == key


def rc(*groups: Obj, rv: str = "1") -> Obj:
    return {"metadata": {"uid": "u1", "resourceVersion": rv},
            "spec": {"workerGroupSpecs": [{"groupName": f"g{i}", **g}
                                          for i, g in enumerate(groups)]}}


def gated(*entries: Obj) -> Obj:
    return {"scaleStrategy": {"scaleGate": list(entries)}}


@pytest.mark.parametrize(("before", "want", "after"), [
    (rc({}), {"g0": {NO_NODE}}, rc(gated({"type": NO_NODE}))),  # scaleStrategy made
    (rc({"scaleStrategy": {}}), {"g0": {NO_NODE}}, rc(gated({"type": NO_NODE}))),
    (rc(gated(KUEUE)), {"g0": {NO_NODE}}, rc(gated(KUEUE, {"type": NO_NODE}))),
    (rc(gated({"type": NO_NODE}, KUEUE, {"type": "raygate.io/x"})), {"g0": set()},
     rc(gated(KUEUE))),
    (rc(gated(KUEUE), {}), {"g1": set()}, None),  # nothing of raygate's: no patch
    (rc(gated({"type": NO_NODE})), {"g0": {NO_NODE}}, None),  # in line: no patch
    (rc(gated({"type": NO_NODE}), {}), {"g1": {NO_NODE}},  # g0 is not in `want`: kept
     rc(gated({"type": NO_NODE}), gated({"type": NO_NODE}))),
])
def test_the_patch_touches_raygates_entries_only(before: Obj, want: dict[str, set[str]],
                                                 after: Obj | None) -> None:
    ops = gate_ops(before, "type", want)
    if after is None:
        assert ops == []
        return
    assert jsonpatch.apply_patch(before, ops) == after
    # Anything that moved meanwhile fails a test: a group, an entry, the list made anew.
    renamed = copy.deepcopy(before)
    for g in renamed["spec"]["workerGroupSpecs"]:
        g["groupName"] = "other"
    for moved in (renamed, {**before, "metadata": {"uid": "u2", "resourceVersion": "1"}}):
        with pytest.raises(jsonpatch.JsonPatchTestFailed):
            jsonpatch.apply_patch(moved, ops)


class Api:
    """The RayCluster ``auto`` as the API server holds it; each patch applied whole or
    refused 422 (a failed test, or a key twice in the list-map), as kube-apiserver does."""

    def __init__(self, cluster: Obj, key: str | None = "type") -> None:
        self.cluster = cluster
        cluster["metadata"]["resourceVersion"] = "1"
        self.doc = openapi(None if key is None else listed(key))
        self.patches: list[list[Obj]] = []
        self.before_patch: Callable[[], None] = lambda: None
        self.failure: Exception | None = None

    def raycluster_openapi(self) -> Obj:
        return self.doc

    def raycluster_json(self, namespace: str, name: str) -> Obj:
        if self.failure is not None:
            raise self.failure
        return copy.deepcopy(self.cluster)

    def patch_raycluster(self, namespace: str, name: str, ops: list[Obj]) -> None:
        self.before_patch()
        self.patches.append(ops)
        try:
            patched = jsonpatch.apply_patch(self.cluster, ops)
        except jsonpatch.JsonPatchTestFailed as exc:
            raise ApiError(422, "Invalid", str(exc)) from None
        patched["metadata"]["resourceVersion"] += "1"
        self.cluster = patched

    def gates(self) -> dict[str, list[str]]:
        return {g["groupName"]: [e["type"] for e in g.get("scaleStrategy", {}).get(
            "scaleGate", [])] for g in self.cluster["spec"]["workerGroupSpecs"]}


class World:
    def __init__(self, key: str | None = "type", config: PolicyConfig | None = None) -> None:
        self.objects = sc.node_autoscaler()
        self.config = config or PolicyConfig()
        self.cache = ClusterCache(self.config, "test")
        self.api = Api(copy.deepcopy(self.objects[0]), key)
        self.metrics = Metrics()
        self.leading = True
        self.writer = ScaleGates(self.cache, self.api, self.metrics, FakeClock(T0_EPOCH),
                                 leading=lambda: self.leading)
        self.publish()

    def publish(self) -> None:
        """The cache as the watch would bring it: the RayCluster as the API holds it."""
        self.cache.publish(snapshot_of(self.api.cluster, *self.objects[1:],
                                       config=self.config))

    def written(self, outcome: str) -> float:
        return self.metrics.scale_gate_writes.labels(outcome).value


WANT = {"karp": [], "nopool": [NO_NODE], "ca": [], "cano": [NO_NODE], "floor": [NO_NODE]}


def test_groups_with_no_node_coming_are_gated_and_others_entries_stay() -> None:
    world = World()
    world.api.cluster["spec"]["workerGroupSpecs"][1]["scaleStrategy"] = {"scaleGate": [KUEUE]}
    world.publish()
    world.writer.check()
    assert world.api.gates() == {**WANT, "nopool": ["kueue.k8s.io/quota-exceeded", NO_NODE]}
    assert len(world.api.patches) == 1 and world.written("written") == 1
    assert b'raygate_scale_gates{reason="no-node-coming"} 3.0' in world.metrics.exposition()
    world.publish()
    world.writer.check()
    assert len(world.api.patches) == 1, "in line: no call"


def test_a_gate_removed_behind_its_back_comes_back_and_one_added_goes() -> None:
    world = World()
    world.writer.check()
    groups = world.api.cluster["spec"]["workerGroupSpecs"]
    groups[1]["scaleStrategy"]["scaleGate"] = []  # Ray's scale-down patch, say
    groups[0]["scaleStrategy"] = {"scaleGate": [{"type": "raygate.io/stale"}, KUEUE]}
    world.publish()
    world.writer.check()
    assert world.api.gates() == {**WANT, "karp": ["kueue.k8s.io/quota-exceeded"]}


def test_a_concurrent_write_is_read_again_and_a_refusal_backs_off() -> None:
    world = World()

    def kueue_first() -> None:  # another writer between raygate's read and its patch
        world.api.before_patch = lambda: None
        world.api.cluster["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {
            "scaleGate": [KUEUE]}
        world.api.cluster["metadata"]["resourceVersion"] = "2"
    world.api.before_patch = kueue_first
    world.writer.check()
    assert world.written("conflict") == 1 and world.written("written") == 1
    assert world.api.gates() == {**WANT, "karp": ["kueue.k8s.io/quota-exceeded"]}
    world.api.cluster = {**copy.deepcopy(world.objects[0]), "metadata": {
        **world.objects[0]["metadata"], "resourceVersion": "9"}}
    world.api.failure = ApiError(403, "Forbidden", "no patch on rayclusters")
    world.publish()
    world.writer.check()
    assert world.written("failed") == 1
    assert world.writer.retries.get(("ray", "auto")) is not None  # the one backoff
    world.api.failure = NotServed(404, "NotFound", "deleted meanwhile")
    world.writer.retries.forget(("ray", "auto"))
    world.publish()
    world.writer.check()
    assert world.written("gone") == 1 and ("ray", "auto") not in world.writer.retries


def test_no_field_in_the_schema_no_write() -> None:
    world = World(key=None)
    world.writer.check()
    assert world.api.patches == []


def test_switched_off_it_removes_its_own_and_writes_none() -> None:
    world = World()
    world.writer.check()
    world.config = PolicyConfig(scale_gates=False)
    world.publish()
    world.writer.check()
    assert world.api.gates() == {g: [] for g in WANT}


def test_a_new_leader_corrects_what_changed_while_none_led() -> None:
    world = World()
    world.writer.check()
    world.leading = False
    world.writer.check()
    world.api.cluster["spec"]["workerGroupSpecs"][4]["scaleStrategy"]["scaleGate"] = []
    world.publish()
    world.writer.check()
    assert world.api.gates()["floor"] == [], "no write while it does not lead"
    world.leading = True
    world.writer.check()
    assert world.api.gates() == WANT
