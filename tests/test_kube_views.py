"""The list/watch path's pod views equal ``convert.pod_view``'s (but for the conditions
raygate does not read), shared parts and all."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.payloads import ray_head_pod, ray_worker_pod
from extender import convert, snapshot_files
from extender.kube.views import POD_CONDITIONS, PodViews
from extender.snapshot_files import demo_text
from extender.wire import kube
from plugin.model import PodView
from tests.builders import make_pod

ROOT = Path(__file__).resolve().parent


def wire(obj: dict[str, Any]) -> kube.Pod:
    return msgspec.convert(obj, kube.Pod, strict=False)


def expected(pod: kube.Pod) -> PodView:
    """``convert.pod_view``, with only the conditions raygate reads."""
    view = convert.pod_view(pod)
    return replace(view, conditions=tuple(c for c in view.conditions
                                          if c.type in POD_CONDITIONS))


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


def test_views_equal_convert_on_every_known_pod() -> None:
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
def test_views_equal_convert_on_generated_pods(objs: list[dict[str, Any]]) -> None:
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


def test_a_bad_quantity_is_refused_as_convert_refuses_it() -> None:
    pod = wire(make_pod("a").requests(cpu="lots").obj())
    with pytest.raises(convert.ConversionError) as ours:
        PodViews()(pod)
    with pytest.raises(convert.ConversionError) as theirs:
        convert.pod_view(pod)
    assert str(ours.value) == str(theirs.value)
