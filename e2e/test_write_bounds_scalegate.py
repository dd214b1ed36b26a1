"""The write bounds on raygate's RayCluster scale-gate writes (issue #40), and what the
policies cost, on a control plane of this module's own: kube-apiserver (v1.37) with the
write bounds the chart renders for raygate's own ServiceAccount (``raygate``, every mode but
``second``), deploy/base's RBAC (``patch`` on rayclusters: no grant beyond it), and KubeRay
1.6.1's RayCluster CRD with the testbed's stand-in fields (``testbed.kuberay_standin``:
``workerGroupSpecs`` the atomic list of every KubeRay release, ``scaleStrategy.scaleGate``
a list keyed by ``type``). A kube-controller-manager with only the policies'
type-checking controller and the ServiceAccount controller (pods need their namespace's
``default``) runs beside it.

raygate's writes are its own: the entry's key read from the served schema
(``scale_gate_patch.gate_key``), the JSON Patch its writer makes (``gate_ops``), sent by its
transport (``patch_raycluster``, field manager ``raygate``) under its ServiceAccount's
token. Every other RayCluster write under that token is refused, whatever it carries
beside raygate's entries.

Cost: the API server stops an expression past its cost limit and, the policies failing
closed, refuses the write. A pod of 1.3 MB and a RayCluster of 60 worker groups pass; a pod
whose required node affinity is 60 terms of 100 expressions each is past the limit for a
release with a rule, and raygate's fail-open release (the gate alone) still passes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

import pytest

from e2e.objects import Group, raycluster
from e2e.write_bounds import account, apply_bounds, pod, refused, view
from raygate.policy.config import PolicyConfig
from raygate.policy.native import GATE, LABEL_ROLE, LABEL_RULE, NativeRule, release_patch
from raygate.server.controllers.gate_release import FAILED_OPEN
from raygate.server.controllers.scale_gate_patch import gate_key, gate_ops
from raygate.server.kube.client import KubeTransport
from testbed import kuberay_standin
from testbed.api import KubeApi
from testbed.build import COMPONENTS
from testbed.cluster import DEPLOY, Testbed, binary
from testbed.kuberay_standin import GATE_KEY
from testbed.processes import wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "ray"
CLUSTERS = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
KUEUE = "kueue.k8s.io/quota-exceeded"
HELD = "raygate.io/scale-up-cannot-fit"
NO_NODE = "raygate.io/no-node-coming"
SCALE_GATES = "only its own scale-gate entries (raygate.io/...) of a RayCluster"
GATES = "/spec/workerGroupSpecs/0/scaleStrategy/scaleGate"


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
        crd = COMPONENTS["kuberay"].path("crds") / "ray.io_rayclusters.yaml"
        started.kubectl("apply", "--server-side", "-f", str(crd))
        wait_for("the RayCluster CRD established", lambda: started.kubectl(
            "wait", "--for=condition=Established", "--timeout=10s",
            "crd/rayclusters.ray.io", check=False).returncode == 0, 60)
        kuberay_standin.extend(started)
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
def raygate(bed: Testbed, policies: list[dict[str, Any]]) -> Iterator[KubeTransport]:
    """raygate's transport under its ServiceAccount, with deploy/base's RBAC alone."""
    transport, _ = account(bed, "raygate")
    yield transport
    transport.close()


def entries(api: KubeApi, name: str, group: int = 0) -> list[dict[str, str]]:
    spec = api.get(f"{CLUSTERS}/{name}")["spec"]["workerGroupSpecs"][group]
    found: list[dict[str, str]] = spec.get("scaleStrategy", {}).get("scaleGate", [])
    return found


def write(transport: KubeTransport, name: str,
          desired: Mapping[str, Collection[str]]) -> list[dict[str, Any]]:
    """raygate's writer's write: the RayCluster read, the JSON Patch of its own entries
    (keyed as the served schema says) sent; the patch."""
    key = gate_key(transport.raycluster_openapi())
    assert key == GATE_KEY
    ops = gate_ops(transport.raycluster_json(NAMESPACE, name), key, desired)
    transport.patch_raycluster(NAMESPACE, name, ops)
    return ops


def gated_cluster(api: KubeApi, name: str, groups: list[Group]) -> None:
    """A RayCluster whose first group holds Kueue's gate, written as Kueue would (a JSON
    Patch under its own field manager: server-side apply is refused on the atomic list)."""
    api.create(CLUSTERS, raycluster(name, NAMESPACE, "none", groups))
    api.request("PATCH", f"{CLUSTERS}/{name}", [
        {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
         "value": {"scaleGate": [{GATE_KEY: KUEUE}]}}],
        "application/json-patch+json", query=[("fieldManager", "kueue")])


def test_the_policies_type_check_against_a_crd_with_scale_gates(
        policies: list[dict[str, Any]]) -> None:
    for policy in policies:
        (condition,) = policy["spec"]["matchConditions"]
        assert condition["expression"].endswith(":raygate'")
        assert not policy["status"].get("typeChecking", {}).get("expressionWarnings"), policy


def test_raygates_scale_gate_writes_pass_beside_another_controllers(
        bed: Testbed, raygate: KubeTransport) -> None:
    admin = bed.api()
    gated_cluster(admin, "gated", [Group("g", 1, "1"), Group("h", 1, "1")])
    # Beside Kueue's entry (an add to the list), and where no scaleStrategy is (made whole).
    write(raygate, "gated", {"g": {HELD}, "h": {HELD}})
    assert entries(admin, "gated") == [{GATE_KEY: KUEUE}, {GATE_KEY: HELD}]
    assert entries(admin, "gated", 1) == [{GATE_KEY: HELD}]
    ops = write(raygate, "gated", {"g": {NO_NODE}, "h": set()})  # one added, two removed
    assert {op["op"] for op in ops} == {"test", "add", "remove"}
    assert entries(admin, "gated") == [{GATE_KEY: KUEUE}, {GATE_KEY: NO_NODE}]
    write(raygate, "gated", {"g": set()})
    assert entries(admin, "gated") == [{GATE_KEY: KUEUE}]
    assert entries(admin, "gated", 1) == []


WORKERS = {"groupName": "new", "minReplicas": 0, "maxReplicas": 1, "rayStartParams": {},
           "template": {"spec": {"containers": [{"name": "ray-worker",
                                                 "image": "rayproject/ray:2.60.0"}]}}}
OURS = {"op": "add", "path": f"{GATES}/-", "value": {GATE_KEY: HELD}}
REFUSED = [
    ("another controller's entry removed", [{"op": "remove", "path": f"{GATES}/0"}]),
    ("another controller's entry renamed raygate's",
     [{"op": "replace", "path": f"{GATES}/0/{GATE_KEY}", "value": HELD}]),
    ("an entry under another name",
     [{"op": "add", "path": f"{GATES}/-", "value": {GATE_KEY: "example.com/x"}}]),
    ("replicas with raygate's entry",
     [OURS, {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 4}]),
    ("a worker group added with raygate's entry",
     [OURS, {"op": "add", "path": "/spec/workerGroupSpecs/-", "value": WORKERS}]),
    ("a label with raygate's entry",
     [OURS, {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]),
]


@pytest.mark.parametrize(("case", "ops"), REFUSED, ids=[r[0] for r in REFUSED])
def test_other_raycluster_writes_are_refused(bed: Testbed, raygate: KubeTransport,
                                             case: str, ops: list[dict[str, Any]]) -> None:
    """Each sent as raygate sends its own (its transport, its field manager)."""
    admin = bed.api()
    if not admin.exists(f"{CLUSTERS}/refused"):
        gated_cluster(admin, "refused", [Group("g", 1, "1")])
    assert SCALE_GATES in refused(lambda: raygate.patch_raycluster(NAMESPACE, "refused", ops))
    assert entries(admin, "refused") == [{GATE_KEY: KUEUE}]


def test_a_raycluster_of_60_large_worker_groups_is_within_the_cost(
        bed: Testbed, raygate: KubeTransport) -> None:
    env = [{"name": f"E{i}", "value": "x" * 20} for i in range(100)]
    groups = [Group(f"g{i}", 1, "1", pod_spec={"containers": [
        {"name": "ray-worker", "image": "rayproject/ray:2.60.0", "env": env}]})
        for i in range(60)]
    bed.api().create(CLUSTERS, raycluster("large", NAMESPACE, "none", groups))
    write(raygate, "large", {"g59": {HELD}})
    assert entries(bed.api(), "large", 59) == [{GATE_KEY: HELD}]


def narrowed_terms(terms: int, expressions: int) -> dict[str, Any]:
    """A required node affinity of ``terms`` terms alike but for their last expression,
    the costliest for the narrowing check (every term is compared with each before it)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": f"k{j}", "operator": "In", "values": [f"v{i}" if j == expressions - 1
                                                          else "v"]}
            for j in range(expressions)]} for i in range(terms)]}}}


def test_releases_within_and_past_the_cost(bed: Testbed, raygate: KubeTransport) -> None:
    transport, admin = raygate, bed.api()
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
