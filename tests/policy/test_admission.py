"""The admission-status derivation (``raygate.policy.admission``): the rule table, each state,
each piece of advice, the gang sources, the groups, and time."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.contract.proto.raygate.v1 import admission_pb2 as pb
from raygate.policy.admission import (
    POD_ADVICE,
    POD_RULES,
    SCALE_UP_RULES,
    AdmissionStatus,
    Derivation,
    GangSource,
    GangStatus,
    PodAction,
    PodFacts,
    PodState,
    ScaleUp,
    SchedulerVerdict,
    admission_inputs,
    admission_status,
    admission_statuses,
    classify_verdict,
    derive_pod,
)
from raygate.policy.config import ConfigError, PolicyConfig, policy_config_from_mapping
from raygate.policy.model import Condition, PodView
from testkit.builders import T0_EPOCH, Obj, iso, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import snapshot_of

CONFIG = PolicyConfig()


def derive(objects: list[Obj], cluster: str, now: float = T0_EPOCH,
           config: PolicyConfig = CONFIG) -> Derivation:
    snap = snapshot_of(*objects, config=config)
    view = snap.raycluster("ray", cluster)
    assert view is not None, cluster
    return admission_status(view, snap, config, now)


def pods_by_name(status: AdmissionStatus) -> dict[str, Any]:
    return {p.name: p for p in status.pods}


# --- the table is complete ----------------------------------------------------------------


def test_every_state_has_a_rule_and_an_advice() -> None:
    # Adding a PodState without a row in POD_RULES (or an advice) fails here.
    assert {rule.state for rule in POD_RULES} == set(PodState)
    assert set(POD_ADVICE) == set(PodState)


def test_every_state_has_a_proto_value_and_back() -> None:
    proto = {name for name in pb.Pod.State.keys() if name != "STATE_UNSPECIFIED"}  # noqa: SIM118
    assert proto == {"".join("_" + c if c.isupper() else c.upper() for c in s.value).lstrip("_")
                     for s in PodState}
    assert {n for n in pb.PodAdvice.Action.keys() if n != "ACTION_UNSPECIFIED"} == {  # noqa: SIM118
        a.value.upper() for a in PodAction}
    assert {n for n in pb.GroupAdvice.Action.keys() if n != "ACTION_UNSPECIFIED"} == {  # noqa: SIM118
        a.value.upper() for a in ScaleUp}


def test_rule_names_are_unique_and_the_last_rules_apply_to_everything() -> None:
    assert len({r.name for r in POD_RULES}) == len(POD_RULES)
    assert len({r.name for r in SCALE_UP_RULES}) == len(SCALE_UP_RULES)
    pod = PodView(uid="u", namespace="ray", name="p")
    gang = GangStatus(None, "", True, 0, 0, "")
    facts = PodFacts(pod, gang, None, CONFIG, T0_EPOCH, None, None, SchedulerVerdict.NONE)
    assert POD_RULES[-1].applies(facts)
    assert SCALE_UP_RULES[-1].decision is ScaleUp.PROCEED


def test_advice_follows_the_issue() -> None:
    keep = {s for s, (action, _) in POD_ADVICE.items() if action is PodAction.KEEP}
    assert keep == {PodState.STARTING, PodState.WAITING_FOR_GANG_ADMISSION,
                    PodState.WAITING_FOR_CAPACITY, PodState.NODE_PROVISIONING,
                    PodState.NO_NODE_COMING, PodState.UNSCHEDULABLE, PodState.PREEMPTED}
    replace_ = {s for s, (action, _) in POD_ADVICE.items() if action is PodAction.REPLACE}
    assert replace_ == {PodState.STUCK, PodState.EVICTED}


# --- what the scheduler said --------------------------------------------------------------

VERDICTS: list[tuple[str, str, str, str, SchedulerVerdict]] = [
    # (case, status, reason, message, verdict)
    ("no condition", "", "", "", SchedulerVerdict.NONE),
    ("scheduled", "True", "", "", SchedulerVerdict.NONE),
    ("insufficient cpu", "False", "Unschedulable", sc.INSUFFICIENT_CPU, SchedulerVerdict.CAPACITY),
    ("too many pods", "False", "Unschedulable", "0/2 nodes are available: 2 Too many pods.",
     SchedulerVerdict.CAPACITY),
    ("gpu wins over affinity", "False", "Unschedulable", sc.MIXED_GPU, SchedulerVerdict.CAPACITY),
    ("volcano unavailable", "False", "Unschedulable",
     "0/4 nodes are unavailable: 4 Insufficient memory.", SchedulerVerdict.CAPACITY),
    ("volcano pipelined", "False", "Unschedulable", sc.VOLCANO_PIPELINED,
     SchedulerVerdict.CAPACITY),
    ("host ports", "False", "Unschedulable",
     "0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod ports.",
     SchedulerVerdict.CAPACITY),
    # DynamicResources (kube-scheduler 1.37): the devices of a DRA GPU driver.
    ("dra devices taken", "False", "Unschedulable",
     "0/3 nodes are available: 1 cannot allocate all claims, 2 node(s) didn't match Pod's "
     "node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not "
     "helpful for scheduling.", SchedulerVerdict.CAPACITY),
    ("dra claim elsewhere", "False", "Unschedulable",
     "0/2 nodes are available: 2 resourceclaim not available on the node.",
     SchedulerVerdict.CONSTRAINTS),
    ("dra no class", "False", "Unschedulable",
     "0/2 nodes are available: 2 request gpus: device class gpu.example.com does not exist.",
     SchedulerVerdict.CONSTRAINTS),
    ("affinity", "False", "Unschedulable", sc.AFFINITY, SchedulerVerdict.CONSTRAINTS),
    ("taint <= 1.24", "False", "Unschedulable", sc.TAINT_OLD, SchedulerVerdict.CONSTRAINTS),
    ("taint keyed", "False", "Unschedulable", sc.TAINT_KEYED, SchedulerVerdict.CONSTRAINTS),
    ("taint(s) 1.34", "False", "Unschedulable", sc.TAINT_GENERIC, SchedulerVerdict.CONSTRAINTS),
    ("anti-affinity", "False", "Unschedulable",
     "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.",
     SchedulerVerdict.CONSTRAINTS),
    ("topology spread", "False", "Unschedulable",
     "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints.",
     SchedulerVerdict.CONSTRAINTS),
    ("volcano hypernode affinity", "False", "Unschedulable",
     "In hyperNode s0: 0/3 nodes are unavailable: 3 node(s) didn't match Pod's node "
     "affinity/selector.", SchedulerVerdict.CONSTRAINTS),
    ("volcano gang", "False", "Unschedulable", sc.VOLCANO_GANG, SchedulerVerdict.GANG),
    ("volcano allocated", "False", "Schedulable", sc.VOLCANO_ALLOCATED, SchedulerVerdict.GANG),
    ("gated", "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling "
     "gates", SchedulerVerdict.GATED),
    ("cordoned", "False", "Unschedulable", sc.CORDONED, SchedulerVerdict.OTHER),
    ("no message", "False", "Unschedulable", "", SchedulerVerdict.OTHER),
    ("scheduler error", "False", "SchedulerError", "binding rejected", SchedulerVerdict.NONE),
]


@pytest.mark.parametrize(("case", "status", "reason", "message", "verdict"), VERDICTS,
                         ids=[v[0] for v in VERDICTS])
def test_classify_verdict(case: str, status: str, reason: str, message: str,
                          verdict: SchedulerVerdict) -> None:
    cond = Condition("PodScheduled", status, reason, message) if status else None
    assert classify_verdict(cond) is verdict, case


# --- each state, from the snapshot fixtures -------------------------------------------------

EXPECTED = sc.EXPECTED_PODS


@pytest.mark.parametrize(("scenario", "pod", "state", "rule", "action"), EXPECTED,
                         ids=[f"{e[0]}:{e[1]}" for e in EXPECTED])
def test_pod_states(scenario: str, pod: str, state: str, rule: str, action: str) -> None:
    status = derive(sc.SCENARIOS[scenario](), sc.CLUSTERS[scenario]).status
    got = pods_by_name(status)[pod]
    assert (got.state, got.rule, got.advice.action) == (PodState(state), rule, PodAction(action)), (
        got.reason)
    assert got.reason and got.advice.reason


@pytest.mark.parametrize("scenario", sorted(sc.SCENARIOS))
def test_exactly_the_pods_not_running_are_listed(scenario: str) -> None:
    status = derive(sc.SCENARIOS[scenario](), sc.CLUSTERS[scenario]).status
    listed = {p.name for p in status.pods}
    assert listed == {e[1] for e in EXPECTED if e[0] == scenario}
    assert len(listed) == len(status.pods)  # one state per pod


def test_every_rule_is_reached_by_a_fixture() -> None:
    reached = {e[3] for e in EXPECTED} | {"gang-not-enough-resources"}  # see test below
    reached |= {"scale-up-held"}  # tests/policy/test_scale_up.py
    assert reached == {r.name for r in POD_RULES}


def test_reasons_quote_the_scheduler() -> None:
    demo = pods_by_name(derive(sc.preempted(), "demo").status)
    assert "Insufficient nvidia.com/gpu" in demo["demo-overflow-new"].reason
    assert "preempting to accommodate" in demo["demo-overflow-old"].reason
    plain = pods_by_name(derive(sc.no_gang(), "plain").status)
    assert "EvictionByEvictionAPI" in plain["plain-drained"].reason
    assert "untolerated taint(s)" in plain["plain-taint-generic"].reason


def test_since_is_when_the_wait_began() -> None:
    demo = pods_by_name(derive(sc.preempted(), "demo").status)
    assert demo["demo-overflow-old"].since == T0_EPOCH - 10  # DisruptionTarget
    assert demo["demo-overflow-new"].since == T0_EPOCH - 4  # PodScheduled=False
    lonely = pods_by_name(derive(sc.stuck(), "lonely").status)
    assert lonely["lonely-unbound"].since == T0_EPOCH - 300  # created
    assert lonely["lonely-pulling"].since == T0_EPOCH - 1200  # bound


# --- the gang ---------------------------------------------------------------------------------


def test_gangs() -> None:
    queued = derive(sc.inqueue_gang(), "queued").status.gang
    assert queued.source == GangSource("PodGroup", "ray", "ray-queued-pg")
    assert (queued.phase, queued.admitted, queued.min_member, queued.running) == (
        "Inqueue", False, 3, 0)
    kq = derive(sc.kueue_admitted(), "kq").status.gang
    assert kq.source == GangSource("Workload", "ray", "raycluster-kq-1a2b3")
    # Kueue's pod sets: the head and replicas × numOfHosts per group.
    assert (kq.phase, kq.admitted, kq.min_member, kq.running) == ("Admitted", True, 3, 2)
    kw = derive(sc.kueue_waiting(), "kw").status.gang
    assert (kw.phase, kw.admitted) == ("Pending", False)
    assert "QuotaReserved=False (Pending): couldn't assign flavors" in kw.reason
    plain = derive(sc.no_gang(), "plain").status.gang
    assert (plain.source, plain.phase, plain.admitted, plain.min_member, plain.running) == (
        None, "", True, 0, 1)


def test_podgroup_found_through_the_pods_annotation() -> None:
    # A RayJob's PodGroup is named after the RayJob; the pods carry its name.
    objects = [
        make_raycluster("rc").group("w", replicas=1).obj(),
        sc.make_podgroup("ray-myjob-pg").phase("Pending").min_member(2).obj(),
        make_pod("h").head("rc").annotate("scheduling.k8s.io/group-name", "ray-myjob-pg").obj(),
    ]
    status = derive(objects, "rc").status
    assert status.gang.source == GangSource("PodGroup", "ray", "ray-myjob-pg")
    assert status.pods[0].state is PodState.WAITING_FOR_GANG_ADMISSION


def test_gang_not_enough_resources_is_capacity_until_scheduled() -> None:
    pg = sc.make_podgroup("ray-rc-pg").phase("Inqueue").min_member(2).condition(
        "Unschedulable", "True", "NotEnoughResources",
        "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable",
        sc.at(-30))
    objects = [make_raycluster("rc").group("w", replicas=1).obj(),
               make_pod("h").head("rc").created(sc.at(-60)).obj()]
    waiting = derive([*objects, pg.obj()], "rc").status
    head = waiting.pods[0]
    assert (head.state, head.rule) == (PodState.WAITING_FOR_CAPACITY,
                                       "gang-not-enough-resources")
    assert head.since == T0_EPOCH - 30
    assert "NotEnoughResources" in waiting.gang.reason
    # Volcano leaves the old condition behind when it later schedules the gang.
    later = pg.condition("Scheduled", "True", "tasks in gang are ready to be scheduled", "",
                         sc.at(-10))
    assert derive([*objects, later.obj()], "rc").status.pods[0].state is (
        PodState.WAITING_FOR_GANG_ADMISSION)


def test_a_gang_its_queue_has_not_accepted_waits_for_admission_not_capacity() -> None:
    # Written by the real vc-scheduler 1.14 (make e2e, volcano-3-infeasible): the queue is
    # short of minResources, so enqueue leaves the PodGroup Pending, yet the gang plugin
    # still writes NotEnoughResources, and every pod the same PodScheduled message.
    message = ("4/4 tasks in gang unschedulable: pod group is not ready, 4 Pending, "
               "4 minAvailable; Pending: 4 Unschedulable")
    pg = sc.make_podgroup("ray-rc-pg").phase("Pending").min_member(4).condition(
        "Unschedulable", "True", "NotEnoughResources", message, sc.at(-30))
    head = make_pod("h").head("rc").created(sc.at(-60)).condition(*sc.unschedulable(
        "pod group is not ready, 4 Pending, 4 minAvailable; Pending: 4 Unschedulable"))
    objects = [make_raycluster("rc").group("w", replicas=3, min=3).obj(), head.obj()]
    status = derive([*objects, pg.obj()], "rc").status
    assert status.pods[0].state is PodState.WAITING_FOR_GANG_ADMISSION
    assert "its queue to accept it" in status.gang.reason and message in status.gang.reason
    # Once the queue takes it (Inqueue), the same condition is a wait for room.
    inqueue = derive([*objects, pg.phase("Inqueue").obj()], "rc").status
    assert inqueue.pods[0].state is PodState.WAITING_FOR_CAPACITY


def test_a_pod_volcano_skipped_for_its_sibling_takes_the_siblings_verdict() -> None:
    # The real vc-scheduler 1.14 (make e2e, volcano-2-preemption): once one pod of a
    # task role fails the predicates, allocate skips its siblings with this message.
    capacity = ("0/6 nodes are unavailable: 1 raygate: thrash-guard: GPU node refused to a "
                "CPU-only surplus worker, 5 Insufficient cpu.")
    skipped = ("Task ray/rc-overflow-b with role spec overflow has already predicated "
               "failed, skip")
    objects = [make_raycluster("rc").group("overflow", replicas=2).obj(),
               sc.running("h", "rc", "headgroup"),
               make_pod("rc-overflow-a").ray("rc", "overflow").created(sc.at(-60))
               .condition(*sc.unschedulable(capacity)).obj(),
               make_pod("rc-overflow-b").ray("rc", "overflow").created(sc.at(-60))
               .condition(*sc.unschedulable(skipped)).obj()]
    pods = {p.name: p for p in derive(objects, "rc").status.pods}
    assert pods["rc-overflow-b"].state is PodState.WAITING_FOR_CAPACITY
    assert "Insufficient cpu" in pods["rc-overflow-b"].reason
    # Alone, the skip is no verdict: not "Unschedulable" (which no capacity fixes).
    alone = [o for o in objects if o["metadata"]["name"] != "rc-overflow-a"]
    only = derive(alone, "rc").status.pods[0]
    assert only.state is not PodState.UNSCHEDULABLE


PREEMPTED = ("Preempted to accommodate a workload (UID: 1f, JobUID: 2e) due to "
             "prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq")


def test_a_workload_kueue_is_evicting_is_not_admitted_though_admitted_is_still_true() -> None:
    # Kueue 0.17: Evicted=True (Preempted) while Admitted stays True until the RayCluster
    # has stopped (about 14 s); then QuotaReserved=False (Pending) with Evicted still True.
    cluster = make_raycluster("rc").group("w", replicas=1).obj()
    going = sc.make_workload("raycluster-rc-aaaaa").owned_by("rc").admitted().condition(
        "Evicted", "True", "Preempted", PREEMPTED, sc.at(-5))
    gang = derive([cluster, going.obj()], "rc").status.gang
    assert (gang.phase, gang.admitted) == ("Evicted", False)
    assert "being evicted: Evicted=True (Preempted): Preempted to accommodate" in gang.reason
    requeued = (sc.make_workload("raycluster-rc-aaaaa").owned_by("rc")
                .condition("QuotaReserved", "False", "Pending",
                           "couldn't assign flavors to pod set head: insufficient unused "
                           "quota for cpu in flavor default-flavor, 2 more needed")
                .condition("Admitted", "False", "NoReservation", "The workload has no "
                           "reservation").condition("Evicted", "True", "Preempted", PREEMPTED))
    gang = derive([cluster, requeued.obj()], "rc").status.gang
    assert (gang.phase, gang.admitted) == ("Pending", False)
    assert gang.reason.index("QuotaReserved=False (Pending)") < gang.reason.index(
        "after Evicted=True (Preempted)"), "the current reason first"


def test_a_suspended_raycluster_without_a_workload_is_not_admitted() -> None:
    # Kueue suspends a queued RayCluster; rescaling a non-elastic one deletes its
    # Workload and keeps the cluster suspended until the new one is admitted.
    cluster = make_raycluster("rc").group("w", replicas=2).obj()
    cluster["spec"]["suspend"] = True
    gang = derive([cluster], "rc").status.gang
    assert (gang.source, gang.phase, gang.admitted) == (None, "Suspended", False)


def test_a_workload_of_a_deleted_raycluster_of_the_same_name_is_ignored() -> None:
    stale = sc.make_workload("raycluster-rc-old00").owned_by("rc").admitted().obj()
    stale["metadata"]["ownerReferences"][0]["uid"] = "uid-of-the-deleted-one"
    gang = derive([make_raycluster("rc").obj(), stale], "rc").status.gang
    assert gang.source is None


def test_the_workload_pod_sets_count_the_gang() -> None:
    # An elastic slice asks quota for its own counts, not the RayCluster's current spec.
    wl = sc.make_workload("raycluster-rc-aaaaa").owned_by("rc").admitted().obj()
    wl["spec"]["podSets"] = [{"name": "head", "count": 1}, {"name": "w", "count": 3}]
    cluster = make_raycluster("rc").group("w", replicas=6).obj()
    assert derive([cluster, wl], "rc").status.gang.min_member == 4


def test_the_live_workload_slice_wins() -> None:
    old = (sc.make_workload("raycluster-rc-aaaaa").owned_by("rc").admitted()
           .condition("Finished", "True", "WorkloadSliceReplaced", "replaced"))
    new = sc.make_workload("raycluster-rc-bbbbb").owned_by("rc").condition(
        "QuotaReserved", "False", "Pending", "insufficient quota")
    status = derive([make_raycluster("rc").obj(), old.obj(), new.obj()], "rc").status
    assert status.gang.source == GangSource("Workload", "ray", "raycluster-rc-bbbbb")
    assert not status.gang.admitted


def test_workload_admission_checks_pending() -> None:
    wl = sc.make_workload("raycluster-rc-ccccc").owned_by("rc").condition(
        "QuotaReserved", "True", "QuotaReserved").condition(
        "Admitted", "False", "UnsatisfiedAdmissionChecks", "waiting for check raygate")
    gang = derive([make_raycluster("rc").obj(), wl.obj()], "rc").status.gang
    assert (gang.phase, gang.admitted) == ("QuotaReserved", False)
    assert "Admitted=False (UnsatisfiedAdmissionChecks)" in gang.reason


# --- groups and scale-up ----------------------------------------------------------------------


def _groups(status: AdmissionStatus) -> dict[str, tuple[Any, ...]]:
    return {g.name: (g.floor, g.desired, g.scheduled, g.running, g.pending, g.preempted,
                     g.scale_up.action) for g in status.groups}


def test_group_counts_and_scale_up() -> None:
    hold, go = ScaleUp.HOLD, ScaleUp.PROCEED
    assert _groups(derive(sc.inqueue_gang(), "queued").status) == {
        "headgroup": (1, 1, 0, 0, 1, 0, hold), "workers": (2, 2, 0, 0, 2, 0, hold)}
    assert _groups(derive(sc.waiting_for_capacity(), "demo").status) == {
        "headgroup": (1, 1, 1, 1, 0, 0, hold), "baseline": (1, 1, 1, 1, 0, 0, go),
        "overflow": (0, 3, 0, 0, 3, 0, hold)}
    assert _groups(derive(sc.preempted(), "demo").status)["overflow"] == (
        0, 2, 0, 0, 1, 1, hold)
    assert _groups(derive(sc.stuck(), "lonely").status)["workers"] == (3, 3, 1, 0, 3, 0, go)
    assert _groups(derive(sc.kueue_admitted(), "kq").status)["workers"] == (
        2, 2, 2, 1, 1, 0, go)
    # kw-w1, behind raygate's own gate for a moment, is pending like any new pod; so is
    # kw-w2, behind another controller's.
    assert _groups(derive(sc.kueue_waiting(), "kw").status)["workers"] == (
        1, 1, 0, 0, 2, 0, hold)
    assert _groups(derive(sc.no_gang(), "plain").status)["workers"] == (6, 6, 0, 0, 5, 0, hold)


def test_scale_up_reasons() -> None:
    def reason(scenario: str, group: str) -> str:
        status = derive(sc.SCENARIOS[scenario](), sc.CLUSTERS[scenario]).status
        return next(g.scale_up.reason for g in status.groups if g.name == group)

    assert "wait for admission" in reason("inqueue-gang", "workers")
    assert "2 pods of this group already waiting for capacity" in reason(
        "waiting-for-capacity", "overflow")
    assert "cannot be placed" in reason("no-gang", "workers")
    assert "does not scale" in reason("no-gang", "headgroup")
    assert "gang is admitted" in reason("kueue-admitted", "workers")
    assert "no gang gates" in reason("stuck", "workers")


def test_suspended_cluster_holds() -> None:
    rc = make_raycluster("rc").group("w", replicas=2, min=1).obj()
    rc["spec"]["suspend"] = True
    status = derive([rc], "rc").status
    w = next(g for g in status.groups if g.name == "w")
    assert (w.desired, w.floor, w.scale_up.action) == (0, 0, ScaleUp.HOLD)
    assert "suspended" in w.scale_up.reason


def test_pods_going_away_without_a_disruption_are_not_listed() -> None:
    objects = [
        make_raycluster("rc").group("w", replicas=3).obj(),
        make_pod("deleted-by-kuberay").ray("rc", "w").on("n1").terminating(sc.at(-5)).obj(),
        make_pod("finished").ray("rc", "w").on("n1").phase("Failed").obj(),
        make_pod("unready-but-no-condition").ray("rc", "w").on("n1").obj(),  # Running
    ]
    assert derive(objects, "rc").status.pods == ()


def test_a_kubelet_evicted_pod_is_listed() -> None:
    evicted = (make_pod("e").ray("rc", "w").on("n1").phase("Failed")
               .condition("DisruptionTarget", "True", "TerminationByKubelet",
                          "The node was low on resource: memory.", sc.at(-3)).obj())
    status = derive([make_raycluster("rc").group("w", replicas=1).obj(), evicted], "rc").status
    assert [(p.state, p.advice.action) for p in status.pods] == [
        (PodState.EVICTED, PodAction.REPLACE)]


# --- time -------------------------------------------------------------------------------------


def test_stuck_comes_with_time_and_next_change_says_when() -> None:
    objects = [make_raycluster("rc").group("w", replicas=1).obj(),
               make_pod("w1").ray("rc", "w").created(sc.at(0)).obj()]
    young = derive(objects, "rc")
    assert young.status.pods[0].state is PodState.STARTING
    assert young.next_change == T0_EPOCH + 120
    assert derive(objects, "rc", now=T0_EPOCH + 119.9).status.pods[0].state is PodState.STARTING
    old = derive(objects, "rc", now=T0_EPOCH + 120)
    assert old.status.pods[0].state is PodState.STUCK
    assert old.next_change is None
    shorter = PolicyConfig(stuck_unbound_seconds=30)
    assert derive(objects, "rc", now=T0_EPOCH + 31, config=shorter).status.pods[0].state is (
        PodState.STUCK)


def test_a_preemption_leaves_the_window() -> None:
    inside = derive(sc.preempted(), "demo")
    assert inside.next_change == T0_EPOCH - 10 + 300
    after = derive(sc.preempted(), "demo", now=T0_EPOCH + 290)
    assert next(g.preempted for g in after.status.groups if g.name == "overflow") == 0


def test_the_status_depends_on_content_not_time() -> None:
    # Between deadlines, the status is the same whatever `now` is.
    a = derive(sc.waiting_for_capacity(), "demo", now=T0_EPOCH)
    b = derive(sc.waiting_for_capacity(), "demo", now=T0_EPOCH + 10_000)
    assert a == b
    assert a.next_change is None


def test_inputs_identify_the_status() -> None:
    snap = snapshot_of(*sc.inqueue_gang())
    again = snapshot_of(*sc.inqueue_gang())
    cluster = snap.raycluster("ray", "queued")
    assert cluster is not None
    assert admission_inputs(cluster, snap, CONFIG) == admission_inputs(cluster, again, CONFIG)
    changed = snapshot_of(*sc.inqueue_gang()[:-1])
    assert admission_inputs(cluster, snap, CONFIG) != admission_inputs(cluster, changed, CONFIG)
    assert set(admission_statuses(snap, CONFIG, T0_EPOCH)) == {("ray", "queued")}


# --- properties -------------------------------------------------------------------------------

MESSAGES = [m for _, s, _, m, _ in VERDICTS if s == "False"]
REASONS = ["Unschedulable", "Schedulable", "SchedulingGated", "SchedulerError"]


@st.composite
def pod_facts(draw: st.DrawFn) -> PodFacts:
    bound = draw(st.booleans())
    conditions: list[Condition] = []
    if draw(st.booleans()):
        conditions.append(Condition("PodScheduled", "True" if bound else "False",
                                    draw(st.sampled_from(REASONS)),
                                    draw(st.sampled_from(MESSAGES)),
                                    T0_EPOCH + draw(st.integers(-5000, 0))))
    if draw(st.integers(0, 4)) == 0:
        conditions.append(Condition("DisruptionTarget", "True",
                                    draw(st.sampled_from(["PreemptionByScheduler",
                                                          "DeletionByTaintManager", ""])),
                                    "", T0_EPOCH - 1))
    pod = PodView(uid="u", namespace="ray", name="p",
                  node_name="n1" if bound else "",
                  phase=draw(st.sampled_from(["Pending", "Running"])) if bound else "Pending",
                  conditions=tuple(conditions),
                  created=T0_EPOCH + draw(st.integers(-100_000, 0)),
                  nominated_node_name=draw(st.sampled_from(["", "", "n2"])))
    admitted = draw(st.booleans())
    source = GangSource("PodGroup", "ray", "pg")
    gang = GangStatus(source, "Running" if admitted else "Inqueue", admitted, 1, 0, "gang")
    capacity = (Condition("Unschedulable", "True", "NotEnoughResources", "", T0_EPOCH - 9)
                if draw(st.integers(0, 3)) == 0 else None)
    scheduled = pod.condition("PodScheduled")
    return PodFacts(pod, gang, capacity, CONFIG, T0_EPOCH + draw(st.integers(0, 100_000)),
                    pod.condition("DisruptionTarget"), scheduled, classify_verdict(scheduled))


@settings(max_examples=400, deadline=None)
@given(pod_facts())
def test_rule_order_holds(facts: PodFacts) -> None:
    status, until = derive_pod(facts)
    unexplained = facts.verdict in (SchedulerVerdict.NONE, SchedulerVerdict.OTHER)
    if facts.disruption is not None:
        assert status.state in (PodState.PREEMPTED, PodState.EVICTED)
    elif (not facts.bound and not facts.gang.admitted and unexplained
          and not facts.pod.nominated_node_name and facts.gang_capacity is None):
        # However long it waited: the gang explains the wait.
        assert status.state is PodState.WAITING_FOR_GANG_ADMISSION
    if status.state is PodState.STUCK:
        assert facts.bound or (facts.gang.admitted and facts.verdict is SchedulerVerdict.NONE
                               and not facts.pod.nominated_node_name
                               and facts.gang_capacity is None)
    if until is not None:
        # The state holds until `until`, and changes then.
        assert facts.now < until
        later, _ = derive_pod(replace(facts, now=until))
        assert later.state is PodState.STUCK
    else:
        for later_now in (facts.now + 1, facts.now + 1_000_000):
            later, _ = derive_pod(replace(facts, now=later_now))
            assert later == status


# --- settings ---------------------------------------------------------------------------------


def test_stuck_settings() -> None:
    config = policy_config_from_mapping({"stuckUnboundSeconds": 30, "stuckStartingSeconds": 900})
    assert (config.stuck_unbound_seconds, config.stuck_starting_seconds) == (30.0, 900.0)
    assert (CONFIG.stuck_unbound_seconds, CONFIG.stuck_starting_seconds) == (120.0, 600.0)
    with pytest.raises(ConfigError) as err:
        policy_config_from_mapping({"stuckUnboundSeconds": 0, "stuckStartingSeconds": "x"})
    assert err.value.problems == [
        "policy.stuckUnboundSeconds: expected a number of seconds > 0, got 0",
        "policy.stuckStartingSeconds: expected a number of seconds > 0, got 'x'",
    ]


@pytest.mark.parametrize(("gates", "state", "says"), [
    (["raygate.io/placement"], "Starting", "raygate is writing its placement"),
    ([], "Starting", "its scheduling gates are gone"),  # released, not judged yet
    (["kueue.x-k8s.io/admission"], "WaitingForGangAdmission", "Kueue's quota gate"),
    (["raygate.io/placement", "kueue.x-k8s.io/admission"], "WaitingForGangAdmission",
     "Kueue's quota gate"),
])
def test_raygates_own_gate_is_starting_anothers_is_admission(
        gates: list[str], state: str, says: str) -> None:
    pod = make_pod("w").ray("rc", "g").gated(*gates).created(iso(T0_EPOCH - 1)).condition(
        "PodScheduled", "False", "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates", iso(T0_EPOCH - 1)).obj()
    cluster = make_raycluster("rc").group("g", replicas=1, min=1, max=1).obj()
    (status,) = [p for p in derive([cluster, pod], "rc").status.pods if p.name == "w"]
    assert status.state.value == state and says in status.reason, status
