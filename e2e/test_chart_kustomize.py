"""The Helm chart renders, for each values file that stands for a kustomize setup, the
objects the real kustomize (`kubectl kustomize`, the testbed's) builds from its deploy/
folder, as kubectl would apply them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.chart import NAMESPACE, Obj, by_identity, documents, helm_template, run, tool
from testbed.cluster import DEPLOY

pytestmark = pytest.mark.e2e

# Each values file that stands for a kustomize setup: its folder, and the components the
# chart adds to it (deploy/base is a base; the chart's raygate alone serves the webhook
# too); the other values files have no counterpart.
SAME_AS = {
    "kube-scheduler-second-values.yaml": ("kube-scheduler-second",),
    "kube-scheduler-default-values.yaml": ("kube-scheduler-default",),
    "volcano-values.yaml": ("volcano",),
    "kueue-values.yaml": ("kueue",),
    "raygate-only-values.yaml": ("base", "native-placement"),
}
# The webhook's certificate, where the chart makes its own (its default) and kustomize
# asks cert-manager: the objects of one side (a Secret; an Issuer and a Certificate) and
# how each gives the API server the CA (caBundle; cert-manager's injection annotation).
WEBHOOK = ("MutatingWebhookConfiguration", "", "raygate-ray-pods")
WEBHOOK_SECRET = ("Secret", NAMESPACE, "raygate-webhook-tls")
INJECT_CA = "cert-manager.io/inject-ca-from"
# What Helm adds to every object's labels (and kustomize's manifests do not have).
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/managed-by"}
# Helm's own annotations: the pods' checksum of their start-time config (so that `helm
# upgrade` rolls them), and `keep` on Volcano's ConfigMap (so that uninstall leaves it).
HELM_ANNOTATIONS = {"checksum/config", "helm.sh/resource-policy"}
UNORDERED = {"ports", "volumes", "volumeMounts", "env"}


def test_every_kustomize_setup_has_its_values_file() -> None:
    setups = {p.parent.name for p in DEPLOY.glob("*/kustomization.yaml")
              if "kind: Component" not in p.read_text()}
    assert setups == {folders[0] for folders in SAME_AS.values()}


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
    """The object as the comparison sees it: without Helm's labels and annotations, with each
    ConfigMap entry that is a YAML document parsed (so that its comments, which differ
    between a chart template and a manifest, do not count), and lists merged by key
    sorted."""
    obj = _unordered(yaml.safe_load(yaml.safe_dump(obj)))
    for metadata in (obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata")):
        if metadata is None:
            continue
        labels = {k: v for k, v in metadata.pop("labels", {}).items() if k not in HELM_LABELS}
        if labels:
            metadata["labels"] = labels
        annotations = {k: v for k, v in metadata.pop("annotations", {}).items()
                       if k not in HELM_ANNOTATIONS}
        if annotations:
            metadata["annotations"] = annotations
    if obj["kind"] == "ConfigMap":
        for key, value in obj["data"].items():
            parsed = yaml.safe_load(value)
            if isinstance(parsed, dict):
                obj["data"][key] = parsed
    return obj


def kustomize(tmp_path: Path, folder: str, *components: str) -> list[Obj]:
    """`kubectl kustomize` of a deploy/ folder, with components added through a
    kustomization in tmp_path (kustomize takes relative paths only)."""
    kubectl = tool("kubernetes", "kubectl")
    if components:
        tmp_path.joinpath("kustomization.yaml").write_text(yaml.safe_dump({
            "resources": [os.path.relpath(DEPLOY / folder, tmp_path)],
            "components": [os.path.relpath(DEPLOY / c, tmp_path) for c in components]}))
    return documents(run(kubectl, "kustomize", tmp_path if components else DEPLOY / folder))


def _mask_generated_certificate(chart: dict[Any, Obj], kustomize: dict[Any, Obj]) -> bool:
    """Where the chart made the webhook's certificate itself, set aside what only that
    differs in (WEBHOOK's comment above); False where both ask cert-manager."""
    if any(kind == "Certificate" for kind, _, _ in chart):
        return False
    for identity in [i for i in kustomize if i[0] in ("Issuer", "Certificate")]:
        del kustomize[identity]
    del chart[WEBHOOK_SECRET]
    annotations = kustomize[WEBHOOK]["metadata"].pop("annotations")
    assert set(annotations) == {INJECT_CA}
    for hook in chart[WEBHOOK]["webhooks"]:
        assert hook["clientConfig"].pop("caBundle")
    return True


@pytest.mark.parametrize("values", sorted(SAME_AS))
def test_chart_renders_what_kustomize_builds(values: str, tmp_path: Path) -> None:
    """Full objects, after dropping Helm's labels and parsing ConfigMap entries; the
    chart leaves out only the Namespace (Helm's release namespace is made by
    --create-namespace; the pod-security label is in the chart's README). The webhook's
    certificate is masked where the chart generates it (all but the cert-manager values
    file, which compares whole); test_the_generated_certificate_serves_the_webhook checks
    it."""
    built = kustomize(tmp_path, *SAME_AS[values])
    (namespace,) = [o for o in built if o["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == NAMESPACE
    kustomized = by_identity([normalised(o) for o in built if o["kind"] != "Namespace"])
    # --no-hooks: the uninstall hook has no kustomize object (its steps are in
    # docs/operations.md, "Uninstall"; e2e/test_uninstall.py checks it).
    chart = by_identity([normalised(o) for o in documents(helm_template(values, "--no-hooks"))])
    assert WEBHOOK in kustomized
    masked = _mask_generated_certificate(chart, kustomized)
    assert masked is (values != "kube-scheduler-default-values.yaml")
    assert sorted(chart) == sorted(kustomized)
    for identity, obj in kustomized.items():
        assert chart[identity] == obj, identity
