"""Is a node coming? The node autoscalers' events read for admission
(``raygate.policy.admission.autoscalers``), the groups' advice that follows, and how the
cache keeps those events and Karpenter's NodeClaims."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.admission import PodState, ScaleUp
from raygate.policy.admission.autoscalers import (
    EVENT_TTL_SECONDS,
    nominated_targets,
    wanted,
)
from raygate.policy.model import NodeClaimView, PodEventView
from raygate.server.cache.editor import SnapshotEditor
from raygate.server.cache.keys import EVENT, NODECLAIM
from testkit.builders import T0_EPOCH, Obj, make_event, make_nodeclaim, make_pod
from tests import admission_scenarios as sc
from tests.conftest import snapshot_of
from tests.policy.derivation import derive, pods_by_name

WANTED: list[tuple[str, str, str, bool]] = [
    # (reason, component, message, kept)
    ("Nominated", "karpenter", sc.NOMINATED_CLAIM, True),
    ("Nominated", "karpenter", "something else", False),
    ("FailedScheduling", "karpenter", sc.KARPENTER_NO_FIT, True),
    ("FailedScheduling", "default-scheduler", sc.INSUFFICIENT_CPU, False),
    ("TriggeredScaleUp", "cluster-autoscaler", sc.CA_TRIGGERED, True),
    ("NotTriggerScaleUp", "cluster-autoscaler", sc.CA_NOT_TRIGGERED, True),
    ("Scheduled", "default-scheduler", "Successfully assigned ray/x to n1", False),
    ("Pulling", "kubelet", 'Pulling image "busybox"', False),
]


@pytest.mark.parametrize(("reason", "component", "message", "kept"), WANTED,
                         ids=[f"{w[0]}-{w[1]}-{w[3]}" for w in WANTED])
def test_only_the_autoscalers_words_are_kept(reason: str, component: str, message: str,
                                            kept: bool) -> None:
    assert wanted(reason, component, message) is kept


TARGETS = [
    ("Pod should schedule on: nodeclaim/default-x7k2p", ("default-x7k2p", "")),
    ("Pod should schedule on: nodeclaim/default-x7k2p, node/ip-10-0-1-2",
     ("default-x7k2p", "ip-10-0-1-2")),
    ("Pod should schedule on: node/ip-10-0-1-2", ("", "ip-10-0-1-2")),
]


@pytest.mark.parametrize(("message", "targets"), TARGETS)
def test_nominated_targets(message: str, targets: tuple[str, str]) -> None:
    assert nominated_targets(message) == targets


def test_reasons_name_the_autoscaler_and_quote_it() -> None:
    pods = pods_by_name(derive(sc.node_autoscaler(), "auto").status)
    assert "Karpenter is bringing NodeClaim default-x7k2p" in pods["auto-launching"].reason
    assert "no instance type has enough resources" in pods["auto-no-pool"].reason
    assert "{cpu-pool 0->1 (max: 10)}" in pods["auto-ca-up"].reason
    assert "Cluster Autoscaler will not add a node" in pods["auto-ca-no"].reason
    stranded = pods["auto-stranded"].reason
    assert "on node gpu-1, which raygate refuses it" in stranded
    assert "floor-avoids-gpu" in stranded
    # Since the scheduler's verdict, not since the (repeated) event.
    assert pods["auto-launching"].since == T0_EPOCH - 30


SCALE_UP = [
    ("karp", ScaleUp.HOLD, "already waiting for capacity"),
    ("nopool", ScaleUp.HOLD, "will get no node, and more would get none either: Karpenter"),
    ("ca", ScaleUp.PROCEED, "1 pod of this group with a node coming"),
    ("cano", ScaleUp.HOLD, "Cluster Autoscaler will not add a node"),
]


@pytest.mark.parametrize(("group", "decision", "words"), SCALE_UP)
def test_group_advice(group: str, decision: ScaleUp, words: str) -> None:
    groups = {g.name: g for g in derive(sc.node_autoscaler(), "auto").status.groups}
    assert groups[group].scale_up.action is decision
    assert words in groups[group].scale_up.reason
    assert groups[group].pending == 1 or group == "karp"


def _karpenter(event_at: float, *extra: Obj, claim: str = "default-x7k2p") -> list[Obj]:
    objects = sc.node_autoscaler()[:2]  # the RayCluster and its head
    pod = make_pod("p").ray("auto", "karp").condition(*sc.unschedulable(sc.INSUFFICIENT_CPU))
    obj = pod.obj()
    message = f"Pod should schedule on: nodeclaim/{claim}"
    return [*objects, obj, make_event(obj, "Nominated", message, at=sc.at(event_at)), *extra]


def test_an_event_expires_with_the_event_ttl() -> None:
    objects = _karpenter(-20, make_nodeclaim("default-x7k2p"))
    until = T0_EPOCH - 20 + EVENT_TTL_SECONDS
    derivation = derive(objects, "auto")
    assert pods_by_name(derivation.status)["p"].state is PodState.NODE_PROVISIONING
    assert derivation.next_change == until
    later = pods_by_name(derive(objects, "auto", now=until).status)["p"]
    assert later.state is PodState.WAITING_FOR_CAPACITY


@pytest.mark.parametrize(("claims", "state"), [
    ([make_nodeclaim("default-x7k2p")], PodState.NODE_PROVISIONING),
    ([make_nodeclaim("default-x7k2p", deleting=True)], PodState.WAITING_FOR_CAPACITY),
    ([make_nodeclaim("other")], PodState.WAITING_FOR_CAPACITY),  # followed, and gone
    ([], PodState.NODE_PROVISIONING),  # NodeClaims not followed: the event is believed
], ids=["launching", "deleting", "gone", "not-followed"])
def test_a_nominated_claim_must_still_be_there(claims: list[Obj], state: PodState) -> None:
    pods = pods_by_name(derive(_karpenter(-20, *claims), "auto").status)
    assert pods["p"].state is state


@settings(max_examples=200, deadline=None)
@given(event_at=st.integers(-8000, 0), turned=st.integers(-8000, 0),
       now=st.integers(0, 8000))
def test_only_a_fresh_event_of_this_wait_counts(event_at: int, turned: int, now: int) -> None:
    """NodeProvisioning exactly while the event is newer than the pod's turn to
    Unschedulable and younger than the TTL; its ``next_change`` is the expiry."""
    objects = _karpenter(event_at, make_nodeclaim("default-x7k2p"))
    objects[2]["status"]["conditions"][0]["lastTransitionTime"] = sc.at(turned)
    derivation = derive(objects, "auto", now=T0_EPOCH + now)
    got = pods_by_name(derivation.status)["p"].state
    fresh = turned <= event_at and now < event_at + EVENT_TTL_SECONDS
    assert (got is PodState.NODE_PROVISIONING) is fresh
    if fresh:
        assert derivation.next_change == T0_EPOCH + event_at + EVENT_TTL_SECONDS


# --- the cache ------------------------------------------------------------------------------


def _event(uid: str, name: str, at: float) -> PodEventView:
    return PodEventView("ray", name, uid, "Nominated", sc.NOMINATED_CLAIM, "karpenter", at)


def test_the_cache_keeps_the_latest_event_of_ray_pods_only() -> None:
    ray = make_pod("r").ray("auto", "karp").obj()
    other = make_pod("o").obj()
    snap = snapshot_of(*sc.node_autoscaler()[:1], ray, other)
    editor = SnapshotEditor(snap)
    r_uid, o_uid = ray["metadata"]["uid"], other["metadata"]["uid"]
    editor.upsert(_event(r_uid, "r.1", T0_EPOCH - 5), "1")
    editor.upsert(replace(_event(r_uid, "r.2", T0_EPOCH), reason="FailedScheduling"), "2")
    editor.upsert(_event(o_uid, "o.1", T0_EPOCH), "3")
    editor.upsert(NodeClaimView("default-x7k2p"), "4")
    edited = editor.finish()
    latest = edited.pod_event(r_uid)
    assert latest is not None and latest.name == "r.2"
    assert edited.pod_event(o_uid) is None
    assert edited.counts()["events"] == 2 and edited.follows_node_claims() is False
    assert edited.changes is not None and ("ray", "auto") in edited.changes.clusters
    assert edited.node_claim("default-x7k2p") == NodeClaimView("default-x7k2p")


def test_a_claim_change_touches_the_clusters_of_pods_with_events() -> None:
    pod = make_pod("r").ray("auto", "karp").obj()
    snap = snapshot_of(pod, make_event(pod, "Nominated", sc.NOMINATED_CLAIM))
    editor = SnapshotEditor(snap)
    editor.replace(NODECLAIM, [("1", NodeClaimView("default-x7k2p", "n1"))])
    edited = editor.finish()
    assert edited.follows_node_claims()
    assert edited.changes is not None and edited.changes.clusters == {("ray", "auto")}
    editor = SnapshotEditor(edited)
    editor.absent(NODECLAIM)
    assert not editor.finish().follows_node_claims()


def test_events_of_bound_and_unknown_pods_are_forgotten() -> None:
    bound = make_pod("b").ray("auto", "karp").on("n1").obj()
    pending = make_pod("p").ray("auto", "karp").obj()
    snap = snapshot_of(bound, pending)
    editor = SnapshotEditor(snap)
    for uid, name in ((bound["metadata"]["uid"], "b.1"), (pending["metadata"]["uid"], "p.1"),
                      ("gone-old", "g.1")):
        editor.upsert(_event(uid, name, T0_EPOCH - 100), "1")
    editor.upsert(_event("gone-new", "g.2", T0_EPOCH), "1")
    assert editor.forget_events(T0_EPOCH - 60) == 2  # the bound pod's, the old orphan
    edited = editor.finish()
    assert {e.name for e in edited.objects.events} == {"p.1", "g.2"}
    editor = SnapshotEditor(edited)
    assert editor.delete(EVENT, ("ray", "p.1")) and not editor.delete(EVENT, ("ray", "p.1"))
