"""The Helm chart's tests' common part: the real helm and kubectl the testbed builds
(skipped until it has), `helm template` of a values file under ci/ as for the testbed's
Kubernetes, and reading what it renders."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.build import COMPONENTS
from testbed.cluster import DEPLOY

CHART = DEPLOY / "helm" / "raygate"
VALUES = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
NAMESPACE = "raygate-system"
# The cluster the chart is rendered for: the testbed's Kubernetes.
KUBE_VERSION = COMPONENTS["kubernetes"].version
Obj = dict[str, Any]


def tool(component: str, name: str) -> Path:
    path = COMPONENTS[component].path(name)
    if not path.is_file():
        pytest.skip(f"{name} is not built: `make testbed` (or `python -m testbed build "
                    f"{component}`) builds it into {path.parent}")
    return path


def run(*argv: str | Path) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"{' '.join(map(str, argv))}\n{result.stderr}"
    return result.stdout


def helm_template(values: str, *more: str | Path) -> str:
    return run(tool("helm", "helm"), "template", "raygate", CHART, "--namespace", NAMESPACE,
               "--kube-version", KUBE_VERSION, "--values", CHART / "ci" / values, *more)


def template_failure(*argv: str | Path) -> str:
    result = subprocess.run([str(tool("helm", "helm")), "template", "raygate", str(CHART),
                             "--kube-version", KUBE_VERSION, *map(str, argv)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0, result.stdout[:500]
    return result.stderr


def documents(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_identity(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    keyed = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
             for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind, namespace and name"
    return keyed


def pods(objects: list[Obj]) -> dict[str, Obj]:
    """Deployment name -> its pod template."""
    return {o["metadata"]["name"]: o["spec"]["template"] for o in objects
            if o["kind"] == "Deployment"}


def raygate_container(template: Obj) -> Obj:
    (container,) = [c for c in template["spec"]["containers"] if c["name"] == "raygate"]
    found: Obj = container
    return found


def raygate_config(objects: list[Obj]) -> Obj:
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"
                    and o["metadata"]["name"] == "raygate-config"]
    config: Obj = yaml.safe_load(configmap["data"]["raygate.yaml"])
    return config
