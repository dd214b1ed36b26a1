"""What each HTTP route's protocol allows in a reply: its method, statuses and body shape
(the error encoder its front gives each route, ``raygate.server.http.routes.reply_for``:
kube-scheduler's filter and every Volcano verb answer 200 with their own error field or
vote; prioritize, preempt and raygate's own API answer 400 with a JSON error)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
from hypothesis import HealthCheck, settings


def error_body(status: int, body: Any) -> None:
    """raygate's own error shape (``raygate.server.http.routes.reply_for``, no encoder)."""
    error = body["error"]
    assert error["code"] == status and isinstance(error["reason"], str)
    assert isinstance(error["message"], str) and error["message"]


def _filter(status: int, body: Any) -> None:
    # ExtenderFilterResult: every key always present (Go's encoding of the struct).
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                         "Error"}
    assert isinstance(body["Error"], str)
    assert all(isinstance(v, str) for v in body["FailedAndUnresolvableNodes"].values())


def _prioritize(status: int, body: Any) -> None:
    if status != 200:
        return error_body(status, body)
    for entry in body:  # HostPriorityList; scores 0..10 (MaxExtenderPriority)
        assert set(entry) == {"Host", "Score"} and 0 <= entry["Score"] <= 10
    return None


def _preempt(status: int, body: Any) -> None:
    if status != 200:
        return error_body(status, body)
    assert set(body) == {"NodeNameToMetaVictims"}
    return None


def _predicate(status: int, body: Any) -> None:
    # Volcano: an empty status passes; a string fails the node with that reason.
    assert set(body) == {"status", "code"} and isinstance(body["status"], str)
    assert body["code"] in range(6)
    if body["code"] == 1:
        assert body["status"].startswith("raygate: ")


def _volcano_prioritize(status: int, body: Any) -> None:
    # nodeScore must never be null: Volcano then chooses no node from the group.
    assert isinstance(body["nodeScore"], dict) and isinstance(body["errorMessage"], str)


def _victims(status: int, body: Any) -> None:
    assert body["status"] in (-1, 0, 1)
    assert body.get("victims") is None or isinstance(body["victims"], list)


def _vote(status: int, body: Any) -> None:
    assert body == {"status": 0}


def _session(status: int, body: Any) -> None:
    assert body == {}


def explain_shape(status: int, body: Any) -> None:
    if status != 200:
        return error_body(status, body)
    assert body["kind"] == "Explanation" and isinstance(body["nodes"], list)
    return None


def admission_shape(status: int, body: Any) -> None:
    if status != 200:
        return error_body(status, body)
    assert body["apiVersion"] == "raygate.io/v1"
    return None


def webhook_shape(status: int, body: Any) -> None:
    if status != 200:
        return error_body(status, body)
    assert body["kind"] == "AdmissionReview" and body["response"]["allowed"] is True
    return None


@dataclass(frozen=True)
class RouteContract:
    method: str
    statuses: frozenset[int]
    shape: Callable[[int, Any], None]
    content_type: str = "application/json"


def route_contract(method: str, statuses: set[int], shape: Callable[[int, Any], None],
              content_type: str = "application/json") -> RouteContract:
    return RouteContract(method, frozenset(statuses), shape, content_type)


PEER_OK = {200}  # the schedulers read no body that comes with another status
ROUTES: dict[str, RouteContract] = {
    "/scheduler/filter": route_contract("POST", PEER_OK, _filter),
    "/scheduler/prioritize": route_contract("POST", {200, 400}, _prioritize),
    "/scheduler/preempt": route_contract("POST", {200, 400}, _preempt),
    "/volcano/predicate": route_contract("POST", PEER_OK, _predicate),
    "/volcano/prioritize": route_contract("POST", PEER_OK, _volcano_prioritize),
    "/volcano/preemptable": route_contract("POST", PEER_OK, _victims),
    "/volcano/reclaimable": route_contract("POST", PEER_OK, _victims),
    "/volcano/jobEnqueueable": route_contract("POST", PEER_OK, _vote),
    "/volcano/onSessionOpen": route_contract("POST", PEER_OK, _session),
    "/volcano/onSessionClose": route_contract("POST", PEER_OK, _session),
    "/v1/explain": route_contract("POST", {200, 400}, explain_shape),
}


def check_reply(reply: httpx.Response, contract: RouteContract, method: str,
                request: bytes | None = None) -> None:
    """The reply to ``method`` on a route with ``contract``: its status and shape."""
    status = reply.status_code
    assert status < 500, reply.text[:500]
    allowed = method == contract.method or (method == "HEAD" and contract.method == "GET")
    if not allowed:
        assert status == 405, reply.text[:500]
        if method != "HEAD":  # a reply to HEAD has no body
            error_body(status, reply.json())
        return
    assert status in contract.statuses, (status, reply.text[:500])
    if method == "HEAD" or status == 304:
        return
    assert reply.headers["content-type"].startswith(contract.content_type)
    if contract.content_type != "application/json":
        return
    try:
        body = reply.json()
    except ValueError:
        # The filter's NodeList items and Volcano's evictees are echoed byte for byte:
        # what was not strict JSON in the request (invalid UTF-8, 1e400) is not in the
        # reply either. A Go peer never sends such bytes.
        if request is None or _strict_json(request):
            raise
        return
    contract.shape(status, body)


def _strict_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return True


HYPOTHESIS = settings(max_examples=35, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow,
                                             HealthCheck.data_too_large,
                                             HealthCheck.function_scoped_fixture])
