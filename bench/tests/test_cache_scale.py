"""``bench.cache_scale``'s pure parts: what it creates through the API, which pods it
changes, how it reports. (The run itself needs the testbed: ``python -m bench.cache_scale``.)"""

from __future__ import annotations

import itertools

import msgspec
import pytest

from bench import cache_scale, cache_scale_load
from bench.cache_scale_list import Way
from bench.cache_scale_scheduler import SchedulerSynced
from bench.cluster_json import PODS_PER_RAYCLUSTER, Cluster, build_cluster


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return build_cluster(70, 3 * PODS_PER_RAYCLUSTER * 5)


def test_a_create_carries_no_metadata_the_api_server_sets(cluster: Cluster) -> None:
    for body in [cluster.nodes[0][1], cluster.rayclusters[0][1],
                 *(cluster.render(p) for p in cluster.pods[:3])]:
        meta = cache_scale_load._creatable(body)["metadata"]
        assert not set(cache_scale.SERVER_SET) & set(meta), meta
        assert meta["name"]


def test_changed_pods_are_distinct_running_workers_in_turn_over_the_clusters(
        cluster: Cluster) -> None:
    pods = cache_scale.changed_pods(cluster, 200)
    assert len({p.name for p in pods}) == 200
    assert all("-overflow-worker-" in p.name and p.cluster for p in pods)
    clusters = len(cluster.rayclusters)
    assert all(a.cluster != b.cluster for a, b in itertools.pairwise(pods)), \
        "consecutive changes hit other RayClusters"
    assert [p.cluster for p in pods[:clusters]] == [name for name, _ in cluster.rayclusters]


def test_more_changes_than_overflow_workers_is_refused(cluster: Cluster) -> None:
    with pytest.raises(ValueError, match="overflow workers"):
        cache_scale.changed_pods(cluster, len(cluster.rayclusters) * PODS_PER_RAYCLUSTER)


def test_the_change_turns_the_pod_not_ready() -> None:
    patch = cache_scale.not_ready("2026-12-02T01:00:00Z")
    conditions = {c["type"]: c for c in patch["status"]["conditions"]}
    assert set(conditions) == {"Ready", "ContainersReady"}
    assert all(c["status"] == "False" and c["lastTransitionTime"] == "2026-12-02T01:00:00Z"
               for c in conditions.values())


def test_podgroup_names_its_raycluster_as_kuberay_does() -> None:
    group = cache_scale.podgroup("rc-0001", "uid-1")
    assert group["metadata"]["name"] == "ray-rc-0001-pg"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    msgspec.json.encode(group)


def _result(**changes: object) -> cache_scale.Result:
    base: dict[str, object] = dict(
        date="2026-12-02T02:00:00+00:00", nodes=5000, pods=150000, rayclusters=300,
        podgroups=300, pod_json_mib=700.0, load_seconds=600.0, load_requests_per_s=500.0,
        ready_s=12.0, synced_log_s=12.0, rss_ready_mib=500.0, peak_rss_ready_mib=600.0,
        rss_end_mib=510.0, peak_rss_end_mib=600.0, changes=1000, rate_per_s=20.0,
        change_p50_ms=40.0, change_p99_ms=60.0, change_max_ms=70.0, patch_p50_ms=5.0,
        patch_p99_ms=9.0, lone_changes=100, lone_rate_per_s=4.0, lone_p50_ms=8.0,
        lone_p99_ms=12.0, lone_patch_p50_ms=6.0, pod_json_kib_served=11.0,
        alone=cache_scale.ListAlone(pages=Way(301, 155000, 1400.0, 30.0, 9.0),
                                    stream=Way(2, 155000, 1400.0, 25.0, 9.0)),
        scheduler=SchedulerSynced(ready_s=13.0, populated_s={"Pod": 12.5, "Node": 1.0}),
        baselines={}, ready_ratio=12.0 / 13.0,
        woken_by_other=0, etcd_db_mib=3000.0,
        kinds={"Pod": {"events": 1000, "relists": 0, "errors": 0}},
        versions={"kubernetes": "v1.37.2", "etcd": "v3.7.3", "raygate": "0.1.0",
                  "python": "3.11.7", "machine": "2 CPUs"},
        command="python -m bench.cache_scale")
    base.update(changes)
    return cache_scale.Result(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("changes", "not_met"), [
    ({}, 0),
    ({"ready_s": 15.5}, 1),
    ({"peak_rss_end_mib": 1100.0}, 1),
    ({"change_p99_ms": 100.0, "ready_s": 20.0}, 2),
    ({"ready_ratio": 1.01}, 1),
])
def test_the_table_says_which_goals_are_met(changes: dict[str, object], not_met: int) -> None:
    table = cache_scale.markdown(_result(**changes))
    assert table.count("**not met**") == not_met
    assert table.count(": met") == 4 - not_met
    assert "v1.37.2" in table and "python -m bench.cache_scale" in table
