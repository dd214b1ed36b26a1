"""The admission-status derivation (``raygate.policy.admission``): the rule table, what
the scheduler said, each state from the snapshot fixtures (and which pods are listed),
time, properties of the rule order, and the settings."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.contract.command import ConfigError
from raygate.contract.proto.raygate.v1 import admission_pb2 as pb
from raygate.policy.admission import (
    POD_ADVICE,
    POD_RULES,
    SCALE_UP_RULES,
    GangSource,
    GangStatus,
    PodAction,
    PodFacts,
    PodState,
    ScaleUp,
    SchedulerVerdict,
    admission_inputs,
    admission_statuses,
    classify_verdict,
    derive_pod,
)
from raygate.policy.config import PolicyConfig, policy_config_from_mapping
from raygate.policy.model import Condition, PodView
from testkit.builders import T0_EPOCH, iso, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import snapshot_of
from tests.policy.derivation import CONFIG, derive, pods_by_name

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
    reached = {e[3] for e in EXPECTED}
    reached |= {"gang-not-enough-resources"}  # tests/policy/test_admission_gang_sources.py
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
