"""Snapshots edited event by event answer exactly as one built whole from the same objects,
and a snapshot a reader holds never changes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.config import PolicyConfig
from raygate.policy.devices import (
    ClaimTemplateView,
    ClaimView,
    DeviceClassView,
    ResourceSliceView,
)
from raygate.policy.model import (
    Condition,
    GangGroupView,
    GroupKey,
    NodeView,
    OwnerRef,
    PodGroupView,
    PodView,
    PreemptionRecord,
    RayClusterView,
    WorkerGroupSpec,
    WorkloadView,
)
from raygate.server.cache.editor import SnapshotEditor, build_snapshot
from raygate.server.cache.indexes import PRIMARY
from raygate.server.cache.keys import (
    CLAIMTEMPLATE,
    DEVICECLASS,
    GANGGROUP,
    NODE,
    POD,
    PODGROUP,
    RAYCLUSTER,
    RESOURCECLAIM,
    RESOURCESLICE,
    WORKLOAD,
    ClusterObjects,
    View,
    key_of,
)
from raygate.server.cache.snapshot import Snapshot
from raygate.server.fronts.scheduler import HostPriorities
from testkit.builders import T0_EPOCH

# "accel" is a GPU device class by configuration: its driver's slices are GPUs while it
# exists (a class that picks nothing GPU, "nic", does not make its driver's slices GPUs).
CONFIG = PolicyConfig(gpu_device_classes=("accel",))
NODES = ("gpu-0", "gpu-1", "cpu-0", "cpu-1")
DRIVERS = ("gpu.nvidia.com", "accel.example.com", "nic.example.com")
CLUSTERS = ("c0", "c1")
GROUPS = ("headgroup", "g0", "g1")


def node(name: str) -> NodeView:
    gpu = {"nvidia.com/gpu": 8000} if name.startswith("gpu") else {}
    return NodeView(name, {"kubernetes.io/hostname": name}, {"cpu": 16000, **gpu})


def ray_labels(cluster: str, group: str) -> dict[str, str]:
    node_type = "head" if group == "headgroup" else "worker"
    return {"ray.io/cluster": cluster, "ray.io/group": group, "ray.io/node-type": node_type}


DISRUPTED = Condition("DisruptionTarget", "True", "PreemptionByScheduler", "", T0_EPOCH)

pods = st.builds(
    lambda i, node_name, ray, phase, deleted, disrupted, created: PodView(
        uid=f"uid-{i}", namespace="ray", name=f"p{i}",
        labels=ray_labels(*ray) if ray else {"app": "web"},
        controller=OwnerRef("RayCluster", ray[0], f"rc-{ray[0]}") if ray else None,
        node_name=node_name, phase=phase,
        conditions=(DISRUPTED,) if disrupted else (),
        created=T0_EPOCH + created, deleted=T0_EPOCH if deleted else None,
    ),
    st.integers(0, 7), st.sampled_from(("", *NODES)),
    st.sampled_from((None, ("c0", "g0"), ("c0", "g0"), ("c0", "headgroup"), ("c1", "g1"))),
    st.sampled_from(("Pending", "Running", "Running", "Succeeded")),
    st.sampled_from((False, False, False, True)), st.booleans(), st.integers(0, 100),
)
# Owners: a RayCluster (by name), a RayJob or RayService of its own or shared, a kind raygate
# does not know, none; the Workload of an owner may come before or after its RayCluster.
OWNERS = (None, OwnerRef("RayJob", "j0", "rj-j0"), OwnerRef("RayJob", "j1", "rj-j1"),
          OwnerRef("RayService", "s0", "rs-s0"), OwnerRef("AppWrapper", "a0", "aw-a0"))
rayclusters = st.builds(
    lambda name, replicas, auto, owner: RayClusterView(
        "ray", name, f"rc-{name}", autoscaling=auto,
        worker_groups=(WorkerGroupSpec("g0", replicas=replicas, min_replicas=1),
                       WorkerGroupSpec("g1", replicas=replicas, max_replicas=4)),
        owner=owner),
    st.sampled_from(CLUSTERS), st.integers(0, 4), st.booleans(), st.sampled_from(OWNERS))
workloads = st.builds(
    lambda i, owner: WorkloadView(
        "ray", f"wl-{i}", OwnerRef("RayCluster", owner, f"rc-{owner}")
        if isinstance(owner, str) else owner),
    st.integers(0, 3), st.sampled_from((*CLUSTERS, *OWNERS)))
podgroups = st.builds(lambda name, n: PodGroupView("ray", f"ray-{name}-pg", "Running", n),
                      st.sampled_from(CLUSTERS), st.integers(0, 5))
gang_groups = st.builds(lambda name, n: GangGroupView("ray", f"{name}-cluster", n),
                        st.sampled_from(CLUSTERS), st.integers(0, 5))
device_classes = st.builds(lambda name: DeviceClassView(name, (f"{name}.example.com",)),
                           st.sampled_from(("accel", "nic")))
resource_slices = st.builds(
    lambda node_name, driver, devices: ResourceSliceView(
        f"{node_name}-{driver}", driver, (node_name,), devices),
    st.sampled_from(NODES), st.sampled_from(DRIVERS), st.integers(0, 2))
claims = st.builds(lambda i, cls, template: (ClaimTemplateView if template else ClaimView)(
    "ray", f"claim-{i}", (cls,)), st.integers(0, 2), st.sampled_from(("accel", "nic")),
    st.booleans())
views: st.SearchStrategy[View] = st.one_of(
    pods, pods, pods, st.sampled_from(NODES).map(node), rayclusters, workloads, podgroups,
    gang_groups, device_classes, resource_slices, resource_slices, claims)


def kind_of(view: View) -> str:
    return {PodView: POD, NodeView: NODE, RayClusterView: RAYCLUSTER, PodGroupView: PODGROUP,
            WorkloadView: WORKLOAD, GangGroupView: GANGGROUP, DeviceClassView: DEVICECLASS,
            ResourceSliceView: RESOURCESLICE, ClaimView: RESOURCECLAIM,
            ClaimTemplateView: CLAIMTEMPLATE}[type(view)]


# An operation: ("upsert", view) or ("delete", view) (the view names the key to delete).
operations = st.lists(st.tuples(st.sampled_from(("upsert", "upsert", "delete")), views),
                      max_size=40)


def whole(state: dict[tuple[str, object], View]) -> Snapshot:
    by_kind: dict[str, list[View]] = {}
    for (kind, _), view in state.items():
        by_kind.setdefault(kind, []).append(view)
    return build_snapshot(ClusterObjects(**{  # type: ignore[arg-type]
        PRIMARY[kind]: tuple(views) for kind, views in by_kind.items()}), CONFIG)


def uids(views_: tuple[PodView, ...]) -> list[str]:
    return sorted(p.uid for p in views_)


def assert_same_answers(edited: Snapshot, built: Snapshot) -> None:
    assert edited.counts() == built.counts()
    assert edited.gpu_node_names == built.gpu_node_names
    assert edited.gpu_devices() == built.gpu_devices()
    assert edited.dra_gpu_nodes == built.dra_gpu_nodes
    for i in range(3):
        assert edited.resource_claim("ray", f"claim-{i}") == built.resource_claim(
            "ray", f"claim-{i}")
        assert edited.claim_template("ray", f"claim-{i}") == built.claim_template(
            "ray", f"claim-{i}")
    assert HostPriorities().of(edited) == HostPriorities().of(built)
    for name in (*NODES, "unknown"):
        assert edited.node(name) == built.node(name)
        assert edited.is_gpu_node(name) == built.is_gpu_node(name)
        assert uids(edited.pods_on_node(name)) == uids(built.pods_on_node(name))
    for i in range(8):
        assert edited.pod(f"uid-{i}") == built.pod(f"uid-{i}")
    for cluster in CLUSTERS:
        assert edited.raycluster("ray", cluster) == built.raycluster("ray", cluster)
        assert edited.podgroup("ray", f"ray-{cluster}-pg") == built.podgroup(
            "ray", f"ray-{cluster}-pg")
        assert edited.gang_group("ray", f"{cluster}-cluster") == built.gang_group(
            "ray", f"{cluster}-cluster")
        assert uids(edited.cluster_pods("ray", cluster)) == uids(
            built.cluster_pods("ray", cluster))
        assert sorted(w.name for w in edited.workloads_of("ray", cluster)) == sorted(
            w.name for w in built.workloads_of("ray", cluster))
        for group in GROUPS:
            key = GroupKey("ray", cluster, group)
            assert uids(edited.group_pods(key)) == uids(built.group_pods(key))
            assert edited.scheduled_count(key) == built.scheduled_count(key)
            # Edits remember preemptions of pods since deleted (the thrash guard needs
            # them), and a record keeps the class its node had when it was made.
            def plain(records: tuple[PreemptionRecord, ...]) -> set[tuple[str, str]]:
                return {(r.pod_uid, r.node_name) for r in records}
            assert plain(built.preemptions(key)) <= plain(edited.preemptions(key))
    assert sorted(r.name for r in edited.rayclusters()) == sorted(
        r.name for r in built.rayclusters())
    # The owner indexes hold exactly what a whole build holds, whatever the order.
    for index in ("workloads_of", "workloads_by_owner", "clusters_by_owner"):
        assert getattr(edited.indexes, index) == getattr(built.indexes, index), index


@settings(max_examples=150, deadline=None)
@given(ops=operations, cuts=st.lists(st.integers(0, 40), max_size=6))
def test_edits_answer_like_a_snapshot_built_whole(
    ops: list[tuple[str, View]], cuts: list[int]
) -> None:
    state: dict[tuple[str, object], View] = {}
    snap = Snapshot.empty(CONFIG)
    editor = SnapshotEditor(snap)
    for i, (op, view) in enumerate(ops):
        if i in cuts:  # several events per published snapshot, or one
            snap = editor.finish()
            editor = SnapshotEditor(snap)
        kind, key = kind_of(view), key_of(view)
        if op == "upsert":
            editor.upsert(view, str(i))
            state[(kind, key)] = view
        else:
            assert editor.delete(kind, key) == ((kind, key) in state)
            state.pop((kind, key), None)
    assert_same_answers(editor.finish(), whole(state))


def test_a_snapshot_held_by_a_reader_never_changes() -> None:
    pod = PodView("u1", "ray", "w1", labels=ray_labels("c0", "g0"), node_name="cpu-0",
                  phase="Running")
    before = build_snapshot(ClusterObjects(nodes=(node("cpu-0"), node("gpu-0")), pods=(pod,)),
                            CONFIG)
    editor = SnapshotEditor(before)
    editor.upsert(replace(pod, node_name="gpu-0"), "2")
    editor.delete(NODE, "cpu-0")
    editor.upsert(node("gpu-1"), "3")
    after = editor.finish()
    assert [p.node_name for p in before.pods_on_node("cpu-0")] == ["cpu-0"]
    assert before.pods_on_node("gpu-0") == ()
    assert before.gpu_node_names == {"gpu-0"}
    assert set(HostPriorities().of(before)) == {"cpu-0", "gpu-0"}
    assert before.counts()["nodes"] == 2
    assert [p.uid for p in after.pods_on_node("gpu-0")] == ["u1"]
    assert after.gpu_node_names == {"gpu-0", "gpu-1"}
    assert after.is_gpu_node("cpu-0") is None


def test_an_edit_of_pods_only_shares_the_node_structures() -> None:
    before = build_snapshot(ClusterObjects(nodes=(node("cpu-0"), node("gpu-0"))), CONFIG)
    editor = SnapshotEditor(before)
    editor.upsert(PodView("u1", "ray", "w1", node_name="cpu-0"), "7")
    editor.upsert(replace(node("cpu-0"), labels={"zone": "a"}), "8")  # same class
    after = editor.finish()
    assert after.gpu_node_names is before.gpu_node_names
    priorities = HostPriorities()  # the scheduler front's entries, kept per node classes
    priorities.follow(before)
    assert priorities.of(after) is priorities.of(before)


def test_replace_keeps_unchanged_views_and_drops_the_missing() -> None:
    a, b = PodView("a", "ns", "a"), PodView("b", "ns", "b")
    before = SnapshotEditor(Snapshot.empty(CONFIG))
    before.replace(POD, [("1", a), ("2", b)])
    snap = before.finish()
    editor = SnapshotEditor(snap)
    c = PodView("c", "ns", "c")
    assert editor.replace(POD, [("1", a), ("3", c)]) == (2, 1)
    after = editor.finish()
    assert after.pod("a") is a and after.pod("b") is None and after.pod("c") is c
    assert after.version_of(POD, "c") == ("3", c)


def test_preemptions_outlive_the_pod_and_are_forgotten_after_the_window() -> None:
    pod = PodView("u1", "ray", "w1", labels=ray_labels("c0", "g0"), node_name="gpu-0",
                  conditions=(DISRUPTED,), deleted=T0_EPOCH)
    key = GroupKey("ray", "c0", "g0")
    snap = build_snapshot(ClusterObjects(nodes=(node("gpu-0"),), pods=(pod,)), CONFIG)
    editor = SnapshotEditor(snap)
    editor.delete(POD, "u1")
    snap = editor.finish()
    assert [(r.pod_uid, r.on_gpu_node) for r in snap.preemptions(key)] == [("u1", True)]
    editor = SnapshotEditor(snap)
    assert editor.forget_preemptions_before(T0_EPOCH) == 0  # still inside the window
    assert editor.forget_preemptions_before(T0_EPOCH + 1) == 1
    assert editor.finish().preemptions(key) == ()


def test_a_pod_listed_before_its_node_is_recorded_on_a_gpu_node() -> None:
    pod = PodView("u1", "ray", "w1", labels=ray_labels("c0", "g0"), node_name="gpu-0",
                  conditions=(DISRUPTED,), deleted=T0_EPOCH)
    editor = SnapshotEditor(Snapshot.empty(CONFIG))
    editor.upsert(pod, "1")
    snap = editor.finish()
    editor = SnapshotEditor(snap)
    editor.upsert(node("gpu-0"), "2")
    key = GroupKey("ray", "c0", "g0")
    assert [r.on_gpu_node for r in editor.finish().preemptions(key)] == [True]


def test_a_snapshot_built_whole_keeps_the_objects_it_was_given() -> None:
    objects = ClusterObjects(nodes=(node("cpu-0"),))
    snap = build_snapshot(objects, CONFIG)
    assert snap.objects is objects
    edited = SnapshotEditor(snap)
    edited.upsert(node("cpu-1"), "2")
    assert {n.name for n in edited.finish().objects.nodes} == {"cpu-0", "cpu-1"}


def test_an_editor_finishes_once() -> None:
    editor = SnapshotEditor(Snapshot.empty(CONFIG))
    editor.finish()
    with pytest.raises(RuntimeError):
        editor.finish()


@settings(max_examples=60, deadline=None)
@given(listed=st.lists(pods, max_size=12), nodes=st.lists(st.sampled_from(NODES), max_size=4))
def test_a_first_list_indexes_pods_as_upserts_do(
    listed: list[PodView], nodes: list[str]
) -> None:
    listed = list({p.uid: p for p in listed}.values())  # a LIST names each object once
    base = SnapshotEditor(Snapshot.empty(CONFIG))
    for name in nodes:
        base.upsert(node(name), "1")
    snap = base.finish()
    loaded, upserted = SnapshotEditor(snap), SnapshotEditor(snap)
    assert loaded.replace(POD, [(str(i), p) for i, p in enumerate(listed)])[1] == 0
    for i, p in enumerate(listed):
        upserted.upsert(p, str(i))
    assert_same_answers(loaded.finish(), upserted.finish())


def test_the_editing_indexes_are_declared_as_the_snapshot_indexes_are() -> None:
    """``Editing`` declares (for the type checker) an editor per field of ``Indexes``."""
    from dataclasses import fields

    from raygate.server.cache.indexes import Editing, Indexes

    assert list(Editing.__annotations__) == [f.name for f in fields(Indexes)]


def test_the_scheduler_fronts_entries_follow_the_node_classes_as_they_change() -> None:
    """One ``HostPriorities`` over successive snapshots (nodes come, go, change class)
    answers as a new one would: only the nodes whose class changed are encoded again."""
    priorities = HostPriorities()
    snap = build_snapshot(ClusterObjects(nodes=(node("cpu-0"), node("gpu-0"))), CONFIG)
    priorities.follow(snap)  # as the cache's listener does on each publish
    first = priorities.of(snap)
    for change in ("a GPU node comes", "a CPU node goes", "a GPU node turns CPU"):
        editor = SnapshotEditor(snap)
        if change == "a GPU node comes":
            editor.upsert(node("gpu-1"), "2")
        elif change == "a CPU node goes":
            editor.delete(NODE, "cpu-0")
        else:
            editor.upsert(replace(node("gpu-0"), allocatable={"cpu": 8}), "3")
        snap = editor.finish()
        assert priorities.of(snap) == HostPriorities().of(snap)  # before the listener ran
        priorities.follow(snap)
        assert priorities.of(snap) == HostPriorities().of(snap)
    assert set(first) == {"cpu-0", "gpu-0"}  # what an earlier reader got never changes
