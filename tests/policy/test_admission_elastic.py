"""An elastic RayCluster under Kueue (0.17, ``ElasticJobsViaWorkloadSlices``): its gang is
the current Workload slice. A scale-up past the admitted slice makes a new slice that
replaces it; until Kueue admits that one, the new workers wait behind Kueue's scheduling
gate, and raygate says so with Kueue's words: waiting for gang admission, never for
capacity or stuck, and the group's scale-up held for Kueue's quota. Raygate's
all-or-nothing batch leaves out pods still behind Kueue's gate."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from raygate.policy.admission import GangSource, PodState, ScaleUp, admission_status
from raygate.policy.config import PolicyConfig
from raygate.policy.native import GATE
from raygate.policy.scale_up import ALL_OR_NOTHING, ANNOTATION, KUEUE_GATE, scale_up_batch
from testkit.builders import T0_EPOCH, Obj, iso, make_node, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import snapshot_of

CONFIG = PolicyConfig()
FIRST, SECOND = "raycluster-rc-1a2b3", "raycluster-rc-4c5d6"
NO_QUOTA = ("couldn't assign flavors to pod set workers: insufficient quota for cpu in "
            "flavor default-flavor, previously considered podsets requests (0) + current "
            "podset request (4) > maximum capacity (3)")
REPLACED = ("Workload slice replaced by ray/" + SECOND, "WorkloadSliceReplaced")


def rc(*, all_or_nothing: bool = False) -> Obj:
    builder = (make_raycluster("rc").autoscaling().group("w", replicas=3, max=4, cpu="1")
               .annotate("kueue.x-k8s.io/elastic-job", "true")
               .label("kueue.x-k8s.io/queue-name", "ray-queue"))
    return (builder.annotate(ANNOTATION, ALL_OR_NOTHING) if all_or_nothing else builder).obj()


def slice_(name: str) -> sc.WorkloadBuilder:
    return sc.make_workload(name).owned_by("rc")


OLD_ADMITTED = slice_(FIRST).admitted()
NEW_PENDING = slice_(SECOND).replaces(FIRST).condition(
    "QuotaReserved", "False", "Pending", NO_QUOTA)
OLD_REPLACED = OLD_ADMITTED.condition("Finished", "True", REPLACED[1], REPLACED[0])
NEW_ADMITTED = slice_(SECOND).replaces(FIRST).admitted()


def running(name: str, group: str = "w") -> Obj:
    pod = make_pod(name).ray("rc", group, "head" if group == "headgroup" else "worker")
    return pod.on("n1").condition("Ready", "True").created(sc.at(-600)).obj()


def waiting(name: str, *gates: str, age: float = 3600.0) -> Obj:
    pod = make_pod(name).ray("rc", "w").created(sc.at(-age)).gated(*gates)
    return pod.condition("PodScheduled", "False", "SchedulingGated",
                         "Scheduling is blocked due to non-empty scheduling gates").obj()


@dataclass(frozen=True)
class Case:
    workloads: tuple[Obj, ...]
    pods: tuple[Obj, ...]
    source: str
    admitted: bool
    gang_says: tuple[str, ...]
    pod_state: PodState | None
    """The state of the one pod not running (None: all run)."""
    pod_says: str
    scale_up: ScaleUp
    scale_up_says: str


RUNNING = (running("rc-head", "headgroup"), running("rc-w-a"), running("rc-w-b"))
CASES = {
    "one slice, admitted": Case(
        (OLD_ADMITTED.obj(),), RUNNING, FIRST, True, ("is Admitted",), None, "",
        ScaleUp.PROCEED, "the gang is admitted"),
    "scaled past quota: the new slice waits, an hour on": Case(
        (OLD_ADMITTED.obj(), NEW_PENDING.obj()), (*RUNNING, waiting("rc-w-c", KUEUE_GATE)),
        SECOND, False,
        (f"elastic slice that replaces ray/{FIRST}", "QuotaReserved=False (Pending)",
         "insufficient quota", f"keep ray/{FIRST}'s admission"),
        PodState.WAITING_FOR_GANG_ADMISSION,
        f"Kueue's scheduling gate {KUEUE_GATE} holds it until its Workload slice is "
        f"admitted: Workload ray/{SECOND}", ScaleUp.HOLD, "waits for Kueue's quota"),
    "raygate's gate beside Kueue's is still Kueue's wait": Case(
        (OLD_ADMITTED.obj(), NEW_PENDING.obj()),
        (*RUNNING, waiting("rc-w-c", GATE, KUEUE_GATE)), SECOND, False,
        ("insufficient quota",), PodState.WAITING_FOR_GANG_ADMISSION, "insufficient quota",
        ScaleUp.HOLD, "insufficient quota"),
    "the new slice admitted, the old finished: Kueue lifting its gate": Case(
        (OLD_REPLACED.obj(), NEW_ADMITTED.obj()), (*RUNNING, waiting("rc-w-c", KUEUE_GATE)),
        SECOND, True, ("is Admitted",), PodState.WAITING_FOR_GANG_ADMISSION,
        "Kueue is lifting the gate", ScaleUp.HOLD, "still waiting for admission"),
    "scaled back within quota: the admitted slice's pods run": Case(
        (OLD_REPLACED.obj(), NEW_ADMITTED.obj()), RUNNING, SECOND, True, ("is Admitted",),
        None, "", ScaleUp.PROCEED, "the gang is admitted"),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_gang_is_the_current_slice(case: Case) -> None:
    snap = snapshot_of(rc(), *case.workloads, *case.pods)
    view = snap.raycluster("ray", "rc")
    assert view is not None
    status = admission_status(view, snap, CONFIG, T0_EPOCH).status
    gang = status.gang
    assert (gang.source, gang.admitted) == (GangSource("Workload", "ray", case.source),
                                            case.admitted)
    for words in case.gang_says:
        assert words in gang.reason
    listed = [(p.state, p.reason) for p in status.pods]
    if case.pod_state is None:
        assert listed == []
    else:
        [(state, reason)] = listed
        assert state is case.pod_state
        assert case.pod_says in reason
    worker = {g.name: g for g in status.groups}["w"]
    assert worker.scale_up.action is case.scale_up
    assert case.scale_up_says in worker.scale_up.reason


def test_a_slice_left_by_a_deleted_raycluster_of_the_same_name_is_not_the_gang() -> None:
    stale = slice_(SECOND).replaces(FIRST).admitted().obj()
    stale["metadata"]["ownerReferences"][0]["uid"] = "an-older-raycluster"
    snap = snapshot_of(rc(), OLD_ADMITTED.obj(), stale, *RUNNING)
    view = snap.raycluster("ray", "rc")
    assert view is not None
    gang = admission_status(view, snap, CONFIG, T0_EPOCH).status.gang
    assert gang.source == GangSource("Workload", "ray", FIRST)


@pytest.mark.parametrize(("gates", "in_batch"), [
    ((GATE,), True),
    ((GATE, KUEUE_GATE), False),
], ids=["raygate's gate alone: in the batch", "behind Kueue's gate too: Kueue's wait"])
def test_the_all_or_nothing_batch_leaves_kueues_wait_to_kueue(
        gates: tuple[str, ...], in_batch: bool) -> None:
    pods = [make_pod(f"rc-w-{i}").ray("rc", "w").gated(*gates).requests(cpu="1")
            .created(iso(T0_EPOCH + i)).obj() for i in range(2)]
    snap = snapshot_of(rc(all_or_nothing=True), make_node("n1").allocatable(cpu="1").obj(),
                       *pods)
    view = snap.raycluster("ray", "rc")
    assert view is not None and view.all_or_nothing
    batch = scale_up_batch(view, snap, CONFIG, T0_EPOCH)
    if in_batch:
        assert batch is not None and (len(batch.pods), batch.fit) == (2, 1)
    else:
        assert batch is None
