"""The write bounds on the RayCluster scale-gate entries raygate is to write (issue #40), and
what the policies cost, on a control plane of this module's own: kube-apiserver (v1.37) with
the write bounds the chart renders for raygate's own ServiceAccount (``raygate``, every mode
but ``second``), deploy/base's RBAC, and a RayCluster CRD with scale gates.

KubeRay 1.6.1's CRD (the testbed's) has no ``scaleGate``; KubeRay's merged ScaleGate
(ray-project/kuberay#5094) is not in a release this testbed builds. So the CRD here is
1.6.1's with two changes, and nothing else: ``workerGroupSpecs[].scaleStrategy.scaleGate``,
a list keyed by ``name`` (``x-kubernetes-list-type: map``) of ``{name, reason, message}``
strings (``name`` required), as #5094 describes it; and ``workerGroupSpecs`` itself a list
keyed by ``groupName``, without which a server-side apply of one group's gate would replace
every group. A kube-controller-manager with only the policies' type-checking controller and
the ServiceAccount controller (pods need their namespace's ``default``) runs beside it.

Cost: the API server stops an expression past its cost limit and, the policies failing
closed, refuses the write. A pod of 1.3 MB and a RayCluster of 60 worker groups pass; a pod
whose required node affinity is 60 terms of 100 expressions each is past the limit for a
release with a rule, and raygate's fail-open release (the gate alone) still passes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.objects import Group, raycluster
from e2e.write_bounds import account, apply_bounds, grant_raycluster_writes, pod, refused, view
from raygate.policy.config import PolicyConfig
from raygate.policy.native import GATE, LABEL_ROLE, LABEL_RULE, NativeRule, release_patch
from raygate.server.controllers.gate_release import FAILED_OPEN
from raygate.server.kube.client import KubeTransport
from raygate.server.kube.writes import FIELD_MANAGER
from testbed.api import KubeApi
from testbed.build import COMPONENTS
from testbed.cluster import DEPLOY, Testbed, binary
from testbed.processes import wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "ray"
CLUSTERS = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
KUEUE = "kueue.k8s.io/quota-exceeded"
SCALE_GATES = "only its own scale-gate entries (raygate.io/...) of a RayCluster"
SCALE_GATE = {
    "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
    "items": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "reason": {"type": "string"},
        "message": {"type": "string"}}}}


def scale_gate_crd() -> str:
    """KubeRay 1.6.1's RayCluster CRD with scale gates (the module's docstring)."""
    crd = yaml.safe_load(
        (COMPONENTS["kuberay"].path("crds") / "ray.io_rayclusters.yaml").read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    groups = v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "workerGroupSpecs"]
    groups.update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["groupName"]})
    groups["items"]["properties"]["scaleStrategy"]["properties"]["scaleGate"] = SCALE_GATE
    return yaml.safe_dump(crd)


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    started = Testbed(tmp_path_factory.mktemp("write-bounds"), control_plane_only=True)
    started._install_crds = lambda: None  # type: ignore[method-assign]  # ours, below
    started.start()
    try:
        kubeconfig = started.admin_kubeconfig
        started.run("kube-controller-manager", [
            binary("kubernetes", "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--secure-port=0",
            "--controllers=validatingadmissionpolicy-status-controller,serviceaccount",
            "--leader-elect=false"])
        started.kubectl("apply", "--server-side", "-f", "-", input=scale_gate_crd())
        wait_for("the RayCluster CRD established", lambda: started.kubectl(
            "wait", "--for=condition=Established", "--timeout=10s",
            "crd/rayclusters.ray.io", check=False).returncode == 0, 60)
        for manifest in ("namespace.yaml", "rbac.yaml"):
            started.kubectl("apply", "-f", str(DEPLOY / "base" / manifest))
        started.kubectl("create", "namespace", NAMESPACE)
        wait_for("the default ServiceAccount", lambda: started.api().exists(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"), 60)
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def policies(bed: Testbed) -> list[dict[str, Any]]:
    return apply_bounds(bed, "raygate-only-values.yaml")


@pytest.fixture(scope="module")
def raygate(bed: Testbed, policies: list[dict[str, Any]],
            ) -> Iterator[tuple[KubeTransport, KubeApi]]:
    revoke = grant_raycluster_writes(bed, "raygate")
    transport, plain = account(bed, "raygate")
    yield transport, plain
    transport.close()
    revoke()


def gates_apply(name: str, group: str, *entries: dict[str, str], **more: Any) -> dict[str, Any]:
    """A server-side apply of ``group``'s scale-gate ``entries`` (and ``more`` of it)."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"workerGroupSpecs": [{"groupName": group, **more,
                                           "scaleStrategy": {"scaleGate": list(entries)}}]}}


def apply(api: KubeApi, manager: str, body: dict[str, Any]) -> dict[str, Any]:
    return api.request("PATCH", f"{CLUSTERS}/{body['metadata']['name']}", body,
                       "application/apply-patch+yaml",
                       query=[("fieldManager", manager), ("force", "true")])


def entries(api: KubeApi, name: str, group: int = 0) -> list[dict[str, str]]:
    spec = api.get(f"{CLUSTERS}/{name}")["spec"]["workerGroupSpecs"][group]
    found: list[dict[str, str]] = spec.get("scaleStrategy", {}).get("scaleGate", [])
    return found


def test_the_policies_type_check_against_a_crd_with_scale_gates(
        policies: list[dict[str, Any]]) -> None:
    for policy in policies:
        (condition,) = policy["spec"]["matchConditions"]
        assert condition["expression"].endswith(":raygate'")
        assert not policy["status"].get("typeChecking", {}).get("expressionWarnings"), policy


def test_raygates_scale_gate_entries_pass_beside_another_controllers(
        bed: Testbed, raygate: tuple[KubeTransport, KubeApi]) -> None:
    plain, admin = raygate[1], bed.api()
    admin.create(CLUSTERS, raycluster("gated", NAMESPACE, "none", [Group("g", 1, "1")]))
    apply(admin, "kueue", gates_apply("gated", "g", {"name": KUEUE, "reason": "Quota"}))
    held = {"name": "raygate.io/scale-up", "reason": "ScaleUpHeld", "message": "3 of 4 fit"}
    apply(plain, FIELD_MANAGER, gates_apply("gated", "g", held))
    assert {e["name"] for e in entries(admin, "gated")} == {KUEUE, held["name"]}
    other = {"name": "raygate.io/other", "reason": "Other"}
    apply(plain, FIELD_MANAGER, gates_apply("gated", "g", {**held, "message": "4 of 4"}, other))
    apply(plain, FIELD_MANAGER, gates_apply("gated", "g"))  # raygate's own, removed
    assert entries(admin, "gated") == [{"name": KUEUE, "reason": "Quota"}]


WORKERS = {"minReplicas": 0, "maxReplicas": 1, "rayStartParams": {}, "template": {
    "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]}}}
REFUSED = [
    ("another controller's entry changed",
     gates_apply("refused", "g", {"name": KUEUE, "reason": "Mine now"})),
    ("an entry under another name", gates_apply("refused", "g", {"name": "example.com/x"})),
    ("replicas with raygate's entry", gates_apply(
        "refused", "g", {"name": "raygate.io/scale-up"}, replicas=4)),
    ("a worker group added", gates_apply(
        "refused", "new", {"name": "raygate.io/scale-up"}, **WORKERS)),
]


@pytest.mark.parametrize(("case", "body"), REFUSED, ids=[r[0] for r in REFUSED])
def test_other_raycluster_applies_are_refused(bed: Testbed, raygate: tuple[KubeTransport, KubeApi],
                                              case: str, body: dict[str, Any]) -> None:
    """Each apply, and the removal of Kueue's entry by a JSON patch."""
    admin = bed.api()
    if not admin.exists(f"{CLUSTERS}/refused"):
        admin.create(CLUSTERS, raycluster("refused", NAMESPACE, "none", [Group("g", 1, "1")]))
        apply(admin, "kueue", gates_apply("refused", "g", {"name": KUEUE, "reason": "Quota"}))
    assert SCALE_GATES in refused(lambda: apply(raygate[1], FIELD_MANAGER, body))
    removal = [{"op": "remove", "path": "/spec/workerGroupSpecs/0/scaleStrategy/scaleGate/0"}]
    assert SCALE_GATES in refused(lambda: raygate[1].json_patch(f"{CLUSTERS}/refused", removal))


def test_a_raycluster_of_60_large_worker_groups_is_within_the_cost(
        bed: Testbed, raygate: tuple[KubeTransport, KubeApi]) -> None:
    env = [{"name": f"E{i}", "value": "x" * 20} for i in range(100)]
    groups = [Group(f"g{i}", 1, "1", pod_spec={"containers": [
        {"name": "ray-worker", "image": "rayproject/ray:2.60.0", "env": env}]})
        for i in range(60)]
    bed.api().create(CLUSTERS, raycluster("large", NAMESPACE, "none", groups))
    apply(raygate[1], FIELD_MANAGER, gates_apply("large", "g59", {"name": "raygate.io/a"}))
    assert entries(bed.api(), "large", 59) == [{"name": "raygate.io/a"}]


def narrowed_terms(terms: int, expressions: int) -> dict[str, Any]:
    """A required node affinity of ``terms`` terms alike but for their last expression,
    the costliest for the narrowing check (every term is compared with each before it)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": f"k{j}", "operator": "In", "values": [f"v{i}" if j == expressions - 1
                                                          else "v"]}
            for j in range(expressions)]} for i in range(terms)]}}}


def test_releases_within_and_past_the_cost(bed: Testbed,
                                           raygate: tuple[KubeTransport, KubeApi]) -> None:
    transport, admin = raygate[0], bed.api()
    labels = {LABEL_ROLE: "floor", LABEL_RULE: "floor-avoids-gpu"}
    large = pod("large", [GATE], affinity=narrowed_terms(20, 40), containers=30, env=400)
    admin.create(PODS, large)
    transport.patch_pod(NAMESPACE, "large", release_patch(
        view(admin, NAMESPACE, "large"), NativeRule.REQUIRED, labels, PolicyConfig()))
    admin.create(PODS, pod("past", [GATE], affinity=narrowed_terms(60, 100)))
    held = view(admin, NAMESPACE, "past")
    refusal = refused(lambda: transport.patch_pod(NAMESPACE, "past", release_patch(
        held, NativeRule.REQUIRED, labels, PolicyConfig())))
    assert "cost limit exceeded" in refusal, refusal
    transport.patch_pod(NAMESPACE, "past", release_patch(
        held, NativeRule.NONE, {**labels, LABEL_RULE: FAILED_OPEN}, PolicyConfig()))
    assert not admin.get(f"{PODS}/past")["spec"].get("schedulingGates")
