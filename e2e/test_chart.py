"""The Helm chart (deploy/helm/raygate) with the real helm, built by the testbed: `helm lint`
and `helm template` for every documented values file (the chart's ci/), the objects of
each setup equal to what the real kustomize (`kubectl kustomize`) builds from the matching
deploy/ folder, and every rendered object accepted by the real API server (server dry
run). Rendered as for a cluster of the testbed's Kubernetes version, which is where the
chart takes ray-scheduler's kube-scheduler release from. Beyond each file: every raygate
that serves is scraped when monitoring is on, TLS values mount their Secrets, the schema
refuses what helm used to pass, and a server config change rolls the pods."""

from __future__ import annotations

import re
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
# Helm's own annotations: the pods' checksum of their start-time config (so that `helm
# upgrade` rolls them), and `keep` on Volcano's ConfigMap (so that uninstall leaves it).
HELM_ANNOTATIONS = {"checksum/config", "helm.sh/resource-policy"}
UNORDERED = {"ports", "volumes", "volumeMounts", "env"}
# Kinds whose CRD the testbed does not install (prometheus-operator's): not dry-run.
NO_CRD = {"ServiceMonitor", "PrometheusRule"}
# The cluster the chart is rendered for: the testbed's Kubernetes.
KUBE_VERSION = COMPONENTS["kubernetes"].version
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


def helm_template(values: str, *more: str | Path) -> str:
    return _run(_tool("helm", "helm"), "template", "raygate", CHART, "--namespace", NAMESPACE,
                "--kube-version", KUBE_VERSION, "--values", CHART / "ci" / values, *more)


def _template_failure(*argv: str | Path) -> str:
    result = subprocess.run([str(_tool("helm", "helm")), "template", "raygate", str(CHART),
                             "--kube-version", KUBE_VERSION, *map(str, argv)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0, result.stdout[:500]
    return result.stderr


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


def _pods(objects: list[Obj]) -> dict[str, Obj]:
    """Deployment name -> its pod template."""
    return {o["metadata"]["name"]: o["spec"]["template"] for o in objects
            if o["kind"] == "Deployment"}


def _raygate(template: Obj) -> Obj:
    (container,) = [c for c in template["spec"]["containers"] if c["name"] == "raygate"]
    found: Obj = container
    return found


def _raygate_config(objects: list[Obj]) -> Obj:
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"
                    and o["metadata"]["name"] == "raygate-config"]
    config: Obj = yaml.safe_load(configmap["data"]["raygate.yaml"])
    return config


def test_values_change_what_they_say(tmp_path: Path) -> None:
    production = _by_identity(_documents(helm_template("production-values.yaml")))
    deployment = production["Deployment", NAMESPACE, "ray-scheduler"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert list(pod["affinity"]["podAntiAffinity"]) == [
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert ("Deployment", NAMESPACE, "raygate") not in production  # the sidecars serve
    for extra in ("ServiceMonitor", "PrometheusRule", "NetworkPolicy"):
        assert (extra, NAMESPACE, "raygate") in production, extra
    digest = "sha256:" + "0123456789abcdef" * 4
    pinned = tmp_path / "digest.yaml"
    pinned.write_text(yaml.safe_dump({"image": {"digest": digest}}))
    images = {_raygate(t)["image"] for t in _pods(_documents(
        helm_template("production-values.yaml", "--values", pinned))).values()}
    assert images == {f"ghcr.io/raygate-dev/raygate@{digest}"}
    kind = _documents(helm_template("kind-values.yaml"))
    assert _raygate_config(kind)["server"]["authz"]["mode"] in ("off", False)
    (budget,) = [o for o in kind if o["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1  # one replica, and a drain still proceeds
    secret = _by_identity(_documents(helm_template("kube-scheduler-default-secret-values.yaml")))
    assert not [k for k in secret if k[0] in ("Certificate", "Issuer")]
    (hook,) = secret["MutatingWebhookConfiguration", "", "raygate-ray-pods"]["webhooks"]
    assert hook["clientConfig"]["caBundle"]
    volumes = secret["Deployment", NAMESPACE, "raygate"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "my-raygate-webhook-tls"}} in volumes
    volcano = _by_identity(_documents(helm_template("volcano-values.yaml")))
    configmap = volcano["ConfigMap", "volcano-system", "volcano-scheduler-configmap"]
    assert configmap["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


@pytest.mark.parametrize("values", VALUES)
def test_every_raygate_that_serves_is_scraped(values: str) -> None:
    """With monitoring on, each Deployment that runs a raygate (ray-scheduler's sidecar
    included) is behind a Service the ServiceMonitor selects, on the raygate container's
    port that serves /metrics."""
    objects = _documents(helm_template(values, "--set", "metrics.serviceMonitor.enabled=true"))
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    services = [o for o in objects if o["kind"] == "Service" and all(
        o["metadata"]["labels"].get(k) == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items())]
    serving = {name: t for name, t in _pods(objects).items()
               if any(c["name"] == "raygate" for c in t["spec"]["containers"])}
    assert serving
    for name, template in serving.items():
        labels = template["metadata"]["labels"]
        behind = [s for s in services if all(labels.get(k) == v
                                             for k, v in s["spec"]["selector"].items())]
        assert behind, f"{values}: {name}'s raygate is behind no scraped Service"
        (port,) = [p for s in behind for p in s["spec"]["ports"] if p["name"] == endpoint["port"]]
        assert port["targetPort"] in {p["name"] for p in _raygate(template)["ports"]}


@pytest.mark.parametrize(("values", "mutual"), [("tls-values.yaml", False),
                                                ("mtls-values.yaml", True)])
def test_tls_values_mount_their_secrets(values: str, mutual: bool) -> None:
    """Every raygate mounts the Secret at the files its config names; the probes speak what
    the port does (HTTPS, or TCP under mutual TLS); ray-scheduler calls its sidecar over
    HTTPS with the Secret's CA (and certificate, under mutual TLS); Prometheus too."""
    objects = _documents(helm_template(values))
    config = _raygate_config(objects)["server"]["tls"]
    assert bool(config["clientCA"]) is mutual
    for name, template in _pods(objects).items():
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        container = _raygate(template)
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        for key, secret in (("cert", "raygate-tls"), ("key", "raygate-tls"),
                            ("clientCA", "raygate-client-ca")):
            if not config[key]:
                continue
            directory, _, file = config[key].rpartition("/")
            assert volumes[mounts[directory]]["secret"]["secretName"] == secret, (name, key)
            items = volumes[mounts[directory]]["secret"].get("items")
            assert items is None or file in {i["path"] for i in items}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if mutual:
                assert container[probe]["tcpSocket"] == {"port": "http"}
            else:
                assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    (scheduler_config,) = [o for o in objects if o["kind"] == "ConfigMap"
                           and o["metadata"]["name"] == "ray-scheduler-config"]
    (extender,) = yaml.safe_load(scheduler_config["data"]["config.yaml"])["extenders"]
    assert extender["urlPrefix"].startswith("https://") and extender["enableHTTPS"] is True
    tls = extender["tlsConfig"]
    assert tls["serverName"] == f"raygate.{NAMESPACE}.svc"
    scheduler = next(c for c in _pods(objects)["ray-scheduler"]["spec"]["containers"]
                     if c["name"] == "kube-scheduler")
    mounted = {m["mountPath"] for m in scheduler["volumeMounts"]}
    for key in ("caFile", "certFile", "keyFile") if mutual else ("caFile",):
        assert tls[key].rpartition("/")[0] in mounted, key
    assert ("certFile" in tls) is mutual
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"] == {"secret": {"name": "raygate-tls", "key": "ca.crt"}}
    assert ("keySecret" in endpoint["tlsConfig"]) is mutual


def test_a_server_config_change_rolls_the_pods_and_a_policy_change_does_not() -> None:
    def checksums(*more: str) -> set[str]:
        objects = _documents(helm_template("kube-scheduler-second-values.yaml", *more))
        return {t["metadata"]["annotations"]["checksum/config"] for t in _pods(objects).values()}
    before = checksums()
    assert len(before) == 1
    assert checksums("--set", "config.server.log.level=debug") != before
    assert checksums("--set", "config.policy.thrashGuardSeconds=60") == before
    assert checksums("--set", "podAnnotations.team=ml") == before


@pytest.mark.parametrize(("cluster", "image"), [
    ("v1.37.2", "registry.k8s.io/kube-scheduler:v1.37.2"),
    ("v1.30.4-eks-a737599", "registry.k8s.io/kube-scheduler:v1.30.4"),
])
def test_ray_scheduler_runs_the_clusters_kube_scheduler(cluster: str, image: str) -> None:
    rendered = _run(_tool("helm", "helm"), "template", "raygate", CHART, "--kube-version",
                    cluster)
    scheduler = _pods(_documents(rendered))["ray-scheduler"]["spec"]["containers"][0]
    assert scheduler["image"] == image
    pinned = _run(_tool("helm", "helm"), "template", "raygate", CHART, "--kube-version",
                  cluster, "--set", "kubeScheduler.image.tag=v1.36.0")
    assert "registry.k8s.io/kube-scheduler:v1.36.0" in pinned


@pytest.mark.parametrize(("argv", "error"), [
    (["--set", "podAntiAfinity=required"], "podAntiAfinity"),
    (["--set", "replicas=two"], "replicas"),
    (["--set", "config.server.limits.maxBodyByte=1"], "maxBodyByte"),
    (["--set", "nameOverride=rg"], "nameOverride"),
])
def test_the_schema_refuses_what_helm_used_to_pass(argv: list[str], error: str) -> None:
    stderr = _template_failure(*argv)
    assert error in stderr and re.search(r"schema|additional properties|expected",
                                         stderr, re.I), stderr


@pytest.mark.parametrize(("values", "error"), [
    # The schema's refusals name the key as a JSON pointer, the chart's own checks by path.
    ({"kubeScheduler": {"mode": "third"}}, "/kubeScheduler/mode"),
    ({"kueue": {"enabled": True}, "kubeScheduler": {"mode": "none"}}, "kueue.enabled needs"),
    ({"volcano": {"enabled": True}}, "volcano.enabled needs"),
    ({"podAntiAffinity": "sometimes"}, "/podAntiAffinity"),
    ({"kubeScheduler": {"mode": "default"}, "webhook": {"tls": {"certManager": {
        "enabled": False}}}}, "webhook.tls"),
    ({"tls": {"clientCASecretName": "ca"}}, "tls.clientCASecretName needs tls.secretName"),
    ({"kubeScheduler": {"mode": "none"}, "volcano": {"enabled": True},
      "tls": {"secretName": "t", "clientCASecretName": "ca"}}, "Volcano's extender client"),
])
def test_combinations_that_cannot_work_are_refused(tmp_path: Path, values: Obj,
                                                   error: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    stderr = _template_failure("--values", path)
    assert error in stderr, stderr


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
