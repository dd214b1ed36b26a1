"""The Helm chart (deploy/helm/raygate) with the real helm, built by the testbed: `helm lint`
and `helm template` for every documented values file (the chart's ci/), and every
rendered object accepted by the real API server (server dry run); the objects of each
setup against kustomize's are e2e/test_chart_kustomize.py's. Rendered as for a cluster of
the testbed's Kubernetes version, which is where the chart takes ray-scheduler's
kube-scheduler release from. Beyond each file: every raygate that serves is scraped when
monitoring is on, TLS values mount their Secrets, the schema refuses what helm used to
pass, a server config change rolls the pods, and the webhook's certificate the chart makes
by default serves its Service's name and survives an upgrade."""

from __future__ import annotations

import base64
import re
import socket
import ssl
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from e2e.chart import (
    CHART,
    NAMESPACE,
    VALUES,
    Obj,
    by_identity,
    documents,
    helm_template,
    pods,
    raygate_config,
    raygate_container,
    run,
    template_failure,
    tool,
)
from e2e.test_chart_kustomize import SAME_AS
from testbed.cluster import Testbed, running_testbed

pytestmark = pytest.mark.e2e

# Kinds whose CRD the testbed does not install (prometheus-operator's): not dry-run.
NO_CRD = {"ServiceMonitor", "PrometheusRule"}


def test_every_values_file_is_documented() -> None:
    readme = (CHART / "README.md").read_text()
    assert len(VALUES) >= 7
    for values in VALUES:
        assert f"ci/{values}" in readme, values
    assert set(SAME_AS) <= set(VALUES)


def test_chart_lints() -> None:
    helm = tool("helm", "helm")
    run(helm, "lint", "--strict", CHART)
    for values in VALUES:
        run(helm, "lint", "--strict", CHART, "--namespace", NAMESPACE, "--values",
            CHART / "ci" / values)


@pytest.mark.parametrize("values", VALUES)
def test_values_render(values: str) -> None:
    objects = documents(helm_template(values))
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "ConfigMap", "ClusterRole"} <= kinds
    assert "Namespace" not in kinds  # `helm install --create-namespace` makes it
    # The release's namespace; Volcano's ConfigMap; ray-scheduler's reader of kube-system.
    namespaces = {o["metadata"].get("namespace", NAMESPACE) for o in objects}
    assert namespaces <= {NAMESPACE, "volcano-system", "kube-system"}


def test_values_change_what_they_say(tmp_path: Path) -> None:
    production = by_identity(documents(helm_template("production-values.yaml")))
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
    images = {raygate_container(t)["image"] for t in pods(documents(
        helm_template("production-values.yaml", "--values", pinned))).values()}
    assert images == {f"ghcr.io/raygate-dev/raygate@{digest}"}
    kind = documents(helm_template("kind-values.yaml"))
    assert raygate_config(kind)["server"]["authz"]["mode"] in ("off", False)
    (budget,) = [o for o in kind if o["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1  # one replica, and a drain still proceeds
    secret = by_identity(documents(helm_template("kube-scheduler-default-secret-values.yaml")))
    assert not [k for k in secret if k[0] in ("Certificate", "Issuer")]
    (hook,) = secret["MutatingWebhookConfiguration", "", "raygate-ray-pods"]["webhooks"]
    assert hook["clientConfig"]["caBundle"]
    volumes = secret["Deployment", NAMESPACE, "raygate"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "my-raygate-webhook-tls"}} in volumes
    volcano = by_identity(documents(helm_template("volcano-values.yaml")))
    configmap = volcano["ConfigMap", "volcano-system", "volcano-scheduler-configmap"]
    assert configmap["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


@pytest.mark.parametrize("values", VALUES)
def test_every_raygate_that_serves_is_scraped(values: str) -> None:
    """With monitoring on, each Deployment that runs a raygate (ray-scheduler's sidecar
    included) is behind a Service the ServiceMonitor selects, on the raygate container's
    port that serves /metrics."""
    objects = documents(helm_template(values, "--set", "metrics.serviceMonitor.enabled=true"))
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    services = [o for o in objects if o["kind"] == "Service" and all(
        o["metadata"]["labels"].get(k) == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items())]
    serving = {name: t for name, t in pods(objects).items()
               if any(c["name"] == "raygate" for c in t["spec"]["containers"])}
    assert serving
    for name, template in serving.items():
        labels = template["metadata"]["labels"]
        behind = [s for s in services if all(labels.get(k) == v
                                             for k, v in s["spec"]["selector"].items())]
        assert behind, f"{values}: {name}'s raygate is behind no scraped Service"
        (port,) = [p for s in behind for p in s["spec"]["ports"] if p["name"] == endpoint["port"]]
        assert port["targetPort"] in {p["name"] for p in raygate_container(template)["ports"]}


@pytest.mark.parametrize(("values", "mutual"), [("tls-values.yaml", False),
                                                ("mtls-values.yaml", True)])
def test_tls_values_mount_their_secrets(values: str, mutual: bool) -> None:
    """Every raygate mounts the Secret at the files its config names; the probes speak what
    the port does (HTTPS, or TCP under mutual TLS); ray-scheduler calls its sidecar over
    HTTPS with the Secret's CA (and certificate, under mutual TLS); Prometheus too."""
    objects = documents(helm_template(values))
    config = raygate_config(objects)["server"]["tls"]
    assert bool(config["clientCA"]) is mutual
    for name, template in pods(objects).items():
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        container = raygate_container(template)
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
    scheduler = next(c for c in pods(objects)["ray-scheduler"]["spec"]["containers"]
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
        objects = documents(helm_template("kube-scheduler-second-values.yaml", *more))
        return {t["metadata"]["annotations"]["checksum/config"] for t in pods(objects).values()}
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
    rendered = run(tool("helm", "helm"), "template", "raygate", CHART, "--kube-version",
                   cluster)
    (scheduler,) = [c for c in pods(documents(rendered))["ray-scheduler"]["spec"]
                    ["containers"] if c["name"] == "kube-scheduler"]
    assert scheduler["image"] == image
    pinned = run(tool("helm", "helm"), "template", "raygate", CHART, "--kube-version",
                 cluster, "--set", "kubeScheduler.image.tag=v1.36.0")
    assert "registry.k8s.io/kube-scheduler:v1.36.0" in pinned


@pytest.mark.parametrize(("argv", "error"), [
    (["--set", "podAntiAfinity=required"], "podAntiAfinity"),
    (["--set", "replicas=two"], "replicas"),
    (["--set", "config.server.limits.maxBodyByte=1"], "maxBodyByte"),
    (["--set", "nameOverride=rg"], "nameOverride"),
])
def test_the_schema_refuses_what_helm_used_to_pass(argv: list[str], error: str) -> None:
    stderr = template_failure(*argv)
    assert error in stderr and re.search(r"schema|additional properties|expected",
                                         stderr, re.I), stderr


@pytest.mark.parametrize(("values", "error"), [
    # The schema's refusals name the key as a JSON pointer, the chart's own checks by path.
    ({"kubeScheduler": {"mode": "third"}}, "/kubeScheduler/mode"),
    ({"kueue": {"enabled": True}, "kubeScheduler": {"mode": "none"}}, "kueue.enabled needs"),
    ({"volcano": {"enabled": True}}, "volcano.enabled needs"),
    ({"podAntiAffinity": "sometimes"}, "/podAntiAffinity"),
    ({"webhook": {"tls": {"existingSecret": "mine"}}}, "and webhook.tls.caBundle go together"),
    ({"webhook": {"tls": {"existingSecret": "mine", "caBundle": "Y2E=", "certManager": {
        "enabled": True}}}}, "not both"),
    ({"tls": {"clientCASecretName": "ca"}}, "tls.clientCASecretName needs tls.secretName"),
    ({"kubeScheduler": {"mode": "none"}, "volcano": {"enabled": True},
      "tls": {"secretName": "t", "clientCASecretName": "ca"}}, "Volcano's extender client"),
])
def test_combinations_that_cannot_work_are_refused(tmp_path: Path, values: Obj,
                                                   error: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    stderr = template_failure("--values", path)
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
    objects = documents(helm_template(values))
    applied = [o for o in objects if o["kind"] not in NO_CRD]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(applied))
    result = blank.kubectl("apply", "--dry-run=server", "-f", str(path))
    assert result.stdout.count("(server dry run)") == len(applied), result.stdout


def _webhook(objects: dict[tuple[str, str, str], Obj]) -> Obj:
    (hook,) = objects["MutatingWebhookConfiguration", "", "raygate-ray-pods"]["webhooks"]
    found: Obj = hook
    return found


def _handshake(directory: Path, data: dict[str, str], ca_bundle: str) -> None:
    """A TLS handshake as the API server makes it: to raygate-webhook.<namespace>.svc,
    trusting caBundle alone, with the Secret's certificate and key on the other end."""
    for key, value in {**data, "ca-bundle": ca_bundle}.items():
        directory.joinpath(key).write_bytes(base64.b64decode(value))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    client = ssl.create_default_context(cafile=directory / "ca-bundle")
    ours, theirs = socket.socketpair()
    with ThreadPoolExecutor(1) as pool, ours, theirs:
        served = pool.submit(server.wrap_socket, theirs, server_side=True)
        client.wrap_socket(ours, server_hostname=f"raygate-webhook.{NAMESPACE}.svc").close()
        served.result(timeout=10).close()


def test_the_generated_certificate_serves_the_webhook(tmp_path: Path) -> None:
    """The default (no cert-manager): the chart's CA signs a certificate for the webhook's
    Service, mounted where every serving raygate reads it, and is the webhook's caBundle."""
    objects = by_identity(documents(helm_template("kube-scheduler-second-values.yaml")))
    assert not [kind for kind, _, _ in objects if kind in ("Issuer", "Certificate")]
    secret = objects["Secret", NAMESPACE, "raygate-webhook-tls"]
    assert secret["type"] == "kubernetes.io/tls"
    assert _webhook(objects)["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    _handshake(tmp_path, secret["data"], _webhook(objects)["clientConfig"]["caBundle"])
    template = pods(list(objects.values()))["ray-scheduler"]
    assert {"name": "webhook-tls", "secret": {"secretName": "raygate-webhook-tls"}} in (
        template["spec"]["volumes"])
    service = objects["Service", NAMESPACE, "raygate-webhook"]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "ray-scheduler"}


@pytest.mark.parametrize("values", VALUES)
def test_every_mode_serves_the_webhook_while_native_placement_is_on(values: str) -> None:
    """Whichever Deployment runs raygate serves the webhook, behind raygate-webhook; with
    config.server.placement.native off there is no webhook at all (extender only)."""
    objects = by_identity(documents(helm_template(values)))
    service = objects["Service", NAMESPACE, "raygate-webhook"]
    assert _webhook(objects)["clientConfig"]["service"]["name"] == "raygate-webhook"
    for name, template in pods(list(objects.values())).items():
        args = raygate_container(template)["args"]
        assert "--webhook-addr=0.0.0.0:9443" in args, name
        assert template["metadata"]["labels"]["app.kubernetes.io/name"] == (
            service["spec"]["selector"]["app.kubernetes.io/name"])
    off = documents(helm_template(values, "--set", "config.server.placement.native=off"))
    assert not [o for o in off if "webhook" in o["metadata"]["name"]]
    for name, template in pods(off).items():
        assert not [a for a in raygate_container(template)["args"] if "webhook" in a], name


def _helm(bed: Testbed, *argv: str) -> str:
    return run(tool("helm", "helm"), *argv, "--kubeconfig", bed.admin_kubeconfig,
               "--namespace", NAMESPACE)


def test_an_upgrade_keeps_the_generated_certificate(blank: Testbed) -> None:
    """`helm install`, then `helm upgrade` against the real API server: the chart finds
    the Secret it made (lookup) and keeps it, so the webhook's caBundle still signs what
    raygate serves. Last in this file: the release's objects would change what the dry
    runs above see."""
    values = str(CHART / "ci" / "kind-values.yaml")

    def current() -> tuple[Obj, str]:
        secret = yaml.safe_load(blank.kubectl(
            "get", "secret", "raygate-webhook-tls", "-n", NAMESPACE, "-o", "yaml").stdout)
        ca_bundle = blank.kubectl("get", "mutatingwebhookconfiguration", "raygate-ray-pods",
                                  "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}").stdout
        return secret["data"], ca_bundle
    _helm(blank, "install", "raygate", str(CHART), "--values", values)
    try:
        installed = current()
        assert installed[0]["ca.crt"] == installed[1]
        _helm(blank, "upgrade", "raygate", str(CHART), "--values", values,
              "--set", "config.server.log.level=debug")
        assert current() == installed
    finally:
        # No hook: its Job needs a job controller and a kubelet, which this blank control
        # plane has not (e2e/test_uninstall.py runs it).
        _helm(blank, "uninstall", "raygate", "--no-hooks")
