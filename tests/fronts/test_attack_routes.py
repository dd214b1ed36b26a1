"""Every HTTP route raygate serves, attacked with generated requests: the golden requests
of ``tests/fixtures`` (and builder-made ones) mutated at random paths — wrong types at
every key, keys deleted or duplicated or re-cased, numbers past any integer or float
(``2**70``, ``1e400``), lone surrogates and invalid UTF-8, deep nesting, very long
strings, nulls, truncated or spliced bytes — plus random methods, path parameters, query
strings and headers.

Invariants, per request: the server answers (no connection reset, no 5xx), with a status
the route's protocol allows and a body in that protocol's shape (the error encoder its
front gives each route, ``raygate.server.http.routes.reply_for``: kube-scheduler's filter
and every Volcano verb answer 200 with their own error field or vote; prioritize, preempt
and raygate's own API answer 400 with a JSON error); and after each example the golden
requests still get their golden replies byte for byte (nothing was corrupted). One demo
server per module; Hypothesis example counts are sized so the file runs in well under a
minute on two busy cores.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import msgspec
import pytest
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raygate.policy.config import PolicyConfig
from raygate.policy.native import GATE
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot_files import demo_text, load_text
from raygate.server.listeners import WebhookListener, bind_socket
from testkit.builders import T0_EPOCH, make_pod
from tests.conftest import FakeClock, ServerThread, start_demo_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCHEDULER = FIXTURES / "scheduler"
VOLCANO = FIXTURES / "volcano"


def _load(path: Path) -> Any:
    return json.loads(path.read_bytes())


# --- JSON with what json.dumps cannot write ------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A JSON token written as is: ``1e400``, ``[[[[...``, ``"\\ud800"``, ``NaN``."""

    text: str


@dataclass(frozen=True)
class Dup:
    """An object whose keys may repeat (the last wins in Go and msgspec)."""

    pairs: tuple[tuple[str, Any], ...]


def encode(value: Any) -> bytes:
    """``value`` as JSON bytes; a lone surrogate in a string becomes invalid UTF-8."""
    return _text(value).encode("utf-8", "surrogatepass")


def _text(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Dup | dict):
        pairs = value.pairs if isinstance(value, Dup) else value.items()
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_text(v)}"
                              for k, v in pairs) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _deep(depth: int, kind: str) -> Raw:
    if kind == "list":
        return Raw("[" * depth + "]" * depth)
    return Raw('{"a":' * depth + "1" + "}" * depth)


# Values of the wrong type, size or encoding, put in place of any value of a document.
poison: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**64, -(2**63) - 1, 2**70, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("1" + "0" * 400), Raw("1e-400"),
                     Raw("NaN"), Raw("Infinity"), Raw("-0"), Raw("0x10"), Raw("01"),
                     Raw('"\\ud800"'), Raw('"\\u0000"'), Raw('"\\x"'), Raw("tru")]),
    st.text(max_size=12),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),  # lone surrogates
    st.text(st.characters(min_codepoint=0x80), min_size=1, max_size=6),
    st.sampled_from(["", "x" * 100_000, "1Gi", "-1", "1e3", "nan", "2026-13-45T99:00:00Z",
                     "nvidia.com/gpu", "ray.io/cluster", "🚀" * 1000]),
    st.sampled_from([_deep(64, "list"), _deep(200, "object")]),
    st.lists(st.integers() | st.text(max_size=4) | st.none(), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers() | st.none(), max_size=3),
)


# Nesting deeper than Python's recursion limit (~1000) anywhere in a body, even under a key
# raygate skips, makes msgspec raise RecursionError: a bad request like any other
# (extender.wire.DECODE_ERRORS).
DEEP = [_deep(1000, "list"), _deep(100_000, "list"), _deep(20_000, "object")]
poison = st.one_of(poison, st.sampled_from(DEEP))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in ``value``, the root first."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _mutate(draw: st.DrawFn, doc: Any) -> Any:
    """One mutation of ``doc`` at a random path (in place where it can be)."""
    paths = list(_paths(doc))
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "duplicate",
                               "recase", "wrap"]))
    if not path:  # the root itself
        return draw(poison) if op != "wrap" else [doc]
    parent, key = _get(doc, path[:-1]), path[-1]
    if op == "delete":
        del parent[key]
    elif op == "wrap":
        parent[key] = draw(st.sampled_from([[parent[key]], {"items": parent[key]}]))
    elif op == "duplicate" and isinstance(parent, dict):
        # The same key twice: first the poison, then the original, or the other way.
        pairs = [(k, v) for k, v in parent.items()]
        extra = (key, draw(poison))
        pairs.insert(draw(st.integers(0, len(pairs))), extra)
        if len(path) == 1:
            return Dup(tuple(pairs))
        _get(doc, path[:-2])[path[-2]] = Dup(tuple(pairs))
    elif op == "recase" and isinstance(parent, dict) and isinstance(key, str):
        parent[draw(st.sampled_from([key.lower(), key.upper(), key.swapcase()]))] = (
            parent.pop(key))
    else:
        parent[key] = draw(poison)
    return doc


@st.composite
def mutated(draw: st.DrawFn, seeds: list[Any]) -> bytes:
    """A seed document, mutated one to three times, then maybe damaged as bytes."""
    doc: Any = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        if isinstance(doc, Dup | Raw):
            break  # a rewritten root: no paths left to walk
        doc = _mutate(draw, doc)
    data = encode(doc)
    damage = draw(st.sampled_from(["none", "none", "none", "truncate", "splice", "prefix"]))
    if damage == "truncate":
        data = data[:draw(st.integers(0, max(0, len(data) - 1)))]
    elif damage == "splice":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    elif damage == "prefix":
        data = draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b" \n\t"])) + data
    return data


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)


def bodies(seeds: list[Any]) -> st.SearchStrategy[bytes]:
    """Mostly mutated seeds; sometimes any JSON value or any bytes at all."""
    return st.one_of(
        mutated(seeds), mutated(seeds), mutated(seeds), mutated(seeds),
        json_values.map(encode),
        st.binary(max_size=64),
    )


# --- what each protocol allows --------------------------------------------------------------


def _error_body(status: int, body: Any) -> None:
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
        return _error_body(status, body)
    for entry in body:  # HostPriorityList; scores 0..10 (MaxExtenderPriority)
        assert set(entry) == {"Host", "Score"} and 0 <= entry["Score"] <= 10
    return None


def _preempt(status: int, body: Any) -> None:
    if status != 200:
        return _error_body(status, body)
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


def _explain(status: int, body: Any) -> None:
    if status != 200:
        return _error_body(status, body)
    assert body["kind"] == "Explanation" and isinstance(body["nodes"], list)
    return None


def _admission(status: int, body: Any) -> None:
    if status != 200:
        return _error_body(status, body)
    assert body["apiVersion"] == "raygate.io/v1"
    return None


def _webhook(status: int, body: Any) -> None:
    if status != 200:
        return _error_body(status, body)
    assert body["kind"] == "AdmissionReview" and body["response"]["allowed"] is True
    return None


@dataclass(frozen=True)
class RouteContract:
    method: str
    statuses: frozenset[int]
    shape: Callable[[int, Any], None]
    content_type: str = "application/json"


def _contract(method: str, statuses: set[int], shape: Callable[[int, Any], None],
              content_type: str = "application/json") -> RouteContract:
    return RouteContract(method, frozenset(statuses), shape, content_type)


PEER_OK = {200}  # the schedulers read no body that comes with another status
ROUTES: dict[str, RouteContract] = {
    "/scheduler/filter": _contract("POST", PEER_OK, _filter),
    "/scheduler/prioritize": _contract("POST", {200, 400}, _prioritize),
    "/scheduler/preempt": _contract("POST", {200, 400}, _preempt),
    "/volcano/predicate": _contract("POST", PEER_OK, _predicate),
    "/volcano/prioritize": _contract("POST", PEER_OK, _volcano_prioritize),
    "/volcano/preemptable": _contract("POST", PEER_OK, _victims),
    "/volcano/reclaimable": _contract("POST", PEER_OK, _victims),
    "/volcano/jobEnqueueable": _contract("POST", PEER_OK, _vote),
    "/volcano/onSessionOpen": _contract("POST", PEER_OK, _session),
    "/volcano/onSessionClose": _contract("POST", PEER_OK, _session),
    "/v1/explain": _contract("POST", {200, 400}, _explain),
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
            _error_body(status, reply.json())
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


# --- the server and what must keep working --------------------------------------------------


@dataclass(frozen=True)
class Golden:
    method: str
    path: str
    request: bytes
    reply: bytes


GOLDEN = [
    Golden("POST", "/scheduler/filter", (SCHEDULER / "filter-names-floor.request.json")
           .read_bytes(), (SCHEDULER / "filter-names-floor.filter.reply.json").read_bytes()),
    Golden("POST", "/scheduler/preempt", (SCHEDULER / "preempt-meta.request.json")
           .read_bytes(), (SCHEDULER / "preempt-meta.preempt.reply.json").read_bytes()),
    Golden("POST", "/volcano/predicate", (VOLCANO / "predicate-floor-gpu.request.json")
           .read_bytes(), (VOLCANO / "predicate-floor-gpu.reply.json").read_bytes()),
]
ADMISSION_DEMO = "/v1/namespaces/ray/rayclusters/demo/admission"


@pytest.fixture(scope="module")
def http(demo_server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=demo_server.url, timeout=30) as client:
        yield client


def internal_errors(client: httpx.Client) -> float:
    """Requests answered as a server bug so far: also those a peer's protocol answers with
    200 (filter's ``Error``, a Volcano abstain), where the status alone cannot tell."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in client.get("/metrics").text.splitlines()
               if line.startswith("raygate_request_errors_total{")
               and 'reason="InternalError"' in line)


@pytest.fixture(scope="module")
def still_serving(http: httpx.Client) -> Callable[[], None]:
    """Asserts the golden requests still get their golden replies, and the demo cluster's
    admission status its first version."""
    version = http.get(ADMISSION_DEMO).headers["etag"]

    def check() -> None:
        assert internal_errors(http) == 0, "a request was answered as a server bug"
        for golden in GOLDEN:
            reply = http.request(golden.method, golden.path, content=golden.request)
            assert (reply.status_code, reply.content) == (200, golden.reply), golden.path
        reply = http.get(ADMISSION_DEMO)
        assert (reply.status_code, reply.headers["etag"]) == (200, version)

    check()
    return check


SEEDS: dict[str, list[Any]] = {
    "/scheduler/filter": [_load(SCHEDULER / f"{c}.request.json") for c in (
        "filter-names-floor", "filter-names-overflow", "filter-nodelist-floor")],
    "/scheduler/preempt": [_load(SCHEDULER / f"{c}.request.json") for c in (
        "preempt-full", "preempt-meta")],
    "/volcano/predicate": [_load(VOLCANO / f"{c}.request.json") for c in (
        "predicate-floor-cpu", "predicate-floor-gpu")],
    "/volcano/prioritize": [_load(VOLCANO / "prioritize-overflow.request.json")],
    "/volcano/preemptable": [_load(VOLCANO / "preemptable-trainer.request.json")],
    "/volcano/jobEnqueueable": [_load(VOLCANO / "jobEnqueueable-queued.request.json")],
    "/v1/explain": [
        {"pod": make_pod("w-new").ray("demo", "workers").requests(cpu="4").obj()},
        {"pod": make_pod("o-new", "ray").ray("demo", "overflow").requests(cpu="1").obj(),
         "nodeNames": ["cpu-node-1", "gpu-node-1", "nowhere"]},
    ],
}
SEEDS["/scheduler/prioritize"] = SEEDS["/scheduler/filter"]
SEEDS["/volcano/reclaimable"] = SEEDS["/volcano/preemptable"]
SEEDS["/volcano/onSessionOpen"] = SEEDS["/volcano/onSessionClose"] = [
    {"jobs": {}, "nodes": {}, "queues": {}, "namespaceInfo": {}}]

HYPOTHESIS = settings(max_examples=35, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow,
                                             HealthCheck.data_too_large,
                                             HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_generated_bodies(path: str, http: httpx.Client,
                          still_serving: Callable[[], None]) -> None:
    contract = ROUTES[path]

    @HYPOTHESIS
    @given(body=bodies(SEEDS[path]))
    def attack(body: bytes) -> None:
        reply = http.post(path, content=body, headers={"Content-Type": "application/json"})
        check_reply(reply, contract, "POST", body)
        still_serving()

    attack()


METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
GET_ROUTES: dict[str, RouteContract] = {
    "/healthz": _contract("GET", {200}, lambda s, b: None),
    "/readyz": _contract("GET", {200}, lambda s, b: None),
    "/metrics": _contract("GET", {200}, lambda s, b: None, "text/plain"),
    "/openapi.json": _contract("GET", {200}, lambda s, b: None),
}


@HYPOTHESIS
@given(path=st.sampled_from(sorted({**ROUTES, **GET_ROUTES})), method=st.sampled_from(METHODS),
       body=st.binary(max_size=32), query=st.text(max_size=20))
def test_any_method_on_any_route(path: str, method: str, body: bytes, query: str, *,
                                 http: httpx.Client,
                                 still_serving: Callable[[], None]) -> None:
    contract = {**ROUTES, **GET_ROUTES}[path]
    reply = http.request(method, path, content=body, params={"q": query} if query else None)
    if method != contract.method and not (method == "HEAD" and contract.method == "GET"):
        check_reply(reply, contract, method)
    else:
        assert reply.status_code < 500
    still_serving()


# --- raygate's own API: path parameters, query strings, headers ------------------------------

# Not `.` or `..`: the client resolves dot segments (RFC 3986 §5.2.4) before sending, so
# the server would see another path.
segment = st.one_of(
    st.sampled_from(["ray", "demo", "default", "kube-system", "demo-head-x7k2p",
                     "demo-overflow-worker-ccccc", "...", "%", "a" * 300]),
    st.text(min_size=1, max_size=20),
).filter(lambda s: s not in (".", ".."))
SHORT_WAITS = ["0", "0.01", "0.05", "1e-3", "0e0"]
query_values = st.one_of(
    st.text(max_size=16),
    st.sampled_from(["-1", "nan", "NaN", "inf", "-inf", "1e400", "301", "300.0001", "0x10",
                     "", " 1", "1_0", "\u0661", "⁵"]),
    st.sampled_from(SHORT_WAITS),
)


@st.composite
def queries(draw: st.DrawFn) -> str:
    """A query string; a long-poll (waitForChange) always with a short timeout first,
    since the first value of a repeated parameter is the one read."""
    keys = st.sampled_from(["waitForChange", "timeoutSeconds", "namespace", "nodes"]) | st.text(
        max_size=8)
    pairs = draw(st.lists(st.tuples(keys, query_values), max_size=5))
    if any(k == "waitForChange" for k, _ in pairs):
        pairs.insert(0, ("timeoutSeconds", draw(st.sampled_from(SHORT_WAITS))))
    encoded = urlencode(pairs)
    if draw(st.booleans()):  # malformed escapes and bare separators
        encoded += draw(st.sampled_from(["&%zz=1", "&%ff%fe", "&&&", "&=", "&a=%", "#frag"]))
    return encoded


@HYPOTHESIS
@given(kind=st.sampled_from(["admission", "explain", "list"]), namespace=segment, name=segment,
       query=queries(), etag=st.none() | st.text(st.characters(min_codepoint=0x20,
                                                             max_codepoint=0x7e), max_size=30)
       .map(str.strip))  # surrounding blanks are no header value (RFC 9110 §5.5)
def test_own_api_with_generated_paths_and_queries(
    kind: str, namespace: str, name: str, query: str, etag: str | None, *, http: httpx.Client,
    still_serving: Callable[[], None],
) -> None:
    ns, nm = quote(namespace, safe=""), quote(name, safe="")
    path = {"admission": f"/v1/namespaces/{ns}/rayclusters/{nm}/admission",
            "explain": f"/v1/namespaces/{ns}/pods/{nm}/explain",
            "list": "/v1/admission"}[kind]
    headers = {"If-None-Match": etag} if etag is not None else {}
    reply = http.get(f"{path}?{query}", headers=headers)
    # 404: an unknown cluster or pod, or a path no route matches (an encoded `/` in a
    # segment); 400: a bad timeoutSeconds; 304: the ETag matched.
    allowed = {"admission": {200, 304, 400, 404}, "explain": {200, 404},
               "list": {200, 304, 400}}[kind]
    status = reply.status_code
    assert status in allowed, (status, reply.text[:300])
    if status != 304:
        assert reply.headers["content-type"] == "application/json"
        (_explain if kind == "explain" else _admission)(status, reply.json())
    still_serving()


@HYPOTHESIS
@given(prefix=st.sampled_from(["/", "/scheduler/", "/volcano/", "/v1/", "/v1/namespaces/",
                               "/mutate/", "/healthz/", "/metrics/"]),
       rest=st.text(min_size=1, max_size=30), method=st.sampled_from(METHODS))
def test_unknown_paths_are_404(prefix: str, rest: str, method: str, http: httpx.Client,
                               still_serving: Callable[[], None]) -> None:
    path = prefix + quote(rest, safe="/")
    reply = http.request(method, path)
    if reply.status_code != 404:
        # The generated path may name a real route after all (`/healthz/` + `..` is
        # `/`...): then it must at least be no server error.
        assert reply.status_code < 500
        return
    if method != "HEAD":
        _error_body(404, reply.json())
    still_serving()


# --- the HTTP layer itself: bytes that are not a proper request ------------------------------

RAW_REQUESTS = [
    ("garbage", b"GARBAGE\r\n\r\n"),
    ("TLS hello on plain HTTP", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 32),
    ("unknown version", b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n"),
    ("NUL in the path", b"GET /heal\x00thz HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("bad chunk size", b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
    ("negative length", b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Length: -5\r\n\r\n"),
    ("two lengths", b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                    b"Content-Length: 7\r\n\r\n{}"),
    ("length and chunked", b"POST /scheduler/prioritize HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"2\r\n{}\r\n0\r\n\r\n"),
    ("header without colon", b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n"),
    ("body shorter than its length", b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: 100\r\n\r\n{}"),
    ("a 60 KB header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 60_000
                       + b"\r\n\r\n"),
]


@pytest.mark.parametrize("raw", [r[1] for r in RAW_REQUESTS], ids=[r[0] for r in RAW_REQUESTS])
def test_malformed_http(raw: bytes, demo_server: ServerThread,
                        still_serving: Callable[[], None]) -> None:
    port = int(demo_server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)  # the request ends here: no wait for more
        reply = b""
        with contextlib.suppress(TimeoutError):
            while chunk := sock.recv(65536):
                reply += chunk
    # Either a reply that is no server error, or the connection closed without one (a
    # request cut short: nobody to answer).
    if reply:
        status_line = reply.split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/1.1 "), status_line
        assert not status_line[9:].startswith(b"5"), status_line
    still_serving()


# --- the admission webhook, on its own HTTPS listener ----------------------------------------


def review(pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "namespace": pod["metadata"]["namespace"], "operation": "CREATE",
                        "object": pod, "oldObject": None, "dryRun": False}}


GOOD_REVIEW = review(make_pod("w").ray("rc", "g").obj())
# The builder's pod has no gates: the webhook adds raygate's (the marker is off by default).
GOOD_PATCH = [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "tls.crt", folder / "tls.key"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    listener = WebhookListener(bind_socket("127.0.0.1", 0), str(cert_file), str(key_file))
    config = PolicyConfig()
    cache = ClusterCache(config, "demo")
    cache.publish(build_snapshot(load_text(demo_text(), "demo"), config))
    thread = ServerThread(cache, FakeClock(T0_EPOCH), webhook=listener)
    thread.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    url = f"https://127.0.0.1:{listener.sock.getsockname()[1]}"
    with httpx.Client(base_url=url, verify=context, timeout=30) as client:
        for _ in range(500):
            with contextlib.suppress(httpx.TransportError):
                client.get("/healthz")
                break
            threading_wait(0.01)
        yield client
    thread.stop()


def threading_wait(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)


def _webhook_still_serving(client: httpx.Client) -> None:
    reply = client.post("/mutate/ray-pods", content=json.dumps(GOOD_REVIEW))
    assert reply.status_code == 200
    response = reply.json()["response"]
    assert json.loads(base64.b64decode(response["patch"])) == GOOD_PATCH


@HYPOTHESIS
@given(body=bodies([GOOD_REVIEW, review(make_pod("h").head("rc").requests(cpu="1").obj())]))
def test_generated_admission_reviews(body: bytes, webhook: httpx.Client) -> None:
    reply = webhook.post("/mutate/ray-pods", content=body)
    # An error is a 400: the API server applies the webhook's failurePolicy.
    check_reply(reply, _contract("POST", {200, 400}, _webhook), "POST")
    _webhook_still_serving(webhook)


# --- deep nesting, under a key raygate skips --------------------------------------------------

DECODING_ROUTES = sorted(p for p in ROUTES if "Session" not in p)  # sessions skip the body


@pytest.fixture(scope="module")
def deep_server() -> Iterator[ServerThread]:
    """A server of its own: a regression would leave internal errors in the metrics that
    the other tests of this module check are zero."""
    thread = start_demo_server()
    yield thread
    thread.stop()


DEEP_CASES = [*((p, DEEP[1]) for p in DECODING_ROUTES),
              ("/scheduler/filter", DEEP[0]), ("/scheduler/prioritize", DEEP[2])]


@pytest.mark.parametrize(("path", "deep"), DEEP_CASES)
def test_deep_nesting_is_bad_input(path: str, deep: Raw, deep_server: ServerThread) -> None:
    seed = SEEDS[path][0]
    body = encode(Dup((*seed.items(), ("zzUnknownKey", deep))))
    with httpx.Client(base_url=deep_server.url, timeout=30) as client:
        before = internal_errors(client)
        reply = client.post(path, content=body)
        check_reply(reply, ROUTES[path], "POST")
        assert internal_errors(client) == before


def test_deep_nesting_in_an_admission_review(webhook: httpx.Client) -> None:
    reply = webhook.post("/mutate/ray-pods", content=encode(Dup((
        *GOOD_REVIEW.items(), ("zzUnknownKey", DEEP[1])))))
    assert reply.status_code == 400
