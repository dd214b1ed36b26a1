"""deploy/'s write bounds, offline: in every setup each of raygate's ValidatingAdmissionPolicies
has its binding, fails closed, denies, and matches the very account the setup's raygate
runs as (the serviceAccountName of the Deployment with the raygate container), and no other
(e2e/test_write_bounds*.py has the real kube-apiserver enforce them; e2e/test_chart_kustomize.py
has the chart render the same objects)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.kustomize import render

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SETUPS = sorted(p.parent.name for p in DEPLOY.glob("*/kustomization.yaml")
                if "kind: Component" not in p.read_text())
POLICIES = {"raygate-pod-writes", "raygate-budget-writes", "raygate-raycluster-writes"}


def test_every_setup_is_found() -> None:
    assert SETUPS == ["base", "kube-scheduler-default", "kube-scheduler-second", "kueue",
                      "volcano"]


@pytest.mark.parametrize("setup", SETUPS)
def test_the_bounds_match_the_account_raygate_runs_as(setup: str) -> None:
    objects = render(DEPLOY / setup)
    (serving,) = [o for o in objects if o["kind"] == "Deployment" and any(
        c["name"] == "raygate" for c in o["spec"]["template"]["spec"]["containers"])]
    user = (f"system:serviceaccount:{serving['metadata']['namespace']}:"
            f"{serving['spec']['template']['spec']['serviceAccountName']}")
    policies = {o["metadata"]["name"]: o for o in objects
                if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {o["spec"]["policyName"]: o for o in objects
                if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings) == POLICIES
    for name, policy in policies.items():
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["matchConditions"] == [
            {"name": "raygate", "expression": f"request.userInfo.username == '{user}'"}]
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in bindings[name]["spec"]  # the policy's own match


@pytest.mark.parametrize("setup", SETUPS)
def test_the_bounds_match_only_the_writes_raygate_makes(setup: str) -> None:
    """Never a subresource (kube-scheduler's pods/binding and pods/status under a shared
    account) nor an operation raygate does not make on that kind."""
    rules = {o["metadata"]["name"]: o["spec"]["matchConstraints"]["resourceRules"]
             for o in render(DEPLOY / setup) if o["kind"] == "ValidatingAdmissionPolicy"}
    assert rules == {
        "raygate-pod-writes": [{"apiGroups": [""], "apiVersions": ["v1"],
                                "operations": ["UPDATE"], "resources": ["pods"]}],
        "raygate-budget-writes": [{"apiGroups": ["policy"], "apiVersions": ["v1"],
                                   "operations": ["CREATE", "UPDATE", "DELETE"],
                                   "resources": ["poddisruptionbudgets"]}],
        "raygate-raycluster-writes": [{"apiGroups": ["ray.io"], "apiVersions": ["v1"],
                                       "operations": ["UPDATE"], "resources": ["rayclusters"]}],
    }
