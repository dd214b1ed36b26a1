"""The admission-status HTTP API on a real server over loopback: each state and advice
from the snapshot fixtures, checked against the OpenAPI document; ETag/304; long-poll
woken by the cache or timed out; errors; the Python client over HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from jsonschema import Draft202012Validator

from raygate.client import HttpAdmissionClient
from raygate.contract.errors import RayClusterNotFound
from raygate.contract.proto.raygate.v1 import admission_pb2, admission_pb2_grpc
from raygate.policy.admission import PodState
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import T0_EPOCH, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, ServerThread, wait_until
from tests.docs import doc
from tools import openapi_document

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = json.loads(openapi_document.DOCUMENT.read_text())
WAIT = 10.0
"""Seconds to wait for something that happens in milliseconds: generous, never a sleep."""


def path_of(namespace: str, name: str) -> str:
    return f"/v1/namespaces/{namespace}/rayclusters/{name}/admission"


def check(template: str, response: httpx.Response) -> Any:
    """The reply's JSON, after checking it against the OpenAPI document's schema for
    ``template`` and the reply's status."""
    operation = OPENAPI["paths"][template]["get"]
    spec = operation["responses"][str(response.status_code)]
    if response.status_code == 304:
        assert response.content == b""
        assert response.headers["etag"]
        return None
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    errors = openapi_document.schema_errors(spec["content"]["application/json"]["schema"], body)
    assert not errors, errors
    return body


GET = "/v1/namespaces/{namespace}/rayclusters/{name}/admission"
LIST = "/v1/admission"


def get(client: httpx.Client, namespace: str, name: str, **params: Any) -> httpx.Response:
    return client.get(path_of(namespace, name), params=params)


# --- the document -----------------------------------------------------------------------------


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


ECHOED = ("kube.", "volcano.TaskInfo")
"""Objects a reply may hold as they were sent (Volcano's victims): open, as in requests."""


def _replied(schemas: dict[str, Any]) -> set[str]:
    """The components a reply's schema refers to, directly or not, but the echoed ones."""
    pending = [name for item in OPENAPI["paths"].values() for operation in item.values()
               if isinstance(operation, dict) for name in _refs(operation.get("responses"))]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name not in seen and not name.startswith(ECHOED):
            seen.add(name)
            pending.extend(_refs(schemas[name]))
    return seen


def test_the_openapi_document_is_served_and_sound(client: httpx.Client) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json() == OPENAPI
    assert OPENAPI["openapi"].startswith("3.1")
    schemas = OPENAPI["components"]["schemas"]
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)  # each schema is valid JSON Schema
    # What raygate writes is closed: a field it does not list is never in a reply. (What
    # it reads is open: Kubernetes objects and the schedulers' types carry more fields.)
    for name in _replied(schemas):
        schema = schemas[name]
        assert (schema.get("additionalProperties") is False or "$ref" in schema
                or schema.get("type") == "array"), name
    for path, item in OPENAPI["paths"].items():
        for method, operation in item.items():
            if method != "servers":  # the webhook's path names its own listener
                assert operation["operationId"] and operation["responses"], path
    states = OPENAPI["components"]["schemas"]["Pod"]["properties"]["state"]["enum"]
    assert states == [s.value for s in PodState]


# --- each state and advice --------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(sc.SCENARIOS))
def test_each_scenario(server: ServerThread, client: httpx.Client, scenario: str) -> None:
    server.publish(*sc.SCENARIOS[scenario]())
    name = sc.CLUSTERS[scenario]
    body = check(GET, get(client, "ray", name))
    assert (body["apiVersion"], body["kind"]) == ("raygate.io/v1", "AdmissionStatus")
    assert body["metadata"]["name"] == name
    got = {p["name"]: (p["state"], p["advice"]["action"]) for p in body["pods"]}
    assert got == {pod: (state, advice) for s, pod, state, _, advice in sc.EXPECTED_PODS
                   if s == scenario}
    for group in body["groups"]:
        assert group["scaleUp"]["action"] in ("proceed", "hold")
        assert group["scaleUp"]["reason"]


def test_the_fields_of_one_status(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.preempted())
    body = check(GET, get(client, "ray", "demo"))
    assert body["gang"] == {
        "source": {"kind": "PodGroup", "namespace": "ray", "name": "ray-demo-pg"},
        "phase": "Running", "admitted": True, "minMember": 2, "running": 2,
        "reason": body["gang"]["reason"]}
    overflow = next(g for g in body["groups"] if g["name"] == "overflow")
    assert {k: v for k, v in overflow.items() if k != "scaleUp"} == {
        "name": "overflow", "floor": 0, "desired": 2, "scheduled": 0, "running": 0,
        "pending": 1, "preempted": 1}
    assert overflow["scaleUp"]["action"] == "hold"
    old = next(p for p in body["pods"] if p["name"] == "demo-overflow-old")
    assert (old["state"], old["since"], old["nodeName"]) == (
        "Preempted", "2026-11-30T03:59:50Z", "gpu-node-1")


def test_no_gang_source_is_null(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.stuck())
    gang = check(GET, get(client, "ray", "lonely"))["gang"]
    assert (gang["source"], gang["phase"], gang["admitted"], gang["minMember"]) == (
        None, "", True, 0)


def test_list_all_and_by_namespace(server: ServerThread, client: httpx.Client) -> None:
    other = [make_raycluster("x", "team-b").obj(), make_pod("x-head", "team-b").head("x").obj()]
    server.publish(*sc.inqueue_gang(), *sc.stuck(), *other)
    everything = check(LIST, client.get("/v1/admission"))
    assert (everything["apiVersion"], everything["kind"]) == ("raygate.io/v1",
                                                              "AdmissionStatusList")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everything["items"]] == [
        ("ray", "lonely"), ("ray", "queued"), ("team-b", "x")]
    ray = check(LIST, client.get("/v1/admission", params={"namespace": "ray"}))
    assert [i["metadata"]["name"] for i in ray["items"]] == ["lonely", "queued"]
    assert ray["metadata"]["version"] != everything["metadata"]["version"]
    empty = check(LIST, client.get("/v1/admission", params={"namespace": "nobody"}))
    assert empty["items"] == []


# --- versions, ETag, 304 ----------------------------------------------------------------------


def test_etag_and_if_none_match(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.inqueue_gang())
    first = get(client, "ray", "queued")
    etag = first.headers["etag"]
    assert etag == f'"{first.json()["metadata"]["version"]}"'
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = client.get(path_of("ray", "queued"), headers={"If-None-Match": header})
        check(GET, again)
        assert again.status_code == 304, header
        assert again.headers["etag"] == etag
    stale = client.get(path_of("ray", "queued"), headers={"If-None-Match": '"0000000000000000"'})
    assert stale.status_code == 200
    # The same content in a new snapshot: the same version.
    server.publish(*sc.inqueue_gang())
    assert get(client, "ray", "queued").headers["etag"] == etag
    # A change: a new version.
    server.publish(*sc.inqueue_gang()[:-1])
    assert get(client, "ray", "queued").headers["etag"] != etag
    listed = client.get("/v1/admission")
    assert client.get("/v1/admission", headers={
        "If-None-Match": listed.headers["etag"]}).status_code == 304


# --- long-poll --------------------------------------------------------------------------------


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def test_long_poll_returns_at_once_when_the_version_differs(
        server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.inqueue_gang())
    version = get(client, "ray", "queued").json()["metadata"]["version"]
    started = time.monotonic()
    response = get(client, "ray", "queued", waitForChange="0" * 16, timeoutSeconds=60)
    assert time.monotonic() - started < WAIT
    assert check(GET, response)["metadata"]["version"] == version


def test_long_poll_wakes_on_a_change_through_the_cache(
        server: ServerThread, client: httpx.Client, pool: ThreadPoolExecutor) -> None:
    server.publish(*sc.inqueue_gang())
    before = get(client, "ray", "queued").json()["metadata"]["version"]
    service = server.server.services.admission
    with httpx.Client(base_url=server.url, timeout=120) as other:
        waiting: Future[httpx.Response] = pool.submit(
            get, other, "ray", "queued", waitForChange=before, timeoutSeconds=60)
        wait_until(lambda: service.waiting(("ray", "queued")))
        assert not waiting.done()
        # The cache publishes from this thread, not the server's loop.
        admitted = sc.make_podgroup("ray-queued-pg").owned_by("queued").phase("Running")
        server.publish(*sc.inqueue_gang()[:1], admitted.min_member(3).obj(),
                       *sc.inqueue_gang()[2:])
        response = waiting.result(WAIT)
    body = check(GET, response)
    assert body["metadata"]["version"] != before
    assert body["gang"]["admitted"] is True


def test_long_poll_of_the_list_wakes_on_a_new_cluster(
        server: ServerThread, client: httpx.Client, pool: ThreadPoolExecutor) -> None:
    server.publish(*sc.stuck())
    before = client.get("/v1/admission", params={"namespace": "ray"}).headers["etag"].strip('"')
    with httpx.Client(base_url=server.url, timeout=120) as other:
        waiting = pool.submit(other.get, "/v1/admission", params={
            "namespace": "ray", "waitForChange": before, "timeoutSeconds": "60"})
        wait_until(lambda: server.server.services.admission.waiting(("ray", None)))
        server.publish(*sc.stuck(), *sc.inqueue_gang())
        body = check(LIST, waiting.result(WAIT))
    assert [i["metadata"]["name"] for i in body["items"]] == ["lonely", "queued"]


def test_long_poll_times_out_with_the_same_status(
        server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.inqueue_gang())
    first = get(client, "ray", "queued")
    version = first.json()["metadata"]["version"]
    timed_out = get(client, "ray", "queued", waitForChange=version, timeoutSeconds=0.05)
    assert check(GET, timed_out)["metadata"]["version"] == version
    not_modified = client.get(path_of("ray", "queued"), headers={
        "If-None-Match": first.headers["etag"]}, params={
        "waitForChange": version, "timeoutSeconds": "0.05"})
    assert not_modified.status_code == 304


def test_long_poll_of_an_unknown_cluster_is_a_404_at_once(
        server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.stuck())
    started = time.monotonic()
    response = get(client, "ray", "queued", waitForChange="0" * 16, timeoutSeconds=60)
    assert check(GET, response)["error"]["reason"] == "NotFound"
    assert time.monotonic() - started < WAIT  # answered, not held for the 60 s


@pytest.mark.parametrize("seen", ["", "x", '"4fccef0cec470134"', "4FCCEF0CEC470134",
                                  "4fccef0cec47013", "4fccef0cec4701345"])
def test_a_malformed_wait_for_change_is_a_400_at_once(
        server: ServerThread, client: httpx.Client, seen: str) -> None:
    server.publish(*sc.stuck())
    for name in ("lonely", "unknown"):  # known or not: the parameter is checked first
        started = time.monotonic()
        response = get(client, "ray", name, waitForChange=seen, timeoutSeconds=60)
        assert response.status_code == 400
        assert "waitForChange" in check(GET, response)["error"]["message"]
        assert time.monotonic() - started < WAIT
    listing = client.get(LIST, params={"waitForChange": seen, "timeoutSeconds": "60"})
    assert listing.status_code == 400


def test_the_http_client_watches_a_cluster_that_appears_later(
        server: ServerThread, pool: ThreadPoolExecutor) -> None:
    """A named long-poll of an unknown cluster is a 404 at once: the client waits on the
    namespace's listing instead, with no busy loop."""
    server.publish(*sc.stuck())
    with HttpAdmissionClient(server.url, timeout=WAIT, poll_seconds=60) as api:
        events = api.watch("ray", "queued")
        assert next(events).type == "SYNCED"
        appeared = pool.submit(next, events)
        wait_until(lambda: server.server.services.admission.waiting(("ray", None)))
        server.publish(*sc.stuck(), *sc.inqueue_gang())
        event = appeared.result(WAIT)
        assert (event.type, event.status and event.status.metadata.name) == ("ADDED", "queued")
        events.close()


def test_time_alone_turns_a_pod_stuck(server: ServerThread, client: httpx.Client,
                                      pool: ThreadPoolExecutor) -> None:
    objects = [make_raycluster("t").group("w", replicas=1).obj(),
               make_pod("t-w1").ray("t", "w").created(sc.at(0)).obj()]
    server.publish(*objects)
    young = check(GET, get(client, "ray", "t"))
    assert young["pods"][0]["state"] == "Starting"
    # A poll after the deadline sees the new state (the status is derived again)...
    server.clock.now = T0_EPOCH + 121
    assert check(GET, get(client, "ray", "t"))["pods"][0]["state"] == "Stuck"
    # ...and a long-poll is woken by the deadline (the server's timer runs on real time;
    # with the fake clock the test triggers it).
    server.clock.now = T0_EPOCH
    server.publish(*objects)
    before = get(client, "ray", "t").json()["metadata"]["version"]
    with httpx.Client(base_url=server.url, timeout=120) as other:
        waiting = pool.submit(get, other, "ray", "t", waitForChange=before, timeoutSeconds=60)
        wait_until(lambda: server.server.services.admission.waiting(("ray", "t")))
        server.clock.now = T0_EPOCH + 121
        server.loop.call_soon_threadsafe(server.server.services.admission.refresh)
        assert check(GET, waiting.result(WAIT))["pods"][0]["state"] == "Stuck"


# --- errors -----------------------------------------------------------------------------------


def test_unknown_cluster_says_raygate_has_synced(server: ServerThread,
                                                client: httpx.Client) -> None:
    server.publish(*sc.stuck())
    response = get(client, "ray", "nope")
    assert response.status_code == 404
    error = check(GET, response)["error"]
    assert (error["code"], error["reason"], error["synced"]) == (404, "NotFound", True)
    assert "ray/nope" in error["message"]


def test_unknown_cluster_before_sync() -> None:
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock())
    thread.start()
    try:
        with httpx.Client(base_url=thread.url, timeout=WAIT) as client:
            response = get(client, "ray", "demo")
            assert response.status_code == 404
            assert check(GET, response)["error"]["synced"] is False
            assert "not synced" in response.json()["error"]["message"]
    finally:
        thread.stop()


@pytest.mark.parametrize("timeout", ["abc", "-1", "301", "nan", "inf"])
def test_bad_timeout_is_a_400(server: ServerThread, client: httpx.Client, timeout: str) -> None:
    server.publish(*sc.stuck())
    response = get(client, "ray", "lonely", waitForChange="0" * 16, timeoutSeconds=timeout)
    assert response.status_code == 400
    assert "timeoutSeconds" in check(GET, response)["error"]["message"]
    assert client.get("/v1/admission", params={"timeoutSeconds": timeout}).status_code == 400


def test_methods_and_paths(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.stuck())
    assert client.post(path_of("ray", "lonely")).status_code == 405
    assert client.get("/v1/namespaces/ray/rayclusters/lonely").status_code == 404
    assert client.get("/v1/namespaces/ray/rayclusters/lonely/admission/x").status_code == 404
    assert client.head(path_of("ray", "lonely")).status_code == 200
    # The scheduler's routes still answer beside the pattern routes.
    assert client.get("/healthz").json() == {"status": "ok"}


# --- logging ----------------------------------------------------------------------------------


def test_each_state_change_is_logged_once(server: ServerThread, client: httpx.Client,
                                          caplog: pytest.LogCaptureFixture) -> None:
    objects = sc.inqueue_gang()
    server.publish(*objects)
    get(client, "ray", "queued")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="raygate.admission"):
        gated = make_pod("queued-w1").ray("queued", "workers").created(sc.at(-60)).condition(
            *sc.unschedulable(sc.INSUFFICIENT_CPU)).obj()
        server.publish(objects[0], objects[1], objects[2], gated, objects[4])
        for _ in range(3):
            get(client, "ray", "queued")
        server.publish(objects[0], objects[1], objects[2], gated, objects[4])
        get(client, "ray", "queued")
    records = [r for r in caplog.records if r.name == "raygate.admission"]
    assert [{k: r.__dict__.get(k) for k in ("namespace", "raycluster", "pod")}
            for r in records] == [  # the JSON log's fields
        {"namespace": "ray", "raycluster": "queued", "pod": "queued-w1"}]
    lines = [r.getMessage() for r in records]
    assert lines == [
        "RayCluster ray/queued: pod queued-w1 WaitingForGangAdmission -> WaitingForCapacity: "
        "no node has room: Insufficient cpu (the scheduler says: "
        "0/5 nodes are available: 5 Insufficient cpu.)"]


# --- the Python client over HTTP --------------------------------------------------------------


def test_http_client(server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.inqueue_gang(), *sc.stuck())
    with HttpAdmissionClient(server.url, timeout=WAIT, poll_seconds=30) as api:
        status = api.get("ray", "queued")
        assert status.metadata.version == get(client, "ray", "queued").headers["etag"].strip('"')
        assert [p.state for p in status.pods] == ["WaitingForGangAdmission"] * 3
        assert [s.metadata.name for s in api.list("ray").items] == ["lonely", "queued"]
        with pytest.raises(RayClusterNotFound) as missing:
            api.get("ray", "nope")
        assert missing.value.synced is True
        events = api.watch("ray")
        assert [(e.type, e.status.metadata.name if e.status else None)
                for e in (next(events), next(events), next(events))] == [
            ("ADDED", "lonely"), ("ADDED", "queued"), ("SYNCED", None)]
        server.publish(*sc.inqueue_gang())  # lonely goes
        assert [(e.type, e.status.metadata.name if e.status else "") for e in [next(events)]] == [
            ("DELETED", "lonely")]
        server.publish(*sc.inqueue_gang()[:-1])  # queued changes
        changed = next(events)
        assert (changed.type, changed.status and len(changed.status.pods)) == ("MODIFIED", 2)
        events.close()


def test_shutdown_ends_long_polls_at_once(pool: ThreadPoolExecutor) -> None:
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock())
    thread.start()
    thread.publish(*sc.inqueue_gang())
    with httpx.Client(base_url=thread.url, timeout=120) as client:
        version = get(client, "ray", "queued").json()["metadata"]["version"]
        waiting = pool.submit(get, client, "ray", "queued", waitForChange=version,
                              timeoutSeconds=300)
        wait_until(lambda: thread.server.services.admission.waiting(("ray", "queued")))
        started = time.monotonic()
        thread.stop()
        response = waiting.result(WAIT)
    # The unchanged status, now: the server does not sit out a 300 s poll to stop.
    assert check(GET, response)["metadata"]["version"] == version
    assert time.monotonic() - started < WAIT


# --- the documentation ------------------------------------------------------------------------

README = doc("admission-api.md")
DEMO_NOW = T0_EPOCH + 86_400  # any time after the demo's events: no preemption in the window


@pytest.fixture(scope="module")
def demo() -> Iterator[ServerThread]:
    from raygate.server.cache.editor import build_snapshot
    from raygate.server.cache.snapshot_files import demo_text, load_text

    cache = ClusterCache(PolicyConfig(), "demo cluster")
    cache.publish(build_snapshot(load_text(demo_text(), "demo"), PolicyConfig()))
    thread = ServerThread(cache, FakeClock(DEMO_NOW))
    thread.start()
    yield thread
    thread.stop()


def test_documented_curl_example_is_what_the_demo_answers(demo: ServerThread) -> None:
    example = re.search(
        r"curl -s localhost:8888(?P<path>/v1/\S+) \| python3 -m json.tool\n```\n```json\n"
        r"(?P<reply>.*?)\n```", README, re.S)
    assert example is not None
    with httpx.Client(base_url=demo.url, timeout=WAIT) as client:
        live = check(GET, client.get(example["path"]))
    assert json.dumps(live, indent=4) == example["reply"]
    version = live["metadata"]["version"]
    assert f"If-None-Match: \"{version}\"" in README and f"waitForChange={version}" in README


def grpcurl_json(message: Message) -> str:
    """What grpcurl prints for ``message`` by default: protobuf's JSON with the proto's own
    field names (its jsonpb ``OrigName``), two-space indents, zero values left out.
    Checked once byte for byte against grpcurl 1.9.4 on the demo; the test below runs
    the real grpcurl too when one is on the PATH."""
    return json_format.MessageToJson(message, preserving_proto_field_name=True, indent=2) + "\n"


def test_documented_grpc_examples_are_what_the_tools_print(
        demo: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    from raygate.client.cli import main

    target = f"127.0.0.1:{demo.server.grpc_port}"
    command = ("grpcurl -plaintext -d '{\"namespace\": \"ray\", \"name\": \"queued\"}' "
               "localhost:9090 raygate.v1.Admission/Get")
    example = re.search(re.escape(command) + r"\n```\n.*?```json\n(?P<out>.*?)```", README, re.S)
    assert example is not None
    with grpc.insecure_channel(target) as channel:
        reply = admission_pb2_grpc.AdmissionStub(channel).Get(
            admission_pb2.GetRequest(namespace="ray", name="queued"), timeout=WAIT)
    assert grpcurl_json(reply) == example["out"]
    grpcurl = shutil.which("grpcurl")
    if grpcurl is not None:
        real = subprocess.run(
            [grpcurl, "-plaintext", "-d", '{"namespace": "ray", "name": "queued"}', target,
             "raygate.v1.Admission/Get"], capture_output=True, text=True, check=True,
            timeout=WAIT)
        assert real.stdout == example["out"]

    # raygate's client: the HTTP route's bytes, over gRPC as over HTTP.
    assert "raygate.client grpc://localhost:9090 get ray queued" in README
    with httpx.Client(base_url=demo.url, timeout=WAIT) as client:
        http_body = client.get(path_of("ray", "queued")).text
    for url in (f"grpc://{target}", demo.url):
        assert main([url, "get", "ray", "queued"]) == 0
        assert capsys.readouterr().out == http_body + "\n"
    live = json.loads(http_body)
    assert {p["state"] for p in live["pods"]} == {"WaitingForGangAdmission"}
    # Every state and piece of advice has its line in the documentation.
    for state in PodState:
        assert f"| `{state.value}` |" in README
    for word in ("**`keep`**", "**`replace`**", "**`scaleUp: proceed`**", "**`scaleUp: hold`**"):
        assert word in README


def _request_position(count: int, wake_batch: int) -> int:
    """Where a request that arrives as the first of ``count`` waiters wakes up runs among
    them, in the order the loop ran them."""
    from raygate.server.fronts.admission.service import AdmissionService
    from tests.conftest import snapshot_of

    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(*sc.inqueue_gang()))
    order: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        service = AdmissionService(cache, FakeClock(), wake_batch=wake_batch)
        service.attach(loop)
        seen = service.get("ray", "queued").version

        async def waiter() -> None:
            await service.wait_for_change(
                ("ray", "queued"), lambda g: g.entries[("ray", "queued")].version, seen, 60)
            if not order:  # the first woken: a request arrives now
                loop.call_soon(order.append, "request")
            order.append("waiter")

        tasks = [asyncio.ensure_future(waiter()) for _ in range(count)]
        signals = service._signals
        while ("ray", "queued") not in signals or len(signals[("ray", "queued")].waiters) < count:
            await asyncio.sleep(0)
        cache.publish(snapshot_of(*sc.inqueue_gang()[:-1]))
        await asyncio.gather(*tasks)
        service.close()

    asyncio.run(scenario())
    assert len(order) == count + 1
    return order.index("request")


def test_a_change_wakes_many_waiters_a_batch_at_a_time() -> None:
    """A request that arrives while a change wakes many waiters runs after a batch or two,
    not after all of them."""
    from raygate.server.fronts.admission.waiters import WAKE_BATCH

    count = 8 * WAKE_BATCH
    assert _request_position(count, WAKE_BATCH) <= 3 * WAKE_BATCH
    assert _request_position(count, count) == count  # all at once: the request last


def test_a_rebuild_of_many_clusters_lets_requests_through() -> None:
    """After a publish, statuses are derived a chunk of clusters per turn of the loop: a
    request queued meanwhile runs before the rebuild ends; one that reads the status
    finishes the rebuild itself and sees the new snapshot."""
    from raygate.server.fronts.admission import service as admission_api
    from raygate.server.fronts.admission.service import AdmissionService
    from tests.conftest import snapshot_of

    def clusters(phase: str) -> list[Any]:
        objects: list[Any] = []
        for i in range(3 * admission_api.REBUILD_CHECK_EVERY):
            objects += [make_raycluster(f"c{i}").obj(),
                        sc.make_podgroup(f"ray-c{i}-pg").phase(phase).obj()]
        return objects

    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(*clusters("Inqueue")))
    events: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        service = AdmissionService(cache, FakeClock(), rebuild_slice_seconds=0.0)  # a step per turn
        service.attach(loop)
        first = service.current()
        cache.publish(snapshot_of(*clusters("Running")))
        await asyncio.sleep(0)  # the listener's hop onto the loop: the rebuild starts
        loop.call_soon(lambda: events.append(
            "request during the rebuild" if service._generation is first
            else "request after the rebuild"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert events == ["request during the rebuild"]
        assert service.get("ray", "c0").status.gang.admitted  # finished on demand
        service.close()

    asyncio.run(scenario())
