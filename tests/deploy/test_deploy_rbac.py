"""deploy/'s RBAC, validated offline: raygate's ClusterRole grants exactly what it reads
and writes, its leader election one Lease, every bound ServiceAccount is one a pod runs
as, and the status readers' role is what --authz checks."""

from __future__ import annotations

import pytest

from raygate.server.config.settings import ServeSettings
from raygate.server.kube.reviews import GROUP, RESOURCE, Access
from testkit.kustomize import find, render
from tests.deploy.manifests import DEPLOY, SETUPS, grants, raygate_containers

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
    assert grants(role) == {(g, r, v) for g, r in FOLLOWED for v in READ} | {
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
    ((deployment, container),) = raygate_containers(objects)
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
    assert grants(role) == checked == {("ray.io", "rayclusters", "get"),
                                        ("ray.io", "rayclusters", "list")}
    assert not [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
                and o["roleRef"]["name"] == "raygate-status-reader"]
