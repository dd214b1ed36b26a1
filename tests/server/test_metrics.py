"""``GET /metrics`` on a real server on loopback: each counter moves by exactly what the
requests in between should move it by."""

from __future__ import annotations

import json
import platform
from importlib.metadata import version
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raygate.policy.config import PolicyConfig
from raygate.policy.model import ANNOTATION_PREEMPTABLE
from raygate.policy.placement import Rule
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.sync import SyncStatus
from raygate.server.metrics.registry import LATENCY_BUCKETS, Metrics
from testkit.builders import T0, Obj, make_node, make_pod, make_raycluster, uid_for
from testkit.volcano_objects import node_info, task_info
from tests.conftest import FakeClock, ServerThread, post_json
from tests.docs import doc

NODES = [make_node("cpu-1").obj(), make_node("cpu-2").obj(),
         make_node("gpu-1").gpus(8).obj(), make_node("gpu-2").gpus(8).obj()]
NAMES = ["cpu-1", "gpu-1", "cpu-2", "gpu-2", "never-seen"]
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=6, min=0, max=8).obj()
PREEMPTOR = make_pod("trainer", "ml").requests(cpu="8", nvidia_com_gpu="4").priority(100).obj()

Key = tuple[str, tuple[tuple[str, str], ...]]


def scrape(client: httpx.Client) -> dict[Key, float]:
    reply = client.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    samples: dict[Key, float] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Key, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Delta:
    """What one block of requests moved: ``delta("raygate_x_total", label=...)``."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.before = scrape(client)
        self.after: dict[Key, float] = {}

    def __call__(self, name: str, **labels: str) -> float:
        if not self.after:
            self.after = scrape(self.client)
        return value(self.after, name, **labels) - value(self.before, name, **labels)


@pytest.fixture
def delta(client: httpx.Client) -> Delta:
    return Delta(client)


def base(name: str, node: str = "", cpu: str = "4") -> Obj:
    builder = make_pod(name).ray("rc", "base").requests(cpu=cpu)
    return (builder.on(node) if node else builder).obj()


def over(name: str, node: str = "", cpu: str = "4", priority: int = 0) -> Obj:
    builder = make_pod(name).ray("rc", "over").requests(cpu=cpu).priority(priority)
    return (builder.on(node) if node else builder).obj()


def uid(name: str, namespace: str = "ray") -> str:
    return uid_for("Pod", namespace, name)


def filter_body(pod: Obj, names: list[str]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def preempt_body(proposed: dict[str, list[str]]) -> dict[str, Any]:
    return {"Pod": PREEMPTOR, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
        for node, uids in proposed.items()}}


def test_filter_counts_the_request_the_decision_and_each_refused_node(
    server: ServerThread, client: httpx.Client, delta: Delta
) -> None:
    server.publish(*NODES, CLUSTER)
    for _ in range(3):
        assert post_json(client, "/scheduler/filter",
                         filter_body(base("b1"), NAMES)).status_code == 200
    verb = "scheduler/filter"
    assert delta("raygate_requests_total", route="/scheduler/filter", code="200") == 3
    assert delta("raygate_request_duration_seconds_count", route="/scheduler/filter") == 3
    assert delta("raygate_decisions_total", verb=verb, rule="floor-avoids-gpu") == 3
    assert delta("raygate_gpu_nodes_refused_total", verb=verb, rule="floor-avoids-gpu") == 6
    assert delta("raygate_fail_open_total", verb=verb, cause="unknown-raycluster") == 0


def test_every_rule_has_a_series_from_the_start(client: httpx.Client) -> None:
    samples = scrape(client)
    for verb in ("scheduler/filter", "scheduler/prioritize", "volcano/predicate"):
        for rule in Rule:
            assert ("raygate_decisions_total",
                    (("rule", rule.value), ("verb", verb))) in samples


def test_thrash_guard_hits_and_unknown_rayclusters(
    server: ServerThread, client: httpx.Client, delta: Delta
) -> None:
    preempted = make_pod("victim").ray("rc", "over").requests(cpu="2").on("gpu-1") \
        .preempted(T0, "PreemptionByScheduler").obj()
    server.publish(*NODES, CLUSTER, preempted)
    post_json(client, "/scheduler/filter", filter_body(over("o1"), NAMES))
    unknown = make_pod("x").ray("nope", "g").requests(cpu="1").obj()
    post_json(client, "/scheduler/filter", filter_body(unknown, NAMES))
    post_json(client, "/scheduler/prioritize", filter_body(unknown, NAMES))
    assert delta("raygate_decisions_total", verb="scheduler/filter", rule="thrash-guard") == 1
    assert delta("raygate_gpu_nodes_refused_total", verb="scheduler/filter",
                 rule="thrash-guard") == 2
    assert delta("raygate_decisions_total", verb="scheduler/filter",
                 rule="floor-avoids-gpu") == 1
    for verb in ("scheduler/filter", "scheduler/prioritize"):
        assert delta("raygate_fail_open_total", verb=verb, cause="unknown-raycluster") == 1


def test_prioritize_counts_unknown_nodes(
    server: ServerThread, client: httpx.Client, delta: Delta
) -> None:
    server.publish(*NODES, CLUSTER)
    reply = post_json(client, "/scheduler/prioritize",
                      filter_body(over("o1"), [*NAMES, "also-new"]))
    assert len(reply.json()) == 4
    # Unmanaged: no entries at all, and no fail-open either (raygate has no opinion).
    post_json(client, "/scheduler/prioritize",
              filter_body(make_pod("web", "default").obj(), NAMES))
    verb = "scheduler/prioritize"
    assert delta("raygate_fail_open_total", verb=verb, cause="unknown-node") == 2
    assert delta("raygate_decisions_total", verb=verb, rule="surplus-prefers-cpu") == 1
    assert delta("raygate_decisions_total", verb=verb, rule="not-a-ray-pod") == 1


@pytest.mark.parametrize(("objects", "proposed", "expected"), [
    pytest.param([base("b1", "gpu-1"), base("b2", "cpu-1"), over("o1", "gpu-1", cpu="8")],
                 {"gpu-1": [uid("b1"), uid("o1")]}, (1, 0, 0), id="floor victim removed"),
    pytest.param([base("b1", "gpu-1", cpu="8"), base("b2", "cpu-1"),
                  over("o1", "gpu-1", priority=7), over("o2", "gpu-1", priority=3)],
                 {"gpu-1": [uid("b1")]}, (1, 2, 0), id="floor victim substituted"),
    pytest.param([base("b1", "gpu-1", cpu="12"), base("b2", "cpu-1"),
                  make_pod("web", "default").requests(cpu="4").on("gpu-1").obj()],
                 {"gpu-1": [uid("b1")]}, (1, 0, 1), id="node dropped"),
])
def test_preempt_counts_what_raygate_changed(
    objects: list[Obj], proposed: dict[str, list[str]], expected: tuple[int, int, int],
    server: ServerThread, client: httpx.Client,
) -> None:
    """``expected``: victims removed, victims substituted, nodes dropped."""
    removed, substituted, dropped = expected
    server.publish(*NODES, CLUSTER, *objects)
    delta = Delta(client)
    assert post_json(client, "/scheduler/preempt", preempt_body(proposed)).status_code == 200
    verb = "scheduler/preempt"
    assert delta("raygate_preempt_victims_total", verb=verb, outcome="removed") == removed
    assert delta("raygate_preempt_victims_total", verb=verb,
                 outcome="substituted") == substituted
    assert delta("raygate_preempt_nodes_dropped_total", verb=verb) == dropped
    assert delta("raygate_requests_total", route="/scheduler/preempt", code="200") == 1


def test_preempt_counts_unknown_victims(
    server: ServerThread, client: httpx.Client, delta: Delta
) -> None:
    server.publish(*NODES, CLUSTER)
    post_json(client, "/scheduler/preempt",
              preempt_body({"gpu-1": ["not-in-cache", "nor-this"], "gpu-2": ["gone"]}))
    assert delta("raygate_fail_open_total", verb="scheduler/preempt",
                 cause="unknown-victim") == 3


def test_volcano_verbs(server: ServerThread, client: httpx.Client, delta: Delta) -> None:
    gpu, cpu = NODES[2], NODES[0]
    # One of two floor pods scheduled: the pending b3 is floor too.
    floor = [base("b1", "gpu-1")]
    server.publish(*NODES, CLUSTER, *floor)
    for node in (gpu, cpu):
        post_json(client, "/volcano/predicate",
                  {"task": task_info(base("b3")), "node": node_info(node)})
    # A node raygate does not know, sent without its Node object: it passes (fail open).
    post_json(client, "/volcano/predicate",
              {"task": task_info(base("b3")), "node": {"Name": "gpu-new", "Node": None}})
    post_json(client, "/volcano/prioritize",
              {"task": task_info(over("o9")), "nodes": [node_info(cpu), node_info(gpu)]})
    reply = client.post("/volcano/preemptable", content=json.dumps(
        {"evictor": task_info(PREEMPTOR), "evictees": [task_info(p) for p in floor]}))
    assert reply.json() == {"status": 1, "victims": []}
    assert delta("raygate_decisions_total", verb="volcano/predicate",
                 rule="floor-avoids-gpu") == 3
    assert delta("raygate_gpu_nodes_refused_total", verb="volcano/predicate",
                 rule="floor-avoids-gpu") == 1
    assert delta("raygate_fail_open_total", verb="volcano/predicate", cause="unknown-node") == 1
    assert delta("raygate_decisions_total", verb="volcano/prioritize",
                 rule="surplus-prefers-cpu") == 1
    assert delta("raygate_preempt_victims_total", verb="volcano/victims", outcome="removed") == 1
    assert delta("raygate_requests_total", route="/volcano/predicate", code="200") == 3
    assert delta("raygate_requests_total", route="/volcano/preemptable", code="200") == 1


def test_bad_requests_and_unknown_paths(client: httpx.Client, delta: Delta) -> None:
    # kube-scheduler's filter gets its error in a 200 (and fails open); our API a 404.
    assert client.post("/scheduler/filter", content=b"not json").status_code == 200
    assert client.post("/scheduler/prioritize", content=b"{}").status_code == 400
    assert client.get("/no/such/path").status_code == 404
    assert client.get("/scheduler/filter").status_code == 405
    assert client.get("/v1/namespaces/ray/rayclusters/absent/admission").status_code == 404
    assert delta("raygate_request_errors_total", route="/scheduler/filter",
                 reason="BadRequest") == 1
    assert delta("raygate_requests_total", route="/scheduler/filter", code="200") == 1
    assert delta("raygate_request_errors_total", route="/scheduler/prioritize",
                 reason="BadRequest") == 1
    assert delta("raygate_requests_total", route="/scheduler/prioritize", code="400") == 1
    assert delta("raygate_requests_total", route="other", code="404") == 1
    assert delta("raygate_requests_total", route="/scheduler/filter", code="405") == 1
    route = "/v1/namespaces/{namespace}/rayclusters/{name}/admission"
    assert delta("raygate_requests_total", route=route, code="404") == 1
    assert delta("raygate_request_errors_total", route=route, reason="NotFound") == 1


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


def test_servers_in_one_process_count_apart(server: ServerThread, client: httpx.Client) -> None:
    other = ServerThread(ClusterCache(PolicyConfig(), "other"), FakeClock())
    other.start()
    try:
        with httpx.Client(base_url=other.url, timeout=10) as other_client:
            before = scrape(other_client)
            delta = Delta(client)
            for _ in range(2):
                post_json(client, "/scheduler/filter", filter_body(base("b1"), NAMES))
            after = scrape(other_client)
    finally:
        other.stop()
    key = ("raygate_requests_total", (("code", "200"), ("route", "/scheduler/filter")))
    assert after.get(key, 0.0) == before.get(key, 0.0) == 0
    assert delta("raygate_requests_total", route="/scheduler/filter", code="200") == 2


def test_metrics_without_a_server_use_a_registry_of_their_own() -> None:
    one, two = Metrics(), Metrics()
    one.route("/x").done(200, 0.001)
    assert b'raygate_requests_total{code="200",route="/x"} 1.0' in one.exposition()
    assert b'route="/x"' not in two.exposition()


def test_preemptable_false_victims_count_as_removed(
    server: ServerThread, client: httpx.Client, delta: Delta
) -> None:
    keep = make_pod("keep", "default").requests(cpu="4").on("gpu-1") \
        .annotate(ANNOTATION_PREEMPTABLE, "false").obj()
    web = make_pod("web", "default").requests(cpu="8").on("gpu-1").obj()
    server.publish(*NODES, keep, web)
    post_json(client, "/scheduler/preempt",
              preempt_body({"gpu-1": [uid("keep", "default"), uid("web", "default")]}))
    assert delta("raygate_preempt_victims_total", verb="scheduler/preempt",
                 outcome="removed") == 1


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
