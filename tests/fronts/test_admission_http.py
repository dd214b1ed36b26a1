"""The admission-status HTTP API on a real server over loopback: the OpenAPI document,
each state and advice from the snapshot fixtures checked against it; ETag/304; errors;
logging; the Python client over HTTP."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from raygate.client import HttpAdmissionClient
from raygate.contract.errors import RayClusterNotFound
from raygate.policy.admission import PodState
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, ServerThread
from tests.fronts.admission_api import GET, LIST, OPENAPI, WAIT, check, get, path_of

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
    assert {k: v for k, v in overflow.items() if k not in ("scaleUp", "scaleGates")} == {
        "name": "overflow", "floor": 0, "desired": 2, "scheduled": 0, "running": 0,
        "pending": 1, "preempted": 1}
    # Preempted inside the window with a pod pending: raygate wants its thrash-guard gate,
    # not on the RayCluster yet (no writer runs here).
    assert overflow["scaleGates"] == [{
        "name": "raygate.io/thrash-guard", "writer": "raygate",
        "reason": "1 pod(s) preempted inside the thrash-guard window and 1 pending",
        "since": "2026-11-30T03:59:50Z", "wanted": True, "present": False}]
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
