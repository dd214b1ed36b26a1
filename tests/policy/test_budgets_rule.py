"""The floor's PodDisruptionBudgets, the rule (``raygate.policy.budgets``): which budgets a
RayCluster gets, each ``minAvailable`` the very floor the extender protects, names unique
and short."""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raygate.policy.budgets import MAX_NAME, budget_name, desired_budgets
from raygate.policy.classify import HEAD_GROUP, group_floor
from raygate.policy.model import RayClusterView, WorkerGroupSpec
from raygate.server.cache import convert
from raygate.server.wire import kube
from testkit.builders import Obj, make_raycluster

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")


def view(obj: Obj) -> RayClusterView:
    return convert.raycluster_view(msgspec.convert(obj, kube.RayCluster))


@dataclass
class Case:
    id: str
    cluster: Obj
    floors: dict[str, int]
    """Group (``headgroup`` for the head) to minAvailable; absent: no budget."""


CASES = [
    Case("autoscaling: each group's minReplicas, the head 1",
         make_raycluster("rc").autoscaling().group("base", replicas=5, min=2, max=8)
         .group("burst", replicas=3, min=0, max=8).obj(),
         {HEAD_GROUP: 1, "base": 2}),
    Case("no autoscaling: replicas clamped to min and max",
         make_raycluster("rc").group("a", replicas=9, min=1, max=4)
         .group("b", replicas=0, min=2, max=4).obj(),
         {HEAD_GROUP: 1, "a": 4, "b": 2}),
    Case("multi-host groups count every host",
         make_raycluster("rc").autoscaling().group("tpu", replicas=2, min=2, hosts=4).obj(),
         {HEAD_GROUP: 1, "tpu": 8}),
    Case("a suspended cluster: none",
         make_raycluster("rc").autoscaling().group("base", min=2).suspended().obj(), {}),
    Case("a suspended group: none for it",
         make_raycluster("rc").autoscaling().group("base", min=2).group("gpu", min=1)
         .suspended("gpu").obj(),
         {HEAD_GROUP: 1, "base": 2}),
    Case("a floor of 0 everywhere: the head's only",
         make_raycluster("rc").autoscaling().group("burst", replicas=4, min=0).obj(),
         {HEAD_GROUP: 1}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_budgets_per_floor(case: Case) -> None:
    cluster = view(case.cluster)
    budgets = desired_budgets(cluster)
    assert {b.group: b.min_available for b in budgets} == case.floors
    for b in budgets:
        assert (b.namespace, b.cluster, b.cluster_uid) == (
            cluster.namespace, cluster.name, cluster.uid)
        assert b.labels == {"app.kubernetes.io/managed-by": "raygate",
                            "raygate.io/raycluster": "rc"}


def test_selectors_are_kuberays_labels_and_never_overlap() -> None:
    """The Eviction API refuses a pod two budgets select: the head's and the groups'
    select apart by ``ray.io/node-type``, the groups by ``ray.io/group``."""
    budgets = desired_budgets(view(make_raycluster("rc").autoscaling()
                                   .group("a", min=1).group("b", min=1).obj()))
    assert [dict(b.selector) for b in budgets] == [
        {"ray.io/cluster": "rc", "ray.io/node-type": "head"},
        {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "a"},
        {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "b"},
    ]


NAMES = [
    ("short names read as they are", "rc", "base", r"^rc-base-[0-9a-f]{8}$"),
    ("the head is `head`", "rc", HEAD_GROUP, r"^rc-head-[0-9a-f]{8}$"),
    ("long names are cut before the hash", "c" * 60, "g" * 60, r"^c{54}-[0-9a-f]{8}$"),
    ("upper case and odd characters made DNS-safe", "RC", "gpu_A", r"^rc-gpu-a-[0-9a-f]{8}$"),
]


@pytest.mark.parametrize(("cluster", "group", "pattern"), [n[1:] for n in NAMES],
                         ids=[n[0] for n in NAMES])
def test_names(cluster: str, group: str, pattern: str) -> None:
    name = budget_name(cluster, group)
    assert re.match(pattern, name), name
    assert len(name) <= MAX_NAME and DNS_SUBDOMAIN.match(name)
    assert budget_name(cluster, group) == name  # deterministic


def test_names_are_not_ambiguous() -> None:
    """Cluster ``a-b`` group ``c`` and cluster ``a`` group ``b-c`` read alike; the hash
    keeps their budgets apart."""
    assert budget_name("a-b", "c") != budget_name("a", "b-c")


_names = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,70}[a-z0-9])?", fullmatch=True)
_groups = st.lists(
    st.builds(WorkerGroupSpec, name=_names, replicas=st.none() | st.integers(0, 20),
              min_replicas=st.integers(0, 10), max_replicas=st.integers(0, 20),
              num_of_hosts=st.integers(1, 4), suspended=st.booleans()),
    max_size=6, unique_by=lambda g: g.name)
_clusters = st.builds(RayClusterView, namespace=st.just("ns"), name=_names,
                      uid=st.just("u"), autoscaling=st.booleans(), suspended=st.booleans(),
                      worker_groups=_groups.map(tuple))


@given(st.lists(_clusters, min_size=1, max_size=4, unique_by=lambda c: c.name))
def test_min_available_is_the_floor_the_extender_protects(
        clusters: list[RayClusterView]) -> None:
    names: list[str] = []
    for cluster in clusters:
        budgets = {b.group: b for b in desired_budgets(cluster)}
        if cluster.suspended:
            assert not budgets
            continue
        for group in (HEAD_GROUP, *(g.name for g in cluster.worker_groups)):
            floor = group_floor(cluster, group)
            if floor > 0:
                assert budgets[group].min_available == floor
            else:
                assert group not in budgets
        names += [b.name for b in budgets.values()]
    assert len(names) == len(set(names)), "names are unique in the namespace"
    assert all(len(n) <= MAX_NAME and DNS_SUBDOMAIN.match(n) for n in names)
