"""The gang of a RayCluster a RayJob or RayService made is the Workload of that owner, as
Kueue (0.17, its ``ray.io/rayjob`` and ``ray.io/rayservice`` integrations on as it ships)
admits it: named by the admission status and ``explain``, not admitted from Kueue's
eviction on, and never admitted while that Workload is not known."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from raygate.policy.admission import GangSource, PodState, ScaleUp, admission_status
from raygate.policy.config import PolicyConfig
from raygate.policy.explain import explain
from testkit.builders import T0_EPOCH, Obj, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import snapshot_of

CONFIG = PolicyConfig()
WORKLOAD = "rayjob-job-1a2b3"
PREEMPTED = ("Preempted to accommodate a workload (UID: 1f, JobUID: 2e) due to "
             "prioritization in the ClusterQueue")


def cluster(kind: str = "RayJob", owner: str = "job", queued: bool = True) -> Obj:
    builder = make_raycluster("job-raycluster-x7k2p").group("w", replicas=2).owned_by(
        kind, owner)
    return (builder.label("kueue.x-k8s.io/queue-name", "ray-queue") if queued else builder).obj()


def workload(owner: str = "job", kind: str = "RayJob", name: str = WORKLOAD) -> sc.WorkloadBuilder:
    return sc.make_workload(name).owned_by(owner, kind)


PENDING = workload().condition("QuotaReserved", "False", "Pending",
                               "couldn't assign flavors to pod set head: insufficient quota")
EVICTING = workload().admitted().condition("Evicted", "True", "Preempted", PREEMPTED)
REQUEUED = (workload().condition("QuotaReserved", "False", "Pending", "insufficient quota")
            .condition("Admitted", "False", "NoReservation", "The workload has no reservation")
            .condition("Evicted", "True", "Preempted", PREEMPTED))


@dataclass(frozen=True)
class Case:
    objects: tuple[Obj, ...]
    source: str | None
    """The Workload named as the gang, None for no source."""
    phase: str
    admitted: bool
    reason: str = ""


CASES = {
    "the RayJob's Workload queued": Case(
        (cluster(), PENDING.obj()), WORKLOAD, "Pending", False, "insufficient quota"),
    "the RayJob's Workload admitted": Case(
        (cluster(), workload().admitted().obj()), WORKLOAD, "Admitted", True),
    "Kueue evicting it, Admitted still True": Case(
        (cluster(), EVICTING.obj()), WORKLOAD, "Evicted", False, "being evicted"),
    "evicted and requeued": Case(
        (cluster(), REQUEUED.obj()), WORKLOAD, "Pending", False, "after Evicted=True"),
    "a RayService's Workload": Case(
        (cluster("RayService", "serve"),
         workload("serve", "RayService", "rayservice-serve-0f1e2").admitted().obj()),
        "rayservice-serve-0f1e2", "Admitted", True),
    "its Workload not known yet": Case(
        (cluster(),), None, "Pending", False, "RayJob ray/job is queued in Kueue"),
    "a Workload of a deleted RayJob of the same name": Case(
        (cluster(), workload("job-of-old", name="rayjob-job-old00").admitted().obj()),
        None, "Pending", False, "not known yet"),
    "a RayJob Kueue does not queue: no gang": Case(
        (cluster(queued=False),), None, "", True, "no PodGroup or Kueue Workload"),
    "an owner kind raygate does not know keeps today's answer": Case(
        (cluster("AppWrapper", "aw"), workload("aw", "AppWrapper", "appwrapper-aw").obj()),
        None, "", True, "no PodGroup or Kueue Workload"),
}


def _stale_uid(objects: tuple[Obj, ...]) -> tuple[Obj, ...]:
    """The Workload of a RayJob of the same name deleted before: another UID."""
    for obj in objects:
        refs = obj["metadata"].get("ownerReferences") or []
        if obj["kind"] == "Workload" and refs and refs[0]["name"] == "job-of-old":
            refs[0]["name"] = "job"
    return objects


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_gang_is_the_workload_of_the_clusters_owner(case: Case) -> None:
    snap = snapshot_of(*_stale_uid(case.objects),
                       make_pod("job-w-a").ray("job-raycluster-x7k2p", "w").created(
                           sc.at(-60)).obj())
    view = snap.raycluster("ray", "job-raycluster-x7k2p")
    assert view is not None
    status = admission_status(view, snap, CONFIG, T0_EPOCH).status
    gang = status.gang
    expected = None if case.source is None else GangSource("Workload", "ray", case.source)
    assert (gang.source, gang.phase, gang.admitted) == (expected, case.phase, case.admitted)
    assert case.reason in gang.reason
    worker = {g.name: g.scale_up.action for g in status.groups}["w"]
    assert worker is (ScaleUp.PROCEED if case.admitted else ScaleUp.HOLD)
    if not case.admitted:
        assert [p.state for p in status.pods] == [PodState.WAITING_FOR_GANG_ADMISSION]


def test_explain_names_the_rayjobs_workload() -> None:
    pod = make_pod("job-w-a").ray("job-raycluster-x7k2p", "w").created(sc.at(-60)).obj()
    snap = snapshot_of(cluster(), EVICTING.obj(), pod)
    view = snap.pod(pod["metadata"]["uid"])
    assert view is not None
    said = explain(view, snap, CONFIG, T0_EPOCH, ())
    assert said.admission_state == PodState.WAITING_FOR_GANG_ADMISSION.value
    assert f"Workload ray/{WORKLOAD} is being evicted" in (said.admission_reason or "")
