"""``GET /metrics`` on a real server on loopback: each counter moves by exactly what the
requests in between should move it by (servers in one process counting apart)."""

from __future__ import annotations

import json

import httpx
import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.model import ANNOTATION_PREEMPTABLE
from raygate.policy.placement import Rule
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import T0, Obj, make_pod
from testkit.volcano_objects import node_info, task_info
from tests.conftest import FakeClock, ServerThread, post_json
from tests.server.scrape import (
    CLUSTER,
    NAMES,
    NODES,
    PREEMPTOR,
    Delta,
    base,
    filter_body,
    over,
    preempt_body,
    scrape,
    uid,
)


@pytest.fixture
def delta(client: httpx.Client) -> Delta:
    return Delta(client)


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
