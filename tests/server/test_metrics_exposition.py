"""What ``GET /metrics`` exposes besides request counts: latency buckets, the cache's and
the admission status's gauges read at scrape time, the families' names (each in
docs/operations.md), build info, and registries of their own."""

from __future__ import annotations

import platform
from importlib.metadata import version

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raygate.server.cache.sync import SyncStatus
from raygate.server.metrics.registry import LATENCY_BUCKETS, Metrics
from tests.conftest import ServerThread
from tests.docs import doc
from tests.server.scrape import CLUSTER, NODES, base, over, scrape, value


def test_latency_buckets_start_at_50_microseconds(client: httpx.Client) -> None:
    client.get("/healthz")
    samples = scrape(client)
    les = [le for (name, labels), _ in samples.items()
           if name == "raygate_request_duration_seconds_bucket"
           and ("route", "/healthz") in labels for key, le in labels if key == "le"]
    assert [float(le) for le in les] == [*LATENCY_BUCKETS, float("inf")]


def test_cache_objects_at_scrape_time(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*NODES, CLUSTER, base("b1", "cpu-1"))
    samples = scrape(client)
    assert value(samples, "raygate_cache_objects", kind="nodes") == 4
    assert value(samples, "raygate_cache_objects", kind="pods") == 1
    assert value(samples, "raygate_cache_objects", kind="rayclusters") == 1
    assert value(samples, "raygate_cache_ready") == 1
    # A file source has no list/watch to report.
    assert not any(name.startswith("raygate_cache_relists") for name, _ in samples)


def test_cache_list_watch_state_when_following_a_cluster(
    server: ServerThread, client: httpx.Client
) -> None:
    sync = SyncStatus(["nodes", "pods"], clock=lambda: 1000.0)
    sync.kinds["nodes"].relists = 2
    sync.kinds["nodes"].errors = 5
    sync.kinds["nodes"].events.update({"ADDED": 3, "MODIFIED": 4})
    sync.kinds["nodes"].last_event = 990.0
    sync.kinds["nodes"].synced = True
    server.cache.sync = sync
    try:
        samples = scrape(client)
    finally:
        server.cache.sync = None
    assert value(samples, "raygate_cache_relists_total", kind="nodes") == 2
    assert value(samples, "raygate_cache_watch_errors_total", kind="nodes") == 5
    assert value(samples, "raygate_cache_watch_events_total", kind="nodes") == 7
    assert value(samples, "raygate_cache_last_event_age_seconds", kind="nodes") == 10
    assert value(samples, "raygate_cache_synced", kind="nodes") == 1
    assert value(samples, "raygate_cache_synced", kind="pods") == 0
    # No event yet: no age (an alert on age must not fire on a kind still listing).
    assert ("raygate_cache_last_event_age_seconds", (("kind", "pods"),)) not in samples


def test_admission_pods_by_state_counts_only(
    server: ServerThread, client: httpx.Client
) -> None:
    pending = [over(f"o{i}") for i in range(3)]
    server.publish(*NODES, CLUSTER, base("b1", "cpu-1"), *pending)
    status = client.get("/v1/namespaces/ray/rayclusters/rc/admission").json()
    expected: dict[str, int] = {}
    for pod in status["pods"]:
        expected[pod["state"]] = expected.get(pod["state"], 0) + 1
    assert sum(expected.values()) >= 3
    samples = scrape(client)
    got = {dict(labels)["state"]: v for (name, labels), v in samples.items()
           if name == "raygate_admission_pods"
           and dict(labels)["raycluster"] == "rc" and dict(labels)["namespace"] == "ray"}
    assert got == expected
    assert all(set(dict(labels)) == {"namespace", "raycluster", "state"}
               for name, labels in samples if name == "raygate_admission_pods")


STANDARD = ("process_", "python_")
"""prometheus-client's standard families: the names Python services export everywhere."""


def test_every_name_is_raygate_prefixed_or_a_standard_one(client: httpx.Client) -> None:
    text = client.get("/metrics").text
    names = [f.name for f in text_string_to_metric_families(text)]
    assert names
    assert all(name.startswith(("raygate_", *STANDARD)) for name in names), names
    # The standard families, under their standard names (not raygate_process_*).
    for name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds", "python_info", "python_gc_collections"):
        assert name in names, name
    assert not [name for name in names if name.startswith("raygate_process_")]


def test_build_info_names_the_version_and_python(client: httpx.Client) -> None:
    samples = scrape(client)
    (labels,) = [dict(labels) for name, labels in samples if name == "raygate_build_info"]
    assert labels == {"version": version("raygate"), "python": platform.python_version(),
                      "implementation": platform.python_implementation()}
    assert value(samples, "raygate_build_info", **labels) == 1.0


def test_readme_lists_every_metric(client: httpx.Client) -> None:
    operations = doc("operations.md").split("\n## Logs", 1)[0]
    for family in text_string_to_metric_families(client.get("/metrics").text):
        # prometheus_client's `_created` series (counter and histogram creation times)
        # parse as families of their own.
        if family.name.startswith(STANDARD) or family.name.endswith("_created"):
            continue
        shown = family.name + ("_total" if family.type == "counter" else "")
        assert f"`{shown}`" in operations, shown
    for prefix in STANDARD:
        assert f"`{prefix}*`" in operations, prefix


def test_metrics_without_a_server_use_a_registry_of_their_own() -> None:
    one, two = Metrics(), Metrics()
    one.route("/x").done(200, 0.001)
    assert b'raygate_requests_total{code="200",route="/x"} 1.0' in one.exposition()
    assert b'route="/x"' not in two.exposition()


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    metrics = Metrics()
    route = metrics.route("/x")
    for seconds in (50e-6, 60e-6, 0.002, 3.0):
        route.done(200, seconds)
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.labels.get("route") == "/x":
                samples[sample.name + sample.labels.get("le", "")] = sample.value
    bucket = "raygate_request_duration_seconds_bucket"
    # `le` is inclusive: 50 µs is in the 50 µs bucket.
    assert samples[bucket + "5e-05"] == 1
    assert samples[bucket + "0.0001"] == 2
    assert samples[bucket + "0.0025"] == 3
    assert samples[bucket + "2.5"] == 3
    assert samples[bucket + "+Inf"] == 4
    assert samples["raygate_request_duration_seconds_count"] == 4
    assert samples["raygate_request_duration_seconds_sum"] == pytest.approx(3.00211)


def test_authz_and_config_reloads_are_read_at_scrape_time() -> None:
    from raygate.server.metrics.collectors import AuthzCounts
    from raygate.server.metrics.registry import Metrics

    metrics, counts, reloads = Metrics(), AuthzCounts(), {"ok": 0, "failed": 0}
    metrics.watch_authz(counts)
    metrics.watch_config(reloads)
    counts.decisions["allowed"] += 3
    counts.decisions["unavailable"] += 1
    counts.reviews[("tokenreview", "ok")] += 2
    counts.cache_hits["tokenreview"] += 5
    reloads["failed"] += 1
    operations = doc("operations.md").split("\n## Logs", 1)[0]
    samples = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        if family.name.startswith(("raygate_authz", "raygate_config")):
            assert f"`{family.name}_total`" in operations, family.name
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    assert samples[("raygate_authz_decisions_total", (("outcome", "allowed"),))] == 3
    assert samples[("raygate_authz_decisions_total", (("outcome", "unavailable"),))] == 1
    assert samples[("raygate_authz_reviews_total",
                    (("kind", "tokenreview"), ("result", "ok")))] == 2
    assert samples[("raygate_authz_cache_hits_total", (("kind", "tokenreview"),))] == 5
    assert samples[("raygate_config_reloads_total", (("result", "failed"),))] == 1
    assert samples[("raygate_config_reloads_total", (("result", "ok"),))] == 0
