"""The Ray-pod webhook decides each new Ray pod in its create's admission, with real
AdmissionReview JSON and the patch applied as the API server applies it (RFC 6902, by the
jsonpatch library): the pod is created with its rule, its role and rule labels and the
annotation raygate finds it by; the floor places go to the first pods created, counting
the pods admitted that the cache does not show yet; the gate stays only where the decision
has to wait."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.classify import LABEL_ROLE, LABEL_RULE
from raygate.policy.config import GpuNodesForSurplus, PolicyConfig
from raygate.policy.native import ANNOTATION_ADMITTED, GATE
from raygate.server.cache.cluster import ClusterCache
from raygate.server.controllers.admitted_pods import HOLD_SECONDS, AdmittedPods
from raygate.server.fronts.webhook import RayPodWebhook
from raygate.server.metrics.registry import Metrics
from testkit.builders import T0_EPOCH, Obj, make_pod, make_raycluster
from tests.conftest import FakeClock, snapshot_of
from tests.fronts.test_webhook import review

NOT_GPU = [{"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def cluster(floor: int = 2, **annotations: str) -> Obj:
    builder = make_raycluster("rc").autoscaling().group("g", replicas=floor, min=floor, max=9)
    for key, value in annotations.items():
        builder = builder.annotate(key, value)
    return builder.obj()


def new(pod: Obj) -> Obj:
    """``pod`` as KubeRay sends it to be created: a generated name, no UID yet."""
    meta = pod["metadata"]
    meta["generateName"] = meta.pop("name") + "-"
    del meta["uid"]
    return pod


class Cluster:
    """A webhook over a loaded cache, and the pods it let the API server create."""

    def __init__(self, *objects: Obj) -> None:
        self.objects = list(objects)
        self.cache = ClusterCache(PolicyConfig(), "test")
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.admitted = AdmittedPods()
        self.webhook = RayPodWebhook(self.cache, self.metrics, place=True, marker=False,
                                     admitted=self.admitted, clock=self.clock)
        self.created: list[Obj] = []
        self.seen(0)

    def seen(self, count: int) -> None:
        """Publish a snapshot holding the first ``count`` pods created (the watch's lag)."""
        self.cache.publish(snapshot_of(*self.objects, *self.created[:count]))

    def admit(self, pod: Obj, uid: str, *, dry_run: bool = False) -> Obj:
        body = review(pod, uid)
        body["request"]["dryRun"] = dry_run
        response = json.loads(self.webhook.mutate(json.dumps(body).encode()))["response"]
        assert response["allowed"] is True and response["uid"] == uid
        ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        out = cast(Obj, jsonpatch.apply_patch(pod, ops))
        out["metadata"].setdefault("name", out["metadata"].get("generateName", "") + uid[:5])
        out["metadata"].setdefault("uid", uid)
        return out

    def create(self, pod: Obj) -> Obj:
        out = self.admit(pod, f"uid-{len(self.created):04d}")
        self.created.append(out)
        return out


def role_of(pod: Obj) -> tuple[str, str]:
    labels = pod["metadata"]["labels"]
    return labels.get(LABEL_ROLE, ""), labels.get(LABEL_RULE, "")


def worker(i: int = 0, group: str = "g") -> Obj:
    return new(make_pod(f"rc-{group}-worker-{i}").ray("rc", group).requests(cpu="2").obj())


def test_a_burst_is_created_with_its_rules_and_no_gate() -> None:
    rc = Cluster(cluster(floor=2))
    head = rc.create(new(make_pod("rc-head").head("rc").requests(cpu="1").obj()))
    workers = [rc.create(worker(i)) for i in range(4)]  # the watch shows none of them yet
    assert [role_of(p) for p in (head, *workers)] == [
        ("head", "head-avoids-gpu"), ("floor", "floor-avoids-gpu"),
        ("floor", "floor-avoids-gpu"), ("surplus", "surplus-prefers-cpu"),
        ("surplus", "surplus-prefers-cpu")]
    for pod in (head, *workers):
        assert "schedulingGates" not in pod["spec"]
        assert pod["metadata"]["annotations"][ANNOTATION_ADMITTED] == pod["metadata"]["uid"]
    assert head["spec"]["affinity"]["nodeAffinity"][REQUIRED] == {
        "nodeSelectorTerms": [{"matchExpressions": NOT_GPU}]}
    assert workers[3]["spec"]["affinity"]["nodeAffinity"][PREFERRED] == [
        {"weight": 100, "preference": {"matchExpressions": NOT_GPU}}]
    assert rc.metrics.placement_gates.labels("gated").value == 0
    assert rc.metrics.placement_admissions.labels("floor-avoids-gpu",
                                                  "required-not-gpu").value == 2
    assert rc.metrics.webhook_seconds.labels().counts != [0] * len(
        rc.metrics.webhook_seconds.labels().counts)


def test_pods_seen_in_the_watch_are_counted_once() -> None:
    rc = Cluster(cluster(floor=2))
    rc.create(worker(0))
    rc.create(worker(1))
    rc.seen(2)  # both created and seen: counted from the snapshot, not the book too
    assert role_of(rc.create(worker(2)))[0] == "surplus"
    assert len(rc.admitted) == 1


def test_a_pod_admitted_but_never_created_frees_its_place_after_the_hold() -> None:
    rc = Cluster(cluster(floor=1))
    rc.admit(worker(0), "refused-by-quota")  # a later admission plugin refused the create
    assert role_of(rc.create(worker(1)))[0] == "surplus"  # the place is held meanwhile
    rc.clock.now += HOLD_SECONDS
    rc.created.clear()
    rc.seen(0)
    assert role_of(rc.create(worker(2)))[0] == "floor"


def test_a_dry_run_is_decided_but_holds_no_place() -> None:
    rc = Cluster(cluster(floor=1))
    assert role_of(rc.admit(worker(0), "dry", dry_run=True))[0] == "floor"
    assert role_of(rc.create(worker(1)))[0] == "floor"


def test_a_reinvocation_changes_nothing_more() -> None:
    rc = Cluster(cluster(floor=1))
    once = rc.admit(worker(0), "same-review")
    assert rc.admit(once, "same-review") == once
    assert len(rc.admitted) == 1


@pytest.mark.parametrize(("objects", "pod", "gated"), [
    ([], worker(0), True),  # its RayCluster not seen yet: the count needs its floor
    ([], new(make_pod("rc-head").head("rc").obj()), False),  # the head needs no count
    ([cluster(1, **{"raygate.io/scale-up": "all-or-nothing"})], worker(0), False),  # floor
])
def test_the_gate_stays_where_the_decision_must_wait(objects: list[Obj], pod: Obj,
                                                     gated: bool) -> None:
    out = Cluster(*objects).create(pod)
    assert ("schedulingGates" in out["spec"]) is gated
    assert (LABEL_ROLE not in out["metadata"]["labels"]) is gated


def test_an_all_or_nothing_surplus_worker_waits_for_its_batch() -> None:
    rc = Cluster(cluster(1, **{"raygate.io/scale-up": "all-or-nothing"}))
    assert role_of(rc.create(worker(0)))[0] == "floor"
    surplus = rc.create(worker(1))
    assert surplus["spec"]["schedulingGates"] == [{"name": GATE}]
    assert rc.metrics.placement_gates.labels("gated").value == 1


@pytest.mark.parametrize(("pod", "expected"), [
    (new(make_pod("w").ray("rc", "g").requests(**{"nvidia.com/gpu": "1"}).obj()),
     ("floor", "gpu-pod")),
    (new(make_pod("w").ray("rc", "g").on("n1").obj()), ("floor", "floor-avoids-gpu")),
])
def test_pods_that_get_no_affinity_still_get_their_role(pod: Obj,
                                                        expected: tuple[str, str]) -> None:
    out = Cluster(cluster()).create(pod)
    assert role_of(out) == expected
    assert "affinity" not in out["spec"] and "schedulingGates" not in out["spec"]


def test_a_surplus_pod_gets_its_own_volcano_task_spec() -> None:
    rc = Cluster(cluster(floor=1))
    pods = [rc.create(new(make_pod(f"w{i}").ray("rc", "g")
                          .annotate("volcano.sh/task-spec", "g").obj())) for i in range(2)]
    assert [p["metadata"]["annotations"]["volcano.sh/task-spec"] for p in pods] == [
        "g", "g-surplus"]


def test_the_policy_always_writes_no_affinity() -> None:
    rc = Cluster(cluster(floor=0))
    rc.cache.set_policy(PolicyConfig(gpu_nodes_for_surplus=GpuNodesForSurplus.ALWAYS))
    out = rc.create(worker(0))
    assert role_of(out) == ("surplus", "policy-always") and "affinity" not in out["spec"]


def test_a_pod_whose_affinity_is_kept_gets_raygates_expressions_added() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    pod = worker(0)
    pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [zone]}]}}}
    out = Cluster(cluster()).create(pod)
    assert out["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchExpressions": [zone, *NOT_GPU]}]


@settings(max_examples=60, deadline=None)
@given(floor=st.integers(0, 4), count=st.integers(1, 10), data=st.data())
def test_under_any_watch_lag_the_first_pods_created_hold_the_floor(
        floor: int, count: int, data: Any) -> None:
    rc = Cluster(cluster(floor=floor))
    seen = 0
    for i in range(count):
        seen = data.draw(st.integers(seen, len(rc.created)), label="seen")  # never back
        rc.seen(seen)
        rc.create(worker(i))
    roles = [role_of(p)[0] for p in rc.created]
    assert roles == ["floor"] * min(floor, count) + ["surplus"] * max(count - floor, 0)


def test_the_clock_is_the_webhooks() -> None:
    assert Cluster().clock() == T0_EPOCH


def test_a_second_replica_keeps_the_first_ones_decision_and_counts_it() -> None:
    first, second = Cluster(cluster(floor=1)), Cluster(cluster(floor=1))
    decided = first.admit(worker(0), "by-the-first")
    # The API server calls the second replica's webhook with the first one's patch applied
    # (a call of its own, a UID of its own): nothing changes, and its place is counted.
    assert second.admit(decided, "by-the-second") == decided
    assert role_of(second.create(worker(1)))[0] == "surplus"
