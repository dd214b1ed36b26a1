"""The Helm chart (deploy/helm/raygate) with the real helm, built by the testbed: `helm lint`
and `helm template` for every documented values file (the chart's ci/), the objects of
each setup equal to what the real kustomize (`kubectl kustomize`) builds from the matching
deploy/ folder, and every rendered object accepted by the real API server (server dry
run)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.build import COMPONENTS
from testbed.cluster import DEPLOY, Testbed, running_testbed

pytestmark = pytest.mark.e2e

CHART = DEPLOY / "helm" / "raygate"
VALUES = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
# Each values file that stands for a kustomize setup; the others have no counterpart.
SAME_AS = {
    "kube-scheduler-second-values.yaml": "kube-scheduler-second",
    "kube-scheduler-default-values.yaml": "kube-scheduler-default",
    "volcano-values.yaml": "volcano",
    "kueue-values.yaml": "kueue",
    "raygate-only-values.yaml": "base",
}
NAMESPACE = "raygate-system"
# What Helm adds to every object's labels (and kustomize's manifests do not have).
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/managed-by"}
UNORDERED = {"ports", "volumes", "volumeMounts", "env"}
# Kinds whose CRD the testbed does not install (prometheus-operator's): not dry-run.
NO_CRD = {"ServiceMonitor"}
Obj = dict[str, Any]


def _tool(component: str, name: str) -> Path:
    path = COMPONENTS[component].path(name)
    if not path.is_file():
        pytest.skip(f"{name} is not built: `make testbed` (or `python -m testbed build "
                    f"{component}`) builds it into {path.parent}")
    return path


def _run(*argv: str | Path) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"{' '.join(map(str, argv))}\n{result.stderr}"
    return result.stdout


def helm_template(values: str) -> str:
    return _run(_tool("helm", "helm"), "template", "raygate", CHART, "--namespace", NAMESPACE,
                "--values", CHART / "ci" / values)


def _documents(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def _unordered(node: Any) -> Any:
    """Lists that Kubernetes merges by key, whose order means nothing (kustomize puts a
    patch's entries first, the chart's templates where they read best), sorted."""
    if isinstance(node, dict):
        return {k: sorted(map(_unordered, v), key=yaml.safe_dump) if k in UNORDERED
                else _unordered(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_unordered(v) for v in node]
    return node


def normalised(obj: Obj) -> Obj:
    """The object as the comparison sees it: without Helm's labels, with each
    ConfigMap entry that is a YAML document parsed (so that its comments, which differ
    between a chart template and a manifest, do not count), and lists merged by key
    sorted."""
    obj = _unordered(yaml.safe_load(yaml.safe_dump(obj)))
    metadata = obj["metadata"]
    labels = {k: v for k, v in metadata.pop("labels", {}).items() if k not in HELM_LABELS}
    if labels:
        metadata["labels"] = labels
    if obj["kind"] == "ConfigMap":
        for key, value in obj["data"].items():
            parsed = yaml.safe_load(value)
            if isinstance(parsed, dict):
                obj["data"][key] = parsed
    return obj


def _by_identity(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    keyed = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
             for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind, namespace and name"
    return keyed


def test_every_values_file_is_documented() -> None:
    readme = (CHART / "README.md").read_text()
    assert len(VALUES) >= 7
    for values in VALUES:
        assert f"ci/{values}" in readme, values
    assert set(SAME_AS) <= set(VALUES)


def test_chart_lints() -> None:
    helm = _tool("helm", "helm")
    _run(helm, "lint", "--strict", CHART)
    for values in VALUES:
        _run(helm, "lint", "--strict", CHART, "--namespace", NAMESPACE, "--values",
             CHART / "ci" / values)


@pytest.mark.parametrize("values", VALUES)
def test_values_render(values: str) -> None:
    objects = _documents(helm_template(values))
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "ConfigMap", "ClusterRole"} <= kinds
    assert "Namespace" not in kinds  # `helm install --create-namespace` makes it
    # The release's namespace; Volcano's ConfigMap; ray-scheduler's reader of kube-system.
    namespaces = {o["metadata"].get("namespace", NAMESPACE) for o in objects}
    assert namespaces <= {NAMESPACE, "volcano-system", "kube-system"}


@pytest.mark.parametrize("values", sorted(SAME_AS))
def test_chart_renders_what_kustomize_builds(values: str) -> None:
    """Full objects, after dropping Helm's labels and parsing ConfigMap entries; the
    chart leaves out only the Namespace (Helm's release namespace is made by
    --create-namespace; the pod-security label is in the chart's README)."""
    kubectl = _tool("kubernetes", "kubectl")
    built = _documents(_run(kubectl, "kustomize", DEPLOY / SAME_AS[values]))
    (namespace,) = [o for o in built if o["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == NAMESPACE
    kustomize = _by_identity([normalised(o) for o in built if o["kind"] != "Namespace"])
    chart = _by_identity([normalised(o) for o in _documents(helm_template(values))])
    assert sorted(chart) == sorted(kustomize)
    for identity, obj in kustomize.items():
        assert chart[identity] == obj, identity


def test_values_change_what_they_say() -> None:
    production = _by_identity(_documents(helm_template("production-values.yaml")))
    deployment = production["Deployment", NAMESPACE, "raygate"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert list(pod["affinity"]["podAntiAffinity"]) == [
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert pod["containers"][0]["image"] == f"ghcr.io/raygate-dev/raygate@sha256:{'0' * 64}"
    assert ("ServiceMonitor", NAMESPACE, "raygate") in production
    kind = _by_identity(_documents(helm_template("kind-values.yaml")))
    config = yaml.safe_load(kind["ConfigMap", NAMESPACE, "raygate-config"]["data"]["raygate.yaml"])
    assert config["server"]["authz"]["mode"] in ("off", False)
    secret = _by_identity(_documents(helm_template("kube-scheduler-default-secret-values.yaml")))
    assert not [k for k in secret if k[0] in ("Certificate", "Issuer")]
    (hook,) = secret["MutatingWebhookConfiguration", "", "raygate-ray-pods"]["webhooks"]
    assert hook["clientConfig"]["caBundle"]
    volumes = secret["Deployment", NAMESPACE, "raygate"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "my-raygate-webhook-tls"}} in volumes


@pytest.mark.parametrize(("values", "error"), [
    ({"kubeScheduler": {"mode": "third"}}, "kubeScheduler.mode"),
    ({"kueue": {"enabled": True}, "kubeScheduler": {"mode": "none"}}, "kueue.enabled needs"),
    ({"volcano": {"enabled": True}}, "volcano.enabled needs"),
    ({"podAntiAffinity": "sometimes"}, "podAntiAffinity"),
    ({"kubeScheduler": {"mode": "default"}, "webhook": {"tls": {"certManager": {
        "enabled": False}}}}, "webhook.tls"),
])
def test_combinations_that_cannot_work_are_refused(tmp_path: Path, values: Obj,
                                                   error: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = subprocess.run([str(_tool("helm", "helm")), "template", "raygate", str(CHART),
                             "--values", str(path)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode != 0 and error in result.stderr, result.stderr


@pytest.fixture(scope="module")
def blank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A control plane with the CRDs of KubeRay, cert-manager, Volcano and Kueue and the
    namespaces a release's objects go to (a server dry run creates none)."""
    with running_testbed(tmp_path_factory.mktemp("chart"), control_plane_only=True) as bed:
        for namespace in (NAMESPACE, "volcano-system"):
            bed.kubectl("create", "namespace", namespace)
        yield bed


@pytest.mark.parametrize("values", VALUES)
def test_rendered_objects_are_accepted_by_the_api_server(blank: Testbed, values: str,
                                                         tmp_path: Path) -> None:
    objects = _documents(helm_template(values))
    applied = [o for o in objects if o["kind"] not in NO_CRD]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(applied))
    result = blank.kubectl("apply", "--dry-run=server", "-f", str(path))
    assert result.stdout.count("(server dry run)") == len(applied), result.stdout
