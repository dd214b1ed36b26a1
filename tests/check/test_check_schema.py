"""The KubeRay CRD schemas `raygate check` ships, one per supported KubeRay minor release:
each names the release it comes from, and the one of the release the testbed pins
(testbed/modules/kuberay/go.mod) is current when that module is on this machine."""

from __future__ import annotations

import importlib.resources
import json

import pytest

from raygate.server.check import schema
from testbed import kuberay_schema


def test_the_pinned_releases_schemas_are_current() -> None:
    folder = kuberay_schema.crd_folder()
    if folder is None:
        pytest.skip("KubeRay's module is in neither cache (python -m testbed build kuberay)")
    release = kuberay_schema.pinned_release()
    shipped = kuberay_schema.shipped(release).read_text(encoding="utf-8")
    assert shipped == kuberay_schema.render(folder, release), \
        "regenerate: python -m testbed.kuberay_schema --write"


@pytest.mark.parametrize("version", schema.VERSIONS)
def test_each_version_ships_in_the_package_and_names_its_release(version: str) -> None:
    text = importlib.resources.files("raygate.server.check").joinpath(
        f"kuberay_crds_{version}.json").read_text(encoding="utf-8")
    assert set(json.loads(text)["kinds"]) == set(schema.KINDS)
    assert schema.source(version).startswith("github.com/ray-project/kuberay/ray-operator v")
    assert schema.release(version).startswith(f"v{version}.")


def test_the_default_is_the_current_release_and_the_pinned_one_is_shipped() -> None:
    newest = max(schema.VERSIONS, key=lambda v: tuple(map(int, v.split("."))))
    assert newest == schema.DEFAULT_VERSION
    assert kuberay_schema.shipped(kuberay_schema.pinned_release()).is_file()
