"""The cache says what each edit changed, and the admission statuses that trust it are
exactly those derived from scratch; a reloaded policy re-classifies every object."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.admission import admission_statuses
from raygate.policy.config import PolicyConfig
from raygate.policy.model import (
    Condition,
    GroupKey,
    NodeView,
    OwnerRef,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkerGroupSpec,
    WorkloadView,
)
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import SnapshotEditor, build_snapshot
from raygate.server.cache.keys import NODE, POD, ClusterObjects, View, key_of
from raygate.server.cache.snapshot import Changes, Snapshot
from raygate.server.cache.sync import SyncStatus
from raygate.server.fronts.admission.service import AdmissionService
from raygate.server.kube.source import CacheWriter
from testkit.builders import T0_EPOCH
from tests.cache.test_cache_edit import CONFIG, kind_of, node, operations, ray_labels

NOTHING = Changes(frozenset(), frozenset())


def edited(base: Snapshot, *views: View) -> Snapshot:
    editor = SnapshotEditor(base)
    for view in views:
        editor.upsert(view, "1")
    return editor.finish()


def ray_pod(uid: str, cluster: str, group: str = "g0", node_name: str = "cpu-0") -> PodView:
    return PodView(uid, "ray", uid, labels=ray_labels(cluster, group), node_name=node_name,
                   controller=OwnerRef("RayCluster", cluster, f"rc-{cluster}"),
                   phase="Running")


BASE = build_snapshot(ClusterObjects(nodes=(node("cpu-0"), node("gpu-0"))), CONFIG)


@pytest.mark.parametrize(("views", "clusters", "podgroups"), [
    pytest.param((PodView("w", "shop", "web-1", node_name="cpu-0"),), set(), set(),
                 id="a pod outside every RayCluster changes none"),
    pytest.param((node("cpu-1"),), set(), set(), id="a node changes none"),
    pytest.param((ray_pod("a", "c0"),), {("ray", "c0")}, set(), id="a Ray pod its cluster"),
    pytest.param((ray_pod("a", "c0"), ray_pod("b", "c1")), {("ray", "c0"), ("ray", "c1")},
                 set(), id="two clusters' pods"),
    pytest.param((PodGroupView("ray", "ray-c0-pg", "Running", 3),), set(),
                 {("ray", "ray-c0-pg")}, id="a PodGroup by its own name"),
    pytest.param((WorkloadView("ray", "wl", OwnerRef("RayCluster", "c1", "rc-c1")),),
                 {("ray", "c1")}, set(), id="a Workload its owner"),
])
def test_an_edit_names_what_it_changed(
    views: tuple[View, ...], clusters: set[tuple[str, str]], podgroups: set[tuple[str, str]]
) -> None:
    assert edited(BASE, *views).changes == Changes(frozenset(clusters), frozenset(podgroups))


JOB = OwnerRef("RayJob", "j0", "rj-j0")
JOBS_CLUSTER = RayClusterView("ray", "c0", "rc-c0", owner=JOB,
                              worker_groups=(WorkerGroupSpec("g0", replicas=1),))
WITH_JOBS_CLUSTER = edited(BASE, JOBS_CLUSTER)
EVICTED = (Condition("QuotaReserved", "True", "QuotaReserved"),
           Condition("Admitted", "True", "Admitted"), Condition("Evicted", "True", "Preempted"))


@pytest.mark.parametrize(("views", "clusters"), [
    pytest.param((WorkloadView("ray", "rayjob-j0", JOB),), {("ray", "c0")},
                 id="a RayJob's Workload the cluster the RayJob made"),
    pytest.param((WorkloadView("ray", "rayjob-j1", OwnerRef("RayJob", "j1", "rj-j1")),),
                 set(), id="a Workload of an owner with no cluster changes none"),
    pytest.param((replace(JOBS_CLUSTER, owner=OwnerRef("RayJob", "j1", "rj-j1")),),
                 {("ray", "c0")}, id="a cluster's new owner the cluster"),
])
def test_an_owners_workload_changes_the_cluster_it_made(
    views: tuple[View, ...], clusters: set[tuple[str, str]]
) -> None:
    assert edited(WITH_JOBS_CLUSTER, *views).changes == Changes(frozenset(clusters),
                                                                frozenset())


def test_kueue_evicting_a_rayjob_reaches_the_status_of_its_cluster() -> None:
    """The cached status of the RayJob's cluster is derived again when the RayJob's
    Workload changes: admitted, then not from the eviction on."""
    cache = ClusterCache(CONFIG, "test")
    service = AdmissionService(cache, lambda: T0_EPOCH + 1000.0)
    cache.publish(WITH_JOBS_CLUSTER)
    assert service.get("ray", "c0").status.gang.source is None
    admitted = WorkloadView("ray", "rayjob-j0", JOB, EVICTED[:2])
    cache.publish(edited(cache.snapshot, admitted))
    gang = service.get("ray", "c0").status.gang
    assert (gang.admitted, gang.source and gang.source.name) == (True, "rayjob-j0")
    cache.publish(edited(cache.snapshot, replace(admitted, conditions=EVICTED)))
    assert (service.get("ray", "c0").status.gang.phase,
            service.get("ray", "c0").status.gang.admitted) == ("Evicted", False)


def test_a_preemption_record_changes_its_cluster_even_after_the_pod_is_gone() -> None:
    from tests.cache.test_cache_edit import DISRUPTED
    pod = replace(ray_pod("a", "c0", node_name="gpu-0"), conditions=(DISRUPTED,))
    snap = edited(BASE, pod)
    editor = SnapshotEditor(snap)
    editor.delete(POD, "a")
    assert editor.finish().changes == Changes(frozenset({("ray", "c0")}), frozenset())
    assert snap.preemptions(GroupKey("ray", "c0", "g0"))


def test_the_cache_chains_changes_across_publishes_and_knows_when_it_cannot() -> None:
    cache = ClusterCache(CONFIG, "test")
    cache.publish(BASE)
    first = edited(BASE, ray_pod("a", "c0"))
    cache.publish(first)
    second = edited(first, ray_pod("b", "c1"))
    cache.publish(second)
    assert cache.changes_between(BASE, second) == Changes(
        frozenset({("ray", "c0"), ("ray", "c1")}), frozenset())
    assert cache.changes_between(first, second) == Changes(frozenset({("ray", "c1")}),
                                                           frozenset())
    assert cache.changes_between(second, second) == NOTHING
    # A snapshot built whole, or one never published in between: nobody knows.
    whole = build_snapshot(ClusterObjects(nodes=(node("cpu-0"),)), CONFIG)
    cache.publish(whole)
    assert cache.changes_between(second, whole) is None
    assert cache.changes_between(Snapshot.empty(CONFIG), second) is None


def test_a_bulk_load_of_pods_is_not_itemised() -> None:
    editor = SnapshotEditor(BASE)
    editor.replace(POD, [("1", ray_pod("a", "c0"))])
    assert editor.finish().changes is None


@settings(max_examples=120, deadline=None)
@given(ops=operations, cuts=st.lists(st.integers(0, 40), max_size=8),
       ticks=st.lists(st.integers(0, 40), max_size=3))
def test_statuses_that_trust_the_changes_equal_statuses_derived_afresh(
    ops: list[tuple[str, View]], cuts: list[int], ticks: list[int]
) -> None:
    now = [T0_EPOCH + 1000.0]
    cache = ClusterCache(CONFIG, "test")
    service = AdmissionService(cache, lambda: now[0])
    snap = Snapshot.empty(CONFIG)
    cache.publish(snap)
    editor = SnapshotEditor(snap)

    def check() -> None:
        fresh = admission_statuses(cache.snapshot, CONFIG, now[0])
        statuses = {key: entry.derivation.status
                    for key, entry in service.current().entries.items()}
        assert statuses == {key: d.status for key, d in fresh.items()}

    for i, (op, view) in enumerate(ops):
        if i in cuts:
            cache.publish(editor.finish())
            check()
            editor = SnapshotEditor(cache.snapshot)
        if i in ticks:  # time alone may change a status (a pod turning Stuck)
            now[0] += 400.0
        if op == "upsert":
            editor.upsert(view, str(i))
        else:
            editor.delete(kind_of(view), key_of(view))
    cache.publish(editor.finish())
    check()


GPU_LABELLED = NodeView("labelled", {"example.com/accelerator": "true"}, {"cpu": 8000})
RELABELLED = PolicyConfig(gpu_node_labels={"example.com/accelerator": "true"})


def test_set_policy_reclassifies_a_snapshot_source() -> None:
    cache = ClusterCache(CONFIG, "test")
    cache.publish(build_snapshot(ClusterObjects(nodes=(GPU_LABELLED, node("gpu-0"))), CONFIG))
    assert cache.snapshot.gpu_node_names == {"gpu-0"}
    cache.set_policy(RELABELLED)
    assert cache.snapshot.config is RELABELLED
    assert cache.snapshot.gpu_node_names == {"labelled", "gpu-0"}
    assert cache.snapshot.version_of(NODE, "labelled") is not None


def test_set_policy_goes_through_the_writer_in_order_with_events() -> None:
    cache = ClusterCache(CONFIG, "test")
    sync = SyncStatus([NODE])
    writer = CacheWriter(cache, sync, freeze_gc=False)
    cache.follow_writer(writer.set_policy)
    writer.replace(NODE, [("1", GPU_LABELLED)], "1")
    writer.drain()
    assert cache.snapshot.gpu_node_names == frozenset()
    cache.set_policy(RELABELLED)
    assert cache.snapshot.config is CONFIG  # not applied until the writer gets to it
    writer.change(NODE, "ADDED", "other", "2",
                  NodeView("other", {"example.com/accelerator": "true"}, {}))
    writer.drain()
    assert cache.snapshot.config is RELABELLED
    assert cache.snapshot.gpu_node_names == {"labelled", "other"}
    assert cache.snapshot.version_of(NODE, "labelled") == ("1", GPU_LABELLED)


def test_with_nobody_waiting_statuses_are_built_when_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under a stream of events, the loop derives no status nobody asked for: a change is
    logged (and derived) when the next reader comes, not at the publish."""
    import asyncio
    import logging

    cluster = RayClusterView("ray", "c0", "rc-c0",
                             worker_groups=(WorkerGroupSpec("g0", replicas=1),))

    async def scenario() -> None:
        cache = ClusterCache(CONFIG, "test")
        cache.publish(edited(BASE, cluster))
        service = AdmissionService(cache, lambda: T0_EPOCH + 1000.0)
        service.attach(asyncio.get_running_loop())
        caplog.clear()
        pending = replace(ray_pod("a", "c0", node_name=""), phase="Pending")
        cache.publish(edited(cache.snapshot, pending))
        for _ in range(20):
            await asyncio.sleep(0)  # a background rebuild, if any, would run now
        assert "RayCluster ray/c0" not in caplog.text
        assert service.get("ray", "c0").status.pods[0].name == "a"
        assert "RayCluster ray/c0: pod a" in caplog.text
        service.close()

    with caplog.at_level(logging.INFO, logger="raygate.admission"):
        asyncio.run(scenario())
