"""Every manifest in deploy/ validated offline: core objects against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict), RayClusters by raygate's own loader, scheduler
configs by structural checks of the exact key spellings, and every port, probe, route and
verb checked against what raygate really serves."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot_files import load_files
from raygate.server.cli import _parser
from raygate.server.config.file import load_config_file
from raygate.server.config.settings import ServeSettings, parse_addr
from raygate.server.fronts.health import health_routes
from raygate.server.fronts.scheduler import SchedulerExtender, scheduler_routes
from raygate.server.fronts.volcano import VolcanoExtender, volcano_routes
from raygate.server.fronts.webhook import RayPodWebhook
from raygate.server.kube.reviews import GROUP, RESOURCE, Access
from raygate.server.metrics.registry import Metrics
from testbed.build import COMPONENTS
from testkit.kustomize import find, render

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SETUPS = ["base", "kube-scheduler-second", "kube-scheduler-default", "volcano", "kueue"]
K8S_VERSION = "1.34"
CACHE = ClusterCache(PolicyConfig(), "test")
SERVED = {**health_routes(CACHE), **scheduler_routes(SchedulerExtender(CACHE)),
          **volcano_routes(VolcanoExtender(CACHE))}
DEFAULTS = _parser().parse_args(["serve"])
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"ghcr.io/raygate-dev/raygate:{VERSION}"  # fully qualified, at the package's version
Obj = dict[str, Any]


@pytest.mark.parametrize("setup", SETUPS)
def test_core_objects_are_valid_kubernetes(setup: str) -> None:
    objects = render(DEPLOY / setup)
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            assert obj["kind"] in ("Issuer", "Certificate")  # not in the core schemas
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("setup", SETUPS)
def test_example_rayclusters_load(setup: str) -> None:
    examples = sorted((DEPLOY / setup).glob("example-*.yaml"))
    objects = load_files(examples)
    assert len(objects.rayclusters) == len(examples)


def _addr_port(args: list[str], flag: str) -> int:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return parse_addr(value, flag)[1]


def _raygate_containers(objects: list[Obj]) -> list[tuple[Obj, Obj]]:
    return [(o, c) for o in objects if o["kind"] == "Deployment"
            for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "raygate"]


@pytest.mark.parametrize("setup", SETUPS)
def test_raygate_containers_match_the_server(setup: str) -> None:
    objects = render(DEPLOY / setup)
    pairs = _raygate_containers(objects)
    assert pairs
    for deployment, container in pairs:
        args = container["args"]
        assert args[0] == "serve"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["http"] == _addr_port(args, "--http-addr") == parse_addr(
            DEFAULTS.http_addr, "")[1]
        assert ports["grpc"] == _addr_port(args, "--grpc-addr") == parse_addr(
            DEFAULTS.grpc_addr, "")[1]
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert container[probe]["httpGet"]["path"] in SERVED
            assert container[probe]["httpGet"]["port"] == "http"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["resources"]["requests"] and container["resources"]["limits"]
        assert deployment["spec"]["replicas"] == 2
        # Preferred: a one-node cluster (kind, minikube) runs both replicas.
        assert list(pod["affinity"]["podAntiAffinity"]) == [
            "preferredDuringSchedulingIgnoredDuringExecution"]
        assert container["image"] == IMAGE
        if "--webhook-addr" in " ".join(args):
            assert ports["webhook"] == _addr_port(args, "--webhook-addr")


def test_the_config_map_is_a_valid_raygate_config(tmp_path: Path) -> None:
    configmap = find(render(DEPLOY / "base"), "ConfigMap", "raygate-config")
    path = tmp_path / "raygate.yaml"
    path.write_text(configmap["data"]["raygate.yaml"])
    assert load_config_file(str(path)) == PolicyConfig()  # the shipped defaults, spelled out


def _grants(role: Obj) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule; no rule may narrow by resourceNames."""
    assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"])
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


READ = ("get", "list", "watch")
FOLLOWED = {("", "nodes"), ("", "pods"), ("ray.io", "rayclusters"),
            ("scheduling.volcano.sh", "podgroups"), ("kueue.x-k8s.io", "workloads")}
WATCHED_ONLY = {("", "events"), ("karpenter.sh", "nodeclaims"),
                ("scheduling.k8s.io", "podgroups"),
                *(("resource.k8s.io", r) for r in (
                    "deviceclasses", "resourceslices", "resourceclaims",
                    "resourceclaimtemplates"))}


def test_raygate_reads_and_writes_only_pods_its_budgets_and_events() -> None:
    """Read the kinds the cache follows (the node autoscalers' pod events, NodeClaims and
    the DRA objects with list and watch alone), patch pods (the release of a gated pod, the
    stale-refusal annotation), patch RayClusters (its own scale gates), say Events
    (create; patch a series' count), keep
    the floors' PodDisruptionBudgets (server-side apply: create and patch; list at
    start; delete) and create the two reviews of --authz (which the API server answers
    and never stores): nothing more — no get or watch on budgets, no update of
    RayClusters' finalizers (blockOwnerDeletion is false)."""
    role = find(render(DEPLOY / "base"), "ClusterRole", "raygate")
    assert _grants(role) == {(g, r, v) for g, r in FOLLOWED for v in READ} | {
        # Events and NodeClaims: list and watch only (the cache never GETs one).
        *{(g, r, v) for g, r in WATCHED_ONLY for v in ("list", "watch")},
        ("", "pods", "patch"),
        ("ray.io", "rayclusters", "patch"),  # its own scale gates (JSON Patch)
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        *{("policy", "poddisruptionbudgets", v) for v in ("list", "create", "patch",
                                                          "delete")},
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    binding = find(render(DEPLOY / "base"), "ClusterRoleBinding", "raygate")
    assert binding["roleRef"]["name"] == "raygate"
    assert [s["name"] for s in binding["subjects"]] == ["raygate"]


@pytest.mark.parametrize(("setup", "account"), [("base", "raygate"),
                                              ("kube-scheduler-second", "ray-scheduler")])
def test_leader_election_holds_one_lease_and_nothing_more(setup: str, account: str) -> None:
    """In raygate's namespace: create a Lease (a create names no object a rule could
    narrow to), get and update the one raygate's settings name; no list, watch, patch or
    delete. Bound to the ServiceAccount the serving raygate runs as, whose pods say
    their name and namespace (the identity, and the Lease's namespace)."""
    objects = render(DEPLOY / setup)
    role = find(objects, "Role", "raygate-leader-election")
    assert role["metadata"]["namespace"] == "raygate-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [ServeSettings().leader_election_lease_name],
         "verbs": ["get", "update"]}]
    bindings = [o for o in objects if o["kind"] == "RoleBinding"
                and o["roleRef"]["name"] == "raygate-leader-election"]
    assert {(b["metadata"]["namespace"], s["name"]) for b in bindings
            for s in b["subjects"]} >= {("raygate-system", account)}
    ((deployment, container),) = _raygate_containers(objects)
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]} == {
        "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


@pytest.mark.parametrize("setup", SETUPS)
def test_every_service_account_is_one_a_pod_runs_as(setup: str) -> None:
    """No account bound to raygate's roles that nothing runs as: in kube-scheduler-second
    and kueue ray-scheduler's account holds them, and deploy/base's raygate account goes
    with its Deployment."""
    objects = render(DEPLOY / setup)
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    used = {o["spec"]["template"]["spec"]["serviceAccountName"] for o in objects
            if o["kind"] == "Deployment"}
    bound = {s["name"] for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
             for s in o["subjects"] if s["kind"] == "ServiceAccount"}
    assert accounts == used == bound


def test_status_reader_role_grants_what_authz_checks() -> None:
    """The example role for status callers: exactly the access raygate/server/authz/ asks a
    SubjectAccessReview about, and bound to nobody by default."""
    objects = render(DEPLOY / "base")
    role = find(objects, "ClusterRole", "raygate-status-reader")
    checked = {(GROUP, RESOURCE, Access.to(ns).verb) for ns in ("team-a", "")}
    assert _grants(role) == checked == {("ray.io", "rayclusters", "get"),
                                        ("ray.io", "rayclusters", "list")}
    assert not [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
                and o["roleRef"]["name"] == "raygate-status-reader"]


def test_services_route_to_named_container_ports() -> None:
    for setup in SETUPS:
        objects = render(DEPLOY / setup)
        container_ports = {p["name"] for _, c in _raygate_containers(objects)
                           for p in c["ports"]}
        for service in (o for o in objects if o["kind"] == "Service"):
            for port in service["spec"]["ports"]:
                assert port["targetPort"] in container_ports, (setup, service["metadata"])


def _selects(selector: dict[str, str], deployment: Obj) -> bool:
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("setup", SETUPS)
def test_every_serving_raygate_is_behind_the_service(setup: str) -> None:
    """The Service `raygate` (the admission API, and what a ServiceMonitor scrapes) selects
    every pod that runs raygate and nothing else: in the sidecar setups ray-scheduler's,
    as their raygate answers the scheduler's calls (docs/operations.md's alerts need
    their metrics)."""
    objects = render(DEPLOY / setup)
    selector = find(objects, "Service", "raygate")["spec"]["selector"]
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    serving = {d["metadata"]["name"] for d, _ in _raygate_containers(objects)}
    assert {d["metadata"]["name"] for d in deployments if _selects(selector, d)} == serving


@pytest.mark.parametrize("setup", SETUPS)
def test_one_raygate_cache_per_replica_that_serves(setup: str) -> None:
    """Each raygate keeps a full cache of every pod and node (1 GiB requested): the
    sidecar setups run it only in ray-scheduler's two pods, not in a Deployment of its
    own beside them."""
    objects = render(DEPLOY / setup)
    pairs = _raygate_containers(objects)
    assert len(pairs) == 1
    (deployment, _), = pairs
    scheduler = [o for o in objects if o["kind"] == "Deployment"
                 and o["metadata"]["name"] == "ray-scheduler"]
    assert deployment["metadata"]["name"] == ("ray-scheduler" if scheduler else "raygate")


@pytest.mark.parametrize("setup", SETUPS)
def test_disruption_budgets_let_a_drain_proceed(setup: str) -> None:
    """One pod at a time, whatever the replicas: `minAvailable: 1` over one replica would
    block every drain of its node."""
    objects = render(DEPLOY / setup)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert budgets
    for budget in budgets:
        assert budget["spec"] == {"maxUnavailable": 1, "selector": budget["spec"]["selector"]}
        (deployment,) = [d for d in deployments
                         if _selects(budget["spec"]["selector"]["matchLabels"], d)]
        assert deployment["metadata"]["name"] == budget["metadata"]["name"]


def test_the_kube_scheduler_shipped_is_the_one_tested() -> None:
    """ray-scheduler's image is the kube-scheduler release the testbed runs (the chart
    takes the cluster's own; e2e/test_chart.py renders it at this version)."""
    images = [c["image"] for setup in SETUPS for o in render(DEPLOY / setup)
              if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"]
              if c["name"] == "kube-scheduler"]
    assert images
    tested = COMPONENTS["kubernetes"].version  # testbed/modules/kubernetes/go.mod
    assert set(images) == {f"registry.k8s.io/kube-scheduler:{tested}"}


EXTENDER_KEYS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight",
                 "bindVerb", "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable",
                 "managedResources", "ignorable"}


def _scheduler_configs() -> list[tuple[str, Obj]]:
    second = find(render(DEPLOY / "kube-scheduler-second"), "ConfigMap", "ray-scheduler-config")
    return [
        ("kube-scheduler-second", yaml.safe_load(second["data"]["config.yaml"])),
        ("kube-scheduler-default",
         yaml.safe_load((DEPLOY / "kube-scheduler-default/scheduler-config.yaml").read_text())),
    ]


@pytest.mark.parametrize(("setup", "config"), _scheduler_configs(),
                         ids=[s for s, _ in _scheduler_configs()])
def test_kube_scheduler_configuration(setup: str, config: Obj) -> None:
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (extender,) = config["extenders"]
    assert set(extender) <= EXTENDER_KEYS, set(extender) - EXTENDER_KEYS  # exact spellings
    assert isinstance(extender["httpTimeout"], str)
    assert re.fullmatch(r"\d+(ms|s)", extender["httpTimeout"])
    assert isinstance(extender["nodeCacheCapable"], bool) and extender["nodeCacheCapable"]
    assert extender["weight"] > 0 and isinstance(extender["weight"], int)
    assert extender["ignorable"] is True
    match = re.fullmatch(r"http://(?P<host>[^:/]+):(?P<port>\d+)(?P<path>/\w+)",
                         extender["urlPrefix"])
    assert match, extender["urlPrefix"]
    assert int(match["port"]) == parse_addr(DEFAULTS.http_addr, "")[1]
    for verb in ("filterVerb", "prioritizeVerb", "preemptVerb"):
        assert f"{match['path']}/{extender[verb]}" in SERVED
    for resource in extender.get("managedResources", []):
        assert set(resource) <= {"name", "ignoredByScheduler"}
        assert "/" in resource["name"]  # an extended resource name
    if setup == "kube-scheduler-second":
        assert match["host"] == "127.0.0.1"
        assert config["profiles"] == [{"schedulerName": "ray-scheduler"}]
    else:
        # The marker is off by default (it blocks node autoscalers), so nothing scopes
        # the extender: raygate answers a non-Ray pod at once.
        assert "managedResources" not in extender
        assert ServeSettings().webhook_marker == "off"
        service = find(render(DEPLOY / setup), "Service", "raygate")
        assert service["spec"]["clusterIP"] == match["host"]


def test_ray_scheduler_examples_use_it() -> None:
    for setup in ("kube-scheduler-second", "kueue"):
        cluster = yaml.safe_load((DEPLOY / setup / "example-raycluster.yaml").read_text())
        templates = [cluster["spec"]["headGroupSpec"]["template"]] + [
            g["template"] for g in cluster["spec"]["workerGroupSpecs"]]
        assert all(t["spec"]["schedulerName"] == "ray-scheduler" for t in templates)
    kueue = yaml.safe_load((DEPLOY / "kueue/example-raycluster.yaml").read_text())
    assert kueue["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert kueue["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] == "true"
    volcano = yaml.safe_load((DEPLOY / "volcano/example-raycluster.yaml").read_text())
    assert volcano["metadata"]["labels"]["volcano.sh/queue-name"]


@pytest.mark.parametrize("setup", SETUPS[1:])
def test_every_setup_serves_the_native_placement_webhook(setup: str) -> None:
    """Every setup but deploy/base alone gates Ray pods (docs/native-placement.md): the
    webhook configuration calls a route raygate serves, through the Service
    raygate-webhook, which selects the pods whose raygate listens there with the
    certificate cert-manager issues for that Service and injects the CA of."""
    objects = render(DEPLOY / setup)
    config = find(objects, "MutatingWebhookConfiguration", "raygate-ray-pods")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert hook["objectSelector"]["matchLabels"] == {"ray.io/is-ray-node": "yes"}
    assert hook["timeoutSeconds"] <= 10
    assert hook["admissionReviewVersions"] == ["v1"]
    client = hook["clientConfig"]["service"]
    webhook = RayPodWebhook(ClusterCache(PolicyConfig(), "test"), Metrics(), place=True,
                            marker=False)
    assert client["path"] in webhook.routes()
    service = find(objects, "Service", client["name"])
    ((deployment, container),) = _raygate_containers(objects)
    assert _selects(service["spec"]["selector"], deployment)
    assert [d for d in objects if d["kind"] == "Deployment"
            and _selects(service["spec"]["selector"], d)] == [deployment]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == client["port"]]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == _addr_port(container["args"], "--webhook-addr")
    certificate = find(objects, "Certificate", "raygate-webhook")
    assert f"{client['name']}.{client['namespace']}.svc" in certificate["spec"]["dnsNames"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    for flag in ("--webhook-cert", "--webhook-key"):
        (path,) = [a.split("=", 1)[1] for a in container["args"] if a.startswith(f"{flag}=")]
        secret = volumes[mounts[path.rpartition("/")[0]]]["secret"]
        assert secret["secretName"] == certificate["spec"]["secretName"], flag
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}")


def test_the_webhook_patch_keeps_the_args_of_the_raygate_it_patches() -> None:
    """../native-placement gives `args` whole (a list without a merge key): base's and
    the sidecar's own, unchanged, then the webhook's listener and certificate."""
    patch = yaml.safe_load((DEPLOY / "native-placement" / "serve-webhook.yaml").read_text())
    (patched,) = patch["spec"]["template"]["spec"]["containers"]
    for setup, name in (("base", "raygate"), ("kube-scheduler-second", "ray-scheduler")):
        (own,) = [c for c in yaml.safe_load_all((DEPLOY / setup / (
            "deployment.yaml" if setup == "base" else "scheduler.yaml")).read_text())
            if c and c["kind"] == "Deployment" and c["metadata"]["name"] == name]
        (container,) = [c for c in own["spec"]["template"]["spec"]["containers"]
                        if c["name"] == "raygate"]
        assert patched["args"][:len(container["args"])] == container["args"], setup
        assert [a.split("=")[0] for a in patched["args"][len(container["args"]):]] == [
            "--webhook-addr", "--webhook-cert", "--webhook-key"]


PROFILE = DEPLOY / "ray-autoscaler" / "raygate-autoscaler.sh"


@pytest.mark.parametrize(("command", "url", "runs"), [
    # KubeRay 1.6.1's BuildAutoscalerContainer args, with the $(VAR)s expanded by the kubelet.
    ("ray kuberay-autoscaler --cluster-name demo --cluster-namespace ray", "http://raygate:8888",
     "raygate-autoscaler --cluster-name demo --cluster-namespace ray"),
    ("ray kuberay-autoscaler --cluster-name demo --cluster-namespace ray", "",
     "ray kuberay-autoscaler --cluster-name demo --cluster-namespace ray"),
    ("ray status", "http://raygate:8888", "ray status"),
])
def test_autoscaler_login_profile_runs_raygate_autoscaler(tmp_path: Path, command: str,
                                                          url: str, runs: str) -> None:
    """What the autoscaler image's login shell runs for KubeRay's command (the shell
    itself, `bash -lc`, reads /etc/profile.d in the image; here the profile is sourced)."""
    for name in ("ray", "raygate-autoscaler"):
        stub = tmp_path / name
        stub.write_text(f'#!/bin/sh\necho {name} "$@"\n')
        stub.chmod(0o755)
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f'source "$1"; {command}', "_", str(PROFILE)],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "RAYGATE_URL": url},
        capture_output=True, text=True, timeout=10, check=True)
    assert result.stdout.strip() == runs
