"""The admission status of a RayCluster that Kubernetes' own gangs admit (1.37's
``scheduling.k8s.io/v1beta1`` PodGroup, as KubeRay's ``kubernetes-was`` writes it: one
PodGroup ``<cluster>-cluster``, every pod a member through ``spec.schedulingGroup``).
kube-scheduler's texts are those of ``k8s.io/kubernetes@v1.37.2``'s gang plugin."""

from __future__ import annotations

from raygate.policy.admission import PodState, admission_status
from raygate.policy.admission.gang import GANG_GROUP, GangSource, podgroup_names
from raygate.policy.config import PolicyConfig
from testkit.builders import T0_EPOCH, Obj, make_gang_group, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import snapshot_of

CONFIG = PolicyConfig()
CLUSTER = make_raycluster("rc").group("w", replicas=2, min=2, max=2).obj()


def members(*conditions: tuple[str, str, str, str, str] | None) -> list[Obj]:
    """The head and two workers of ``rc``, members of ``rc-cluster``, created a while ago
    (well past ``stuckUnboundSeconds``), each with its PodScheduled condition, if any."""
    pods = []
    for i, condition in enumerate(conditions):
        pod = (make_pod("h").head("rc") if i == 0 else make_pod(f"w{i}").ray("rc", "w"))
        pod = pod.gang("rc-cluster").created(sc.at(-600))
        pods.append((pod.condition(*condition) if condition else pod).obj())
    return pods


def status_of(objects: list[Obj]):  # type: ignore[no-untyped-def]
    snap = snapshot_of(CLUSTER, *objects, config=CONFIG)
    cluster = snap.raycluster("ray", "rc")
    assert cluster is not None
    return admission_status(cluster, snap, CONFIG, T0_EPOCH).status


def test_a_gang_kube_scheduler_has_not_tried_waits_for_admission_not_stuck() -> None:
    # Fewer than minCount members queued (or the group just made): kube-scheduler's
    # PreEnqueue holds them and writes no condition at all.
    status = status_of([make_gang_group("rc-cluster", 3, workload="rc"),
                        *members(None, None, None)])
    gang = status.gang
    assert gang.source == GangSource(GANG_GROUP, "ray", "rc-cluster")
    assert (gang.phase, gang.admitted, gang.min_member) == ("Pending", False, 3)
    assert "kube-scheduler has not tried it yet" in gang.reason
    assert {p.state for p in status.pods} == {PodState.WAITING_FOR_GANG_ADMISSION}


def test_a_gang_that_does_not_fit_whole_waits_for_capacity_or_its_members() -> None:
    message = "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"
    group = make_gang_group("rc-cluster", 3, scheduled=(
        "False", "Unschedulable", message, sc.at(-30)))
    status = status_of([group, *members(
        sc.unschedulable(message),
        sc.unschedulable("0/3 nodes are available: 3 Insufficient cpu."),
        sc.unschedulable(message))])
    states = {p.name: (p.state, p.rule) for p in status.pods}
    assert states == {
        "h": (PodState.WAITING_FOR_GANG_ADMISSION, "gang-waiting-for-members"),
        "w1": (PodState.WAITING_FOR_CAPACITY, "insufficient-resources"),
        "w2": (PodState.WAITING_FOR_GANG_ADMISSION, "gang-waiting-for-members"),
    }
    assert (status.gang.phase, status.gang.admitted) == ("Unschedulable", False)
    assert message in status.gang.reason


def test_a_gang_scheduled_once_stays_admitted() -> None:
    # PodGroupInitiallyScheduled never turns back, even when members are evicted later.
    group = make_gang_group("rc-cluster", 3, scheduled=("True", "Scheduled", "", sc.at(-60)))
    status = status_of([group, *members(None)])
    assert (status.gang.phase, status.gang.admitted, status.gang.min_member) == (
        "Scheduled", True, 3)


def test_the_pods_name_their_gang() -> None:
    snap = snapshot_of(CLUSTER, *members(None, None))
    cluster = snap.raycluster("ray", "rc")
    assert cluster is not None
    assert podgroup_names(cluster, snap.cluster_pods("ray", "rc")) == [
        "ray-rc-pg", "rc-cluster"]


def test_a_member_nominated_while_its_gang_is_bound_is_not_called_a_preemption() -> None:
    # kube-scheduler 1.37 nominates the members of a gang it placed just before it binds
    # them (seen in e2e/test_gangs_native.py): nothing was preempted.
    group = make_gang_group("rc-cluster", 3)
    pods = members(None, None, None)
    pods[0]["status"]["nominatedNodeName"] = "cpu-b"
    status = status_of([group, *pods])
    head = next(p for p in status.pods if p.name == "h")
    assert (head.state, head.rule) == (PodState.WAITING_FOR_CAPACITY, "nominated-node")
    assert "with its gang rc-cluster: the gang's placement is being bound" in head.reason
    assert "preemption made room" not in head.reason
