"""The admission status's gang (``raygate.policy.admission``): where it comes from (a
Volcano PodGroup, a Kueue Workload, none) and when it is admitted; what its conditions
say of the pods that wait."""

from __future__ import annotations

from raygate.policy.admission import (
    GangSource,
    PodState,
)
from testkit.builders import T0_EPOCH, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.policy.derivation import derive


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
