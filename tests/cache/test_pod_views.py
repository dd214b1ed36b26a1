"""Pod views with shared parts (``convert.PodViews``): sharing never changes an answer
(a converter that has seen many pods gives what a fresh one gives), only the conditions
raygate reads are kept, and identical parts are one object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from raygate.policy.model import PodView
from raygate.server.cache import convert, snapshot_files
from raygate.server.cache.convert import PodViews
from raygate.server.cache.snapshot_files import demo_text
from raygate.server.wire import kube
from testkit.builders import make_pod
from testkit.ray_pods import ray_head_pod, ray_worker_pod

ROOT = Path(__file__).resolve().parents[1]


def wire(obj: dict[str, Any]) -> kube.Pod:
    return msgspec.convert(obj, kube.Pod, strict=False)


def expected(pod: kube.Pod) -> PodView:
    """The view of ``pod`` by a converter that has seen no other pod."""
    return PodViews()(pod)


def known_pods() -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    # The snapshot loader's YAML reading: timestamps stay strings, as in the API's JSON.
    for doc in yaml.load_all(demo_text(), Loader=snapshot_files._Loader):
        for obj in doc.get("items", []) if doc.get("kind") == "List" else [doc]:
            if obj.get("kind") == "Pod":
                pods.append(obj)
    for path in sorted((ROOT / "fixtures" / "scheduler").glob("*.request.json")):
        pod = json.loads(path.read_text()).get("Pod")
        if isinstance(pod, dict):
            pods.append(pod)
    pods += [ray_worker_pod(), ray_worker_pod(node_name="n1"), ray_head_pod("n1")]
    pods += [
        make_pod("w").ray("c").requests(cpu="2", memory="1Gi").limits(nvidia_com_gpu="1")
        .init_requests(cpu="100m").init_requests(sidecar=True, memory="64Mi")
        .preempted().priority(5).obj(),
        make_pod("x", "default").annotate("volcano.sh/preemptable", "false").on("n").obj(),
    ]
    return pods


def test_shared_parts_never_change_a_view_of_a_known_pod() -> None:
    views = PodViews()
    pods = known_pods()
    assert len(pods) > 5
    for obj in pods * 2:  # the second time from the shared parts
        pod = wire(obj)
        assert views(pod) == expected(pod)


quantities = st.sampled_from(["1", "500m", "2Gi", "0.5", "1e3", 3, "100Mi"])
resource_lists = st.none() | st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3)
containers = st.builds(
    lambda req, lim, always: {"name": "c", "restartPolicy": "Always" if always else None,
                              "resources": {"requests": req, "limits": lim}},
    resource_lists, resource_lists, st.booleans())
times = st.none() | st.sampled_from(["2026-11-30T04:00:00Z", "2026-11-30T04:00:01Z"])
pods = st.builds(
    lambda labels, cs, inits, overhead, conds, created: {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": labels,
                     "creationTimestamp": created},
        "spec": {"containers": cs, "initContainers": inits, "overhead": overhead},
        "status": {"conditions": [{"type": t, "status": "True", "lastTransitionTime": at}
                                  for t, at in conds]},
    },
    st.none() | st.dictionaries(st.sampled_from(["a", "b", "ray.io/cluster"]),
                                st.sampled_from(["x", "y"]), max_size=3),
    st.lists(containers, max_size=2), st.lists(containers, max_size=2), resource_lists,
    st.lists(st.tuples(st.sampled_from(["Ready", "PodScheduled", "Initialized"]), times),
             max_size=3), times)


@settings(max_examples=200, deadline=None)
@given(objs=st.lists(pods, min_size=1, max_size=4))
def test_shared_parts_never_change_a_view_of_generated_pods(objs: list[dict[str, Any]]) -> None:
    views = PodViews(limit=3)  # small: the memos fill and clear as they go
    for obj in objs:
        pod = wire(obj)
        assert views(pod) == expected(pod)


def test_identical_parts_are_shared() -> None:
    views = PodViews()
    a = views(wire(make_pod("a").ray("c").requests(cpu="2").obj()))
    b = views(wire(make_pod("b").ray("c").requests(cpu="2").obj()))
    assert a.containers[0] is b.containers[0]
    assert a.labels is b.labels


def test_only_the_conditions_raygate_reads_are_kept() -> None:
    view = PodViews()(wire(make_pod("a").obj() | {"status": {"conditions": [
        {"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady",
                                                 "PodScheduled", "DisruptionTarget")]}}))
    assert [c.type for c in view.conditions] == ["Ready", "PodScheduled", "DisruptionTarget"]


@pytest.mark.parametrize("views", [PodViews(), convert.pod_view], ids=["fresh", "shared"])
def test_a_bad_quantity_is_refused_with_its_path(views: PodViews) -> None:
    pod = wire(make_pod("a").requests(cpu="lots").obj())
    with pytest.raises(convert.ConversionError, match=r"\.spec\.containers\[0\]"
                                                      r"\.resources\.requests\.cpu"):
        views(pod, "$.Pod")


@pytest.mark.parametrize(("views", "pod", "kept"), [
    (PodViews(unbound_ray_constraints=True), ray_worker_pod(), True),
    (PodViews(unbound_ray_constraints=True), ray_worker_pod(node_name="n1"), False),
    (PodViews(unbound_ray_constraints=True), make_pod("x", "default").obj(), False),
    (convert.pod_view, ray_worker_pod(), False),
], ids=["cache-unbound-ray", "cache-bound-ray", "cache-not-ray", "request-path"])
def test_only_the_caches_views_keep_where_an_unbound_ray_pod_may_go(
        views: PodViews, pod: dict[str, Any], kept: bool) -> None:
    # The cache's views feed raygate.policy.room; a filter or webhook call never needs them.
    assert (views(wire(pod)).constraints is not None) is kept
