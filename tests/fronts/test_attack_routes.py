"""Every HTTP route raygate serves, attacked with generated requests (``attack_bodies``)
plus random methods, path parameters, query strings and headers, and bytes that are no
proper HTTP request.

Invariants, per request: the server answers (no connection reset, no 5xx), with a status
the route's protocol allows and a body in that protocol's shape (``route_contracts``); and
after each example the golden requests still get their golden replies byte for byte
(nothing was corrupted). One demo server per module; Hypothesis example counts are sized
so the file runs in well under a minute on two busy cores.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ServerThread, start_demo_server
from tests.fronts.attack_bodies import DEEP, SCHEDULER, SEEDS, VOLCANO, Dup, Raw, bodies, encode
from tests.fronts.route_contracts import (
    HYPOTHESIS,
    ROUTES,
    RouteContract,
    admission_shape,
    check_reply,
    error_body,
    explain_shape,
    route_contract,
)


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
    "/healthz": route_contract("GET", {200}, lambda s, b: None),
    "/readyz": route_contract("GET", {200}, lambda s, b: None),
    "/metrics": route_contract("GET", {200}, lambda s, b: None, "text/plain"),
    "/openapi.json": route_contract("GET", {200}, lambda s, b: None),
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
        (explain_shape if kind == "explain" else admission_shape)(status, reply.json())
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
        error_body(404, reply.json())
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
