"""raygate's writes bounded by the API server itself (issue #38 item 4), on the testbed's real
kube-apiserver with raygate's own token (``RAYGATE_ACCOUNT``: ray-scheduler's, as in
deploy/kube-scheduler-second, whose write bounds the testbed applies at start, so every
scenario runs under them).

The chart's policies type-check without a warning against the API server's pod and
PodDisruptionBudget schemas and KubeRay's RayCluster CRD; every write raygate makes passes,
through raygate's own code (``release_patch`` of a pod's view sent by ``KubeTransport``, the
stale-refusal annotation, the budgets' server-side apply and delete) and from the testbed's
running raygate (a gated Ray pod released, a RayCluster's budgets written and deleted);
writes beyond the bound are refused (422) with the policy's message, where RBAC would let
them through. The scale-gate entries raygate is to write on RayClusters (issue #40) need a
CRD that has them: e2e/test_write_bounds_scalegate.py, with the policies' cost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.chart import NAMESPACE as CHART_NAMESPACE
from e2e.chart import documents, helm_template, template_failure
from e2e.objects import Group, raycluster
from e2e.scenario import Scenario, wait_until
from e2e.write_bounds import account, apply_bounds, grant_raycluster_writes, pod, refused, view
from raygate.policy.budgets import Budget, budget_name
from raygate.policy.config import PolicyConfig
from raygate.policy.native import GATE, LABEL_ROLE, LABEL_RULE, VOLCANO_TASK_SPEC, NativeRule
from raygate.policy.native import release_patch as release
from raygate.server.controllers.floor_budgets import manifest
from raygate.server.controllers.gate_release import FAILED_OPEN
from raygate.server.controllers.stale_refusals import ANNOTATION as RECONSIDERED
from raygate.server.kube.client import KubeTransport
from testbed.api import KubeApi
from testbed.cluster import Testbed
from testbed.common import RAYGATE_ACCOUNT
from testbed.webhook import NATIVE_PLACEMENT_OFF

pytestmark = pytest.mark.e2e

NAMESPACE = "write-bounds"
HOLD = "e2e.raygate.io/hold"
"""Another controller's scheduling gate."""
CONFIG = PolicyConfig()  # GPU nodes by nvidia.com/gpu.present, as deploy/ says
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
BY_NAME = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
RAYCLUSTER = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/suspended"


@pytest.fixture(scope="module")
def policies(testbed: Testbed) -> list[dict[str, Any]]:
    return apply_bounds(testbed, "kube-scheduler-second-values.yaml")


@pytest.fixture(scope="module")
def raygate(testbed: Testbed, policies: list[dict[str, Any]]) -> Iterator[KubeTransport]:
    """raygate's transport under raygate's token, and a namespace of the module's own
    (no webhook: its pods are no Ray pods anyway)."""
    testbed.kubectl("create", "namespace", NAMESPACE)
    testbed.kubectl("label", "namespace", NAMESPACE, f"{NATIVE_PLACEMENT_OFF}=true")
    wait_until("the namespace's default ServiceAccount", lambda: testbed.api().exists(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"))
    transport, _ = account(testbed, RAYGATE_ACCOUNT)
    yield transport
    transport.close()


def create_pod(testbed: Testbed, body: dict[str, Any]) -> None:
    # No scheduler by that name: released, the pod stays pending, off other scenarios' nodes.
    body["spec"]["schedulerName"] = "e2e-write-bounds"
    testbed.api().create(f"/api/v1/namespaces/{NAMESPACE}/pods", body)


def test_the_policies_type_check_without_warnings(policies: list[dict[str, Any]]) -> None:
    for policy in policies:
        assert policy["spec"]["failurePolicy"] == "Fail"
        (condition,) = policy["spec"]["matchConditions"]
        assert condition["expression"].endswith(f":{RAYGATE_ACCOUNT}'")
        assert not policy["status"].get("typeChecking", {}).get("expressionWarnings"), policy


@dataclass(frozen=True)
class Release:
    """A gated pod (``gates``, ``affinity``, ``annotations``) and the rule raygate
    releases it with (``NONE``: raygate failing open, the gate alone)."""

    name: str
    gates: list[str]
    affinity: dict[str, Any] | None
    annotations: dict[str, str]
    rule: NativeRule


RELEASES = [
    Release("required-a-new-selector", [GATE], None, {}, NativeRule.REQUIRED),
    Release("required-every-term-narrowed-another-gate-kept", [HOLD, GATE], {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]},
                                                          {"matchFields": [BY_NAME]}]}}},
            {}, NativeRule.REQUIRED),
    Release("preferred-beside-its-own-the-volcano-task-surplus", [GATE], {
        "nodeAffinity": {PREFERRED: [{"weight": 5, "preference": {"matchExpressions": [ZONE]}}]}},
            {VOLCANO_TASK_SPEC: "workers"}, NativeRule.PREFERRED),
    Release("failed-open-the-gate-alone", [GATE], {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}},
            {}, NativeRule.NONE),
]


@pytest.mark.parametrize("case", RELEASES, ids=[r.name for r in RELEASES])
def test_each_write_raygate_makes_to_a_pod_passes(testbed: Testbed, raygate: KubeTransport,
                                                  case: Release) -> None:
    """The release (its rule, or bare where raygate fails open), then the stale-refusal
    annotation."""
    name = case.name
    create_pod(testbed, pod(name, case.gates, affinity=case.affinity,
                            annotations=case.annotations))
    held = view(testbed.api(), NAMESPACE, name)
    labels = {LABEL_ROLE: "floor", LABEL_RULE: FAILED_OPEN if case.rule is NativeRule.NONE
              else "floor-avoids-gpu"}
    raygate.patch_pod(NAMESPACE, name, release(held, case.rule, labels, CONFIG))
    raygate.annotate_pod(NAMESPACE, name, held.uid, {RECONSIDERED: "2026-12-04T00:00:00Z"})
    after = testbed.api().get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    assert [g["name"] for g in after["spec"].get("schedulingGates") or []] == [
        g for g in case.gates if g != GATE]
    assert labels.items() <= after["metadata"]["labels"].items()
    assert after["metadata"]["annotations"][RECONSIDERED]
    if case.annotations:
        assert after["metadata"]["annotations"][VOLCANO_TASK_SPEC] == "workers-surplus"


@pytest.fixture(scope="module")
def suspended(testbed: Testbed, raygate: KubeTransport) -> str:
    """The RayCluster ``suspended`` (KubeRay makes no pod of it), its UID: the owner of the
    module's budgets (the garbage collector deletes a budget whose owner is not there)."""
    cluster = raycluster("suspended", NAMESPACE, NAMESPACE, [Group("g", 1, "1", min=1)])
    cluster["spec"]["suspend"] = True
    uid: str = testbed.api().create(RAYCLUSTER.rsplit("/", 1)[0], cluster)["metadata"]["uid"]
    return uid


def test_each_write_raygate_makes_to_a_budget_passes(raygate: KubeTransport,
                                                     suspended: str) -> None:
    budget = Budget(NAMESPACE, budget_name("suspended", "g"), "suspended", suspended, "g", 1,
                    {"ray.io/cluster": "suspended", "ray.io/group": "g"})
    raygate.apply_budget(NAMESPACE, budget.name, manifest(budget))  # created
    raised = dataclasses.replace(budget, min_available=2)
    raygate.apply_budget(NAMESPACE, budget.name, manifest(raised))  # changed
    listed = raygate.list_budgets("app.kubernetes.io/managed-by=raygate")
    assert (NAMESPACE, budget.name, "suspended") in listed
    raygate.delete_budget(NAMESPACE, budget.name)


@dataclass
class Targets:
    """What the refused writes aim at, in the module's namespace: the pod ``held`` (raygate's
    gate and another's, a preferred term, a Volcano task), raygate's budget ``ours``, a
    budget ``foreign`` of someone else's, the suspended RayCluster ``suspended``."""

    raygate: KubeTransport
    plain: KubeApi
    held_uid: str
    ours: Budget


@pytest.fixture(scope="module")
def targets(testbed: Testbed, raygate: KubeTransport, suspended: str) -> Iterator[Targets]:
    create_pod(testbed, pod("held", [GATE, HOLD], annotations={VOLCANO_TASK_SPEC: "workers"},
                            affinity={"nodeAffinity": {PREFERRED: [
                                {"weight": 5, "preference": {"matchExpressions": [ZONE]}}]}}))
    ours = Budget(NAMESPACE, "ours", "suspended", suspended, "g", 1,
                  {"ray.io/cluster": "suspended"})
    raygate.apply_budget(NAMESPACE, ours.name, manifest(ours))
    testbed.api().create(f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets", {
        "metadata": {"name": "foreign"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "theirs"}}}})
    revoke = grant_raycluster_writes(testbed, RAYGATE_ACCOUNT)
    plain = account(testbed, RAYGATE_ACCOUNT)[1]
    yield Targets(raygate, plain, view(testbed.api(), NAMESPACE, "held").uid, ours)
    revoke()


def _pod(ops: list[dict[str, Any]]) -> Callable[[Targets], None]:
    return lambda t: t.raygate.patch_pod(NAMESPACE, "held", ops)


def _released(t: Targets, *more: dict[str, Any]) -> None:
    """raygate's release of ``held`` (its gate removed) with ``more`` in the same patch."""
    t.raygate.patch_pod(NAMESPACE, "held", [
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": GATE},
        {"op": "remove", "path": "/spec/schedulingGates/0"}, *more])


def _relabelled(budget: Budget, labels: dict[str, str]) -> dict[str, Any]:
    body = manifest(budget)
    body["metadata"]["labels"] = labels
    return body


LABELS, ANNOTATIONS = "its own labels (raygate.io/...)", "its own annotations (raygate.io/...)"
SPEC = "only the scheduling gates and the node affinity in a pod's spec"
BUDGETS = "only the PodDisruptionBudgets labelled as its own"
SCALE_GATES = "only its own scale-gate entries (raygate.io/...) of a RayCluster"
REFUSALS: list[tuple[str, Callable[[Targets], Any], str]] = [
    ("a pod relabelled", _pod([{"op": "replace", "path": "/metadata/labels/app",
                                "value": "other"}]), LABELS),
    ("a pod's image changed", _pod([{"op": "replace", "path": "/spec/containers/0/image",
                                     "value": "evil:latest"}]), SPEC),
    ("a toleration added", _pod([{"op": "add", "path": "/spec/tolerations", "value": [
        {"key": "nvidia.com/gpu", "operator": "Exists"}]}]), SPEC),
    ("another controller's gate removed", _pod([
        {"op": "remove", "path": "/spec/schedulingGates/1"}]), "only its own scheduling gate"),
    ("node affinity changed, the gate kept", _pod([{"op": "add", "value": {
        "weight": 1, "preference": {"matchExpressions": [ZONE]}},
        "path": f"/spec/affinity/nodeAffinity/{PREFERRED}/-"}]), "only in the write that removes"),
    ("a preferred term dropped in a release", lambda t: _released(t, {
        "op": "remove", "path": f"/spec/affinity/nodeAffinity/{PREFERRED}/0"}),
     "only add preferred node affinity terms"),
    ("the Volcano task renamed in a release", lambda t: _released(t, {
        "op": "replace", "path": "/metadata/annotations/volcano.sh~1task-spec",
        "value": "other"}), ANNOTATIONS),
    ("an annotation of someone else's", _pod([{"op": "add", "value": "x",
                                               "path": "/metadata/annotations/team"}]),
     ANNOTATIONS),
    ("a finalizer added", _pod([{"op": "add", "path": "/metadata/finalizers",
                                 "value": ["example.com/keep"]}]), "owners or finalizers"),
    ("a foreign budget deleted", lambda t: t.raygate.delete_budget(NAMESPACE, "foreign"),
     BUDGETS),
    ("a foreign budget taken over", lambda t: t.raygate.apply_budget(
        NAMESPACE, "foreign", manifest(dataclasses.replace(t.ours, name="foreign"))), BUDGETS),
    ("an unlabelled budget created", lambda t: t.raygate.apply_budget(
        NAMESPACE, "unlabelled", _relabelled(
            dataclasses.replace(t.ours, name="unlabelled"), {})), BUDGETS),
    ("raygate's budget given away", lambda t: t.raygate.apply_budget(
        NAMESPACE, "ours", _relabelled(t.ours, {"app.kubernetes.io/managed-by": "helm"})),
     BUDGETS),
    ("a RayCluster's replicas edited", lambda t: t.plain.json_patch(RAYCLUSTER, [
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 5}]),
     SCALE_GATES),
    ("a RayCluster resumed", lambda t: t.plain.json_patch(RAYCLUSTER, [
        {"op": "replace", "path": "/spec/suspend", "value": False}]), SCALE_GATES),
    ("a RayCluster labelled", lambda t: t.plain.json_patch(RAYCLUSTER, [
        {"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}]), SCALE_GATES),
    ("a worker to delete named", lambda t: t.plain.json_patch(RAYCLUSTER, [
        {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy",
         "value": {"workersToDelete": ["w-1"]}}]), SCALE_GATES),
]


@pytest.mark.parametrize(("case", "write", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_writes_beyond_the_bound_are_refused_with_the_policys_message(
        targets: Targets, case: str, write: Callable[[Targets], Any], message: str) -> None:
    refusal = refused(lambda: write(targets))
    assert "ValidatingAdmissionPolicy 'raygate-" in refusal and message in refusal, refusal


def test_the_refused_writes_changed_nothing(testbed: Testbed, targets: Targets) -> None:
    api = testbed.api()
    held = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/held")
    assert [g["name"] for g in held["spec"]["schedulingGates"]] == [GATE, HOLD]
    assert held["metadata"]["labels"] == {"app": "e2e-write-bounds"}
    assert held["spec"]["containers"][0]["image"] == "busybox"
    assert "finalizers" not in held["metadata"]
    assert all(t.get("key") != "nvidia.com/gpu" for t in held["spec"].get("tolerations", []))
    assert held["metadata"]["annotations"] == {VOLCANO_TASK_SPEC: "workers"}
    budgets = f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets"
    assert api.get(f"{budgets}/ours")["metadata"]["labels"][
        "app.kubernetes.io/managed-by"] == "raygate"
    assert "labels" not in api.get(f"{budgets}/foreign")["metadata"]
    assert not api.exists(f"{budgets}/unlabelled")
    cluster = api.get(RAYCLUSTER)
    assert cluster["spec"]["suspend"] is True
    assert cluster["spec"]["workerGroupSpecs"][0]["replicas"] == 1


@pytest.mark.parametrize(("values", "more", "serving"), [
    ("kube-scheduler-second-values.yaml", [], "ray-scheduler"),
    ("kueue-values.yaml", [], "ray-scheduler"),
    ("kube-scheduler-default-values.yaml", [], "raygate"),
    ("volcano-values.yaml", [], "raygate"),
    ("raygate-only-values.yaml", ["--set", "writeBounds.enabled=false"], None),
    # A cluster before 1.30 has no admissionregistration.k8s.io/v1 policies: off, it renders.
    ("raygate-only-values.yaml", ["--set", "writeBounds.enabled=false", "--kube-version",
                                  "v1.29.9"], None),
])
def test_the_chart_bounds_the_account_raygate_serves_as(values: str, more: list[str],
                                                        serving: str | None) -> None:
    objects = documents(helm_template(values, *more))
    policies = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    if serving is None:
        assert policies == bindings == []
        return
    assert len(policies) == len(bindings) == 3
    for policy in policies:
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["matchConditions"] == [{"name": "raygate", "expression": (
            f"request.userInfo.username == 'system:serviceaccount:{CHART_NAMESPACE}:"
            f"{serving}'")}]
    assert {b["spec"]["policyName"] for b in bindings} == {
        p["metadata"]["name"] for p in policies}
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)


def test_the_chart_refuses_the_bounds_before_kubernetes_1_30() -> None:
    assert "writeBounds.enabled needs Kubernetes 1.30" in template_failure(
        "--kube-version", "v1.29.9")


def test_the_testbeds_raygate_writes_within_the_bound(scenario: Scenario) -> None:
    """raygate itself: a Ray pod of a RayCluster raygate has not seen is gated at admission
    and released by raygate with its rule (not bare: the bound refused no release); a
    RayCluster's budgets are applied, and one no floor needs any more deleted."""
    scenario.setup([])
    api, namespace = scenario.api, scenario.namespace
    ghost = {"metadata": {"name": "ghost-worker", "labels": {
        "ray.io/cluster": "ghost", "ray.io/group": "g", "ray.io/node-type": "worker",
        "ray.io/is-ray-node": "yes"}},  # KubeRay's label, which the webhook selects
        "spec": {"schedulerName": "e2e-write-bounds", "containers": [
            {"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]}}
    api.create(scenario.pods_path, ghost)
    path = f"{scenario.pods_path}/ghost-worker"
    assert GATE in [g["name"] for g in api.get(path)["spec"]["schedulingGates"]]
    released = wait_until("raygate's release of the gated pod", lambda: (
        p if not (p := api.get(path))["spec"].get("schedulingGates") else None))
    assert released["metadata"]["labels"][LABEL_RULE] not in (FAILED_OPEN, "")
    (term,) = released["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]} in term[
        "matchExpressions"]  # a floor worker: raygate's required rule, written within the bound
    scenario.create(raycluster("rc", namespace, namespace, [Group("g", 1, "1", min=1)]))
    budgets = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    wait_until("the head's and the group's budgets", lambda: len(api.items(
        budgets, labelSelector="app.kubernetes.io/managed-by=raygate")) == 2)
    api.json_patch(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/rc", [
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/minReplicas", "value": 0}])
    wait_until("the group's budget deleted", lambda: len(api.items(
        budgets, labelSelector="app.kubernetes.io/managed-by=raygate")) == 1)
