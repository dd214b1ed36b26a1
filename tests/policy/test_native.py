"""raygate's placement in native form: the release patch, applied as the API server applies
it, on every shape of node affinity a pod may hold; and the role a gated pod is released
with, under a burst."""

from __future__ import annotations

from typing import Any, cast

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.config import PolicyConfig
from raygate.policy.model import Role
from raygate.policy.native import (
    GATE,
    LABEL_ROLE,
    NativeRule,
    native_rule,
    release_patch,
    release_role,
)
from raygate.policy.placement import decide
from testkit.builders import T0_EPOCH, Obj, iso, make_pod, make_raycluster
from tests.conftest import snapshot_of

CONFIG = PolicyConfig()
NOT_GPU = {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def released(pod: Obj, rule: NativeRule, labels: dict[str, str] | None = None) -> Obj:
    """``pod`` after its release patch, applied by the jsonpatch library (RFC 6902)."""
    view = snapshot_of(pod).pod(pod["metadata"]["uid"])
    assert view is not None
    ops = release_patch(view, rule, labels or {}, CONFIG)
    return cast(Obj, jsonpatch.apply_patch(pod, ops))


def gated() -> Any:
    return make_pod("w").ray("rc", "g").gated("kueue.x-k8s.io/admission", GATE)


AFFINITIES: list[tuple[str, Obj | None]] = [
    ("none", None),
    ("pod affinity only", {"podAffinity": {}}),
    ("node affinity, preferred only", {"nodeAffinity": {PREFERRED: [
        {"weight": 5, "preference": {"matchExpressions": [ZONE]}}]}}),
    ("one required term", {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [ZONE]}]}}}),
    ("two terms, one by fields", {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [ZONE]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}),
    ("an empty selector", {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}),
]


@pytest.mark.parametrize("affinity", [a[1] for a in AFFINITIES], ids=[a[0] for a in AFFINITIES])
def test_required_narrows_every_term_and_keeps_the_rest(affinity: Obj | None) -> None:
    builder = gated()
    if affinity is not None:
        builder.affinity(affinity)
    pod = builder.obj()
    out = released(pod, NativeRule.REQUIRED, {LABEL_ROLE: "floor"})
    assert out["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert out["metadata"]["labels"][LABEL_ROLE] == "floor"
    terms = out["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    before = ((affinity or {}).get("nodeAffinity", {}).get(REQUIRED, {})
              .get("nodeSelectorTerms") or [{}])
    assert len(terms) == len(before)
    for old, new in zip(before, terms, strict=True):
        # KEP-3838: on a gated pod only additions to a term's expressions are allowed.
        assert new["matchExpressions"] == [*old.get("matchExpressions", []), NOT_GPU]
        assert new.get("matchFields") == old.get("matchFields")
    if affinity is not None and "podAffinity" in affinity:
        assert out["spec"]["affinity"]["podAffinity"] == {}


@pytest.mark.parametrize("affinity", [a[1] for a in AFFINITIES], ids=[a[0] for a in AFFINITIES])
def test_preferred_adds_a_term_and_keeps_the_rest(affinity: Obj | None) -> None:
    builder = gated()
    if affinity is not None:
        builder.affinity(affinity)
    out = released(builder.obj(), NativeRule.PREFERRED)
    node = out["spec"]["affinity"]["nodeAffinity"]
    old = (affinity or {}).get("nodeAffinity", {})
    assert node[PREFERRED] == [*old.get(PREFERRED, []),
                               {"weight": 100, "preference": {"matchExpressions": [NOT_GPU]}}]
    assert node.get(REQUIRED) == old.get(REQUIRED)


def test_no_rule_only_lifts_the_gate() -> None:
    pod = gated().obj()
    out = released(pod, NativeRule.NONE)
    assert out["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert "affinity" not in out["spec"]


def test_the_patch_fails_whole_on_a_pod_released_meanwhile() -> None:
    pod = gated().obj()
    view = snapshot_of(pod).pod(pod["metadata"]["uid"])
    assert view is not None
    ops = release_patch(view, NativeRule.REQUIRED, {}, CONFIG)
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    with pytest.raises(jsonpatch.JsonPatchException):
        jsonpatch.apply_patch(pod, ops)


@settings(deadline=None)  # a snapshot per example: slow on a loaded machine, never wrong
@given(labels=st.dictionaries(st.sampled_from(["nvidia.com/gpu.present", "karpenter.sh/nodepool",
                                               "a~b/c"]),
                              st.sampled_from(["true", "gpu"]), max_size=3))
def test_not_gpu_is_no_gpu_label_at_all(labels: dict[str, str]) -> None:
    config = PolicyConfig(gpu_node_labels=labels)
    pod = gated().obj()
    view = snapshot_of(pod).pod(pod["metadata"]["uid"])
    assert view is not None
    decision = decide(view, snapshot_of(pod), config, T0_EPOCH)
    rule = native_rule(decision, config)
    if not labels:
        assert rule is NativeRule.NONE  # no label can name a GPU node: no native rule
        return
    out = jsonpatch.apply_patch(pod, release_patch(view, rule, {}, config))
    (term,) = out["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert {(e["key"], e["values"][0]) for e in term["matchExpressions"]} == set(labels.items())


# --- the release role --------------------------------------------------------------------


def burst(count: int, floor: int) -> list[Obj]:
    cluster = (make_raycluster("rc").autoscaling()
               .group("g", replicas=count, min=floor, max=count).obj())
    pods = [make_pod(f"w{i}").ray("rc", "g").gated(GATE).created(iso(T0_EPOCH)).obj()
            for i in range(count)]
    return [cluster, *pods]


def test_a_burst_gives_the_floor_to_the_first_released() -> None:
    cluster, *pods = burst(5, 2)
    claimed: dict[str, Role] = {}
    roles = []
    for pod in pods:  # released one by one, none seen released yet: the claims count
        view = snapshot_of(cluster, *pods)
        verdict = release_role(view.pod(pod["metadata"]["uid"]), view, claimed)  # type: ignore[arg-type]
        claimed[pod["metadata"]["uid"]] = verdict.role
        roles.append(verdict.role)
    assert roles == [Role.FLOOR, Role.FLOOR, Role.SURPLUS, Role.SURPLUS, Role.SURPLUS]


@pytest.mark.parametrize(("others", "expected"), [
    ([], Role.FLOOR),
    (["floor"], Role.FLOOR),
    (["floor", "floor"], Role.SURPLUS),
    (["surplus", "surplus", "floor"], Role.FLOOR),
    ([None, None], Role.SURPLUS),  # released before raygate ran: they hold the floor
])
def test_released_pods_hold_their_places(others: list[str | None], expected: Role) -> None:
    cluster = make_raycluster("rc").autoscaling().group("g", replicas=5, min=2, max=5).obj()
    pods = []
    for i, role in enumerate(others):
        builder = make_pod(f"old{i}").ray("rc", "g").on(f"n{i}")
        pods.append((builder.label(LABEL_ROLE, role) if role else builder).obj())
    new = make_pod("new").ray("rc", "g").gated(GATE).obj()
    view = snapshot_of(cluster, *pods, new)
    verdict = release_role(view.pod(new["metadata"]["uid"]), view, {})  # type: ignore[arg-type]
    assert verdict.role is expected


def test_an_unknown_raycluster_is_released_as_floor() -> None:
    pod = make_pod("w").ray("gone", "g").gated(GATE).obj()
    view = snapshot_of(pod)
    verdict = release_role(view.pod(pod["metadata"]["uid"]), view, {})  # type: ignore[arg-type]
    assert verdict.role is Role.FLOOR and verdict.cluster_unknown
