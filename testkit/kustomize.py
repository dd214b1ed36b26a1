"""`kustomize build`, offline: the features deploy/'s kustomizations use, enough for
tests/deploy/test_deploy.py to read each setup as kubectl applies it (e2e/test_chart.py compares
the chart with the real kustomize)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]


def _merge(base: Any, patch: Any) -> Any:
    """A strategic merge patch, as far as these manifests use it: maps merge, lists of
    named objects merge by their merge key (the patch's entries first, as kustomize puts
    them, then the others), other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base[key], value) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(patch, list) and all(
            isinstance(x, dict) for x in base + patch):
        for merge_key in ("name", "mountPath", "containerPort"):
            if all(merge_key in x for x in base + patch):
                keys = {item[merge_key] for item in patch}
                existing = {x[merge_key]: x for x in base}
                return [_merge(existing[i[merge_key]], i) if i[merge_key] in existing else i
                        for i in patch] + [x for x in base if x[merge_key] not in keys]
    return copy.deepcopy(patch)


def _set_images(objects: list[Obj], images: list[Obj]) -> None:
    """kustomize's images transformer: a container image named ``name`` (no tag) becomes
    ``newName:newTag``."""
    for image in images:
        for obj in objects:
            pod = obj.get("spec", {}).get("template", {}).get("spec", {})
            for container in pod.get("containers", []) + pod.get("initContainers", []):
                if container["image"] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"


def _load(folder: Path, entries: list[str]) -> list[Obj]:
    objects: list[Obj] = []
    for entry in entries:
        path = (folder / entry).resolve()
        assert path.exists(), f"{folder.name}/kustomization.yaml: {entry} does not exist"
        if path.is_dir():
            objects.extend(render(path))
        else:
            objects.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return objects


def _patch(folder: Path, objects: list[Obj], entry: Obj) -> None:
    """A strategic merge patch (or `$patch: delete`) on the object it names, or with a
    `target` (kind, name as an anchored regex) on every object that matches, whatever
    the patch's own name."""
    path = folder / entry["path"]
    assert path.exists(), f"{folder.name}: patch {entry['path']} does not exist"
    patch = yaml.safe_load(path.read_text())
    target = entry.get("target", {"kind": patch["kind"],
                                  "name": re.escape(patch["metadata"]["name"])})
    assert set(target) <= {"kind", "name"}, target
    targets = [i for i, o in enumerate(objects) if o["kind"] == target["kind"]
               and re.fullmatch(target.get("name", ".*"), o["metadata"]["name"])]
    assert targets, f"{folder.name}: patch {path.name} matches no resource"
    if patch.get("$patch") == "delete":
        for i in reversed(targets):
            del objects[i]
        return
    for i in targets:
        named = copy.deepcopy(patch)
        named["metadata"]["name"] = objects[i]["metadata"]["name"]
        objects[i] = _merge(objects[i], named)


def render(folder: Path) -> list[Obj]:
    """`kustomize build`, for the features these kustomizations use (resources;
    components, with resources, patches and images of their own, applied in order after
    the resources and before the kustomization's own patches; patches including `$patch:
    delete` and `target`; images); e2e/test_chart.py compares with the real one."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    objects = _load(folder, kustomization.get("resources", []))
    for component in kustomization.get("components", []):
        spec = yaml.safe_load((folder / component / "kustomization.yaml").read_text())
        assert spec["kind"] == "Component"
        assert set(spec) <= {"apiVersion", "kind", "resources", "patches", "images"}
        objects.extend(_load(folder / component, spec.get("resources", [])))
        for entry in spec.get("patches", []):
            _patch(folder / component, objects, entry)
        _set_images(objects, spec.get("images", []))
    for entry in kustomization.get("patches", []):
        _patch(folder, objects, entry)
    _set_images(objects, kustomization.get("images", []))
    return objects


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj
