"""The KubeRay CRD schemas `raygate check` ships are those of the KubeRay release the
testbed pins (testbed/modules/kuberay/go.mod), when that module is on this machine."""

from __future__ import annotations

import importlib.resources
import json

import pytest

from raygate.extender.check import schema
from testbed import kuberay_schema


def test_the_shipped_schemas_are_current() -> None:
    folder = kuberay_schema.crd_folder()
    if folder is None:
        pytest.skip("KubeRay's module is in neither cache (python -m testbed build kuberay)")
    assert kuberay_schema.SHIPPED.read_text(encoding="utf-8") == kuberay_schema.render(folder), \
        "regenerate: python -m testbed.kuberay_schema --write"


def test_they_ship_in_the_package_and_name_their_source() -> None:
    text = importlib.resources.files("raygate.extender.check").joinpath(
        "kuberay_crds.json").read_text(encoding="utf-8")
    assert set(json.loads(text)["kinds"]) == set(schema.KINDS)
    assert schema.source().startswith("github.com/ray-project/kuberay/ray-operator v")
