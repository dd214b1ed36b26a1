"""The testbed's stand-in fields on KubeRay 1.6.1's RayCluster CRD
(``testbed.kuberay_standin``), without a cluster: the patch, what it adds, and which gate
names its schema takes."""

from __future__ import annotations

import copy
import importlib.resources
import json
from typing import Any

import jsonpatch
import jsonschema
import pytest

from testbed.kuberay_standin import GATE_KEY, PRIORITY, SCALE_GATE, crd_patch


def shipped_group_schema(version: str) -> dict[str, Any]:
    """A worker group's schema in the RayCluster CRD of the KubeRay release ``version``
    that ``raygate check`` ships (rendered from KubeRay's own CRD), its $refs followed."""
    document = json.loads(importlib.resources.files("raygate.server.check").joinpath(
        f"kuberay_crds_{version}.json").read_text(encoding="utf-8"))

    def resolve(schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = document["definitions"][schema["$ref"].rsplit("/", 1)[-1]]
        return schema
    spec = resolve(resolve(document["kinds"]["RayCluster"])["properties"]["spec"])
    return resolve(resolve(spec["properties"]["workerGroupSpecs"])["items"])


def crd(group: dict[str, Any]) -> dict[str, Any]:
    """A RayCluster CRD whose ``v1`` (second, as in KubeRay's) has ``group``'s schema."""
    schema = {"properties": {"spec": {"properties": {"workerGroupSpecs": {
        "type": "array", "items": group}}}}}
    return {"spec": {"versions": [{"name": "v1alpha1"},
                                  {"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}


def kuberay_161_group() -> dict[str, Any]:
    properties = {"scaleStrategy": {"type": "object", "properties": {
        "workersToDelete": {"type": "array", "items": {"type": "string"}}}}}
    return {"type": "object", "properties": properties}


def test_the_priority_is_kuberay_17s_and_161_has_neither_field() -> None:
    assert shipped_group_schema("1.7")["properties"]["priority"] == PRIORITY
    old = shipped_group_schema("1.6")["properties"]
    assert "priority" not in old
    assert "scaleGate" not in old["scaleStrategy"].get("properties", {})


def test_the_patch_adds_both_fields_to_v1_once() -> None:
    before = crd(kuberay_161_group())
    ops = crd_patch(before)
    assert [op["path"].rsplit("/", 1)[-1] for op in ops] == ["priority", "scaleGate"]
    assert all(op["path"].startswith("/spec/versions/1/") for op in ops)
    after = jsonpatch.apply_patch(before, ops)
    group = after["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["workerGroupSpecs"]
    assert "x-kubernetes-list-type" not in group  # the list of groups stays atomic
    assert group["items"]["properties"]["priority"] == PRIORITY
    assert group["items"]["properties"]["scaleStrategy"]["properties"]["scaleGate"] == SCALE_GATE
    assert crd_patch(after) == []


def test_a_changed_scale_gate_schema_is_replaced() -> None:
    """A CRD whose scaleGate differs (another stand-in's) gets this one's."""
    group = kuberay_161_group()
    group["properties"]["priority"] = copy.deepcopy(PRIORITY)
    group["properties"]["scaleStrategy"]["properties"]["scaleGate"] = {"type": "array"}
    ops = crd_patch(crd(group))
    assert [(op["op"], op["value"]) for op in ops] == [("add", SCALE_GATE)]


@pytest.mark.parametrize(("name", "valid"), [
    ("kueue.k8s.io/quota-exceeded", True),
    ("raygate.io/no-node-coming", True),
    ("my-org.example.co.uk/some_gate.v1", True),
    ("k8s.io/Ready", True),
    ("quota-exceeded", True),
    ("a/b", True),
    ("x", True),
    ("", False),
    ("Kueue.io/gate", False),
    ("my_org.io/gate", False),
    ("-kueue.io/gate", False),
    ("raygate.io/", False),
    ("raygate.io/-gate", False),
])
def test_gate_names_the_schema_takes(name: str, valid: bool) -> None:
    """Label-key-shaped names (the table of the pull request's review, 2026-09-15)."""
    validator = jsonschema.Draft7Validator(SCALE_GATE)
    assert validator.is_valid([{GATE_KEY: name}]) is valid
    assert not validator.is_valid([{"name": name}])  # the key is required
