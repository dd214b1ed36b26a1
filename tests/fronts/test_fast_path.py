"""The protocol's fast path (raygate/server/http/fast_path.py) against the ASGI path it bypasses.

Requests go over raw sockets to the real server, and replies are parsed with h11. A
request sent with chunked framing always takes the ASGI path, so each case compares
the fast path's reply with the ASGI path's for the same request. ``asgi_calls`` counts
the requests the ASGI app saw, so each case also checks which path answered.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h11
import pytest

from raygate.server.http.app import HttpApp
from raygate.server.http.fast_path import FastPathProtocol
from tests.conftest import ServerThread, start_demo_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
FLOOR = (FIXTURES / "filter-names-floor.request.json").read_bytes()


@dataclass
class Reply:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


class Calls:
    count = 0


@pytest.fixture(scope="module")
def asgi_calls() -> Iterator[type[Calls]]:
    original = HttpApp.__call__

    async def counting(self: HttpApp, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            Calls.count += 1
        await original(self, scope, receive, send)

    HttpApp.__call__ = counting  # type: ignore[method-assign]
    yield Calls
    HttpApp.__call__ = original  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def server(asgi_calls: type[Calls]) -> Iterator[ServerThread]:
    thread = start_demo_server()
    yield thread
    thread.stop()


def connect(server: ServerThread) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10)


def request(method: str, path: str, body: bytes | None = None, *, chunked: bool = False,
            headers: tuple[tuple[str, str], ...] = (), version: str = "1.1") -> bytes:
    head = [f"{method} {path} HTTP/{version}", "Host: raygate"]
    head += [f"{name}: {value}" for name, value in headers]
    if body is None:
        return ("\r\n".join(head) + "\r\n\r\n").encode()
    if chunked:
        head.append("Transfer-Encoding: chunked")
        payload = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 997]), body[i:i + 997])
                           for i in range(0, len(body), 997)) + b"0\r\n\r\n"
    else:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        payload = body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def replies(sock: socket.socket, count: int, method: str = "POST") -> list[Reply]:
    """``count`` replies read from ``sock`` (h11 as the client's parser)."""
    conn = h11.Connection(h11.CLIENT)
    out: list[Reply] = []
    while len(out) < count:
        # h11 tracks one request at a time: tell it about each as its reply is read.
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
        conn.send(h11.EndOfMessage())
        status, headers, body = 0, {}, b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(1 << 16)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status, headers = event.status_code, dict(event.headers)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise AssertionError(f"closed after {len(out)} of {count} replies")
        out.append(Reply(status, headers, body))
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
            break
        conn.start_next_cycle()
    return out


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def one(server: ServerThread, raw: bytes, method: str = "POST") -> Reply:
    with connect(server) as sock:
        sock.sendall(raw)
        return replies(sock, 1, method)[0]


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    fast: bool = True
    """Served by the fast path."""


CASES = [
    Case("healthz", "GET", "/healthz"),
    Case("readyz", "GET", "/readyz"),
    Case("filter", "POST", "/scheduler/filter", FLOOR),
    Case("prioritize", "POST", "/scheduler/prioritize", FLOOR),
    Case("bad json", "POST", "/scheduler/filter", b"{not json"),
    Case("empty body", "POST", "/scheduler/prioritize", b""),
    Case("wrong method", "GET", "/scheduler/filter", fast=False),
    Case("unknown path", "GET", "/nowhere", fast=False),
    Case("query string", "GET", "/healthz?verbose=1", fast=False),
    Case("expect continue", "POST", "/scheduler/filter", FLOOR,
         (("Expect", "100-continue"),), fast=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_fast_path_answers_as_the_asgi_path_does(
    server: ServerThread, asgi_calls: type[Calls], case: Case,
) -> None:
    before = asgi_calls.count
    got = one(server, request(case.method, case.path, case.body, headers=case.headers),
              case.method)
    assert asgi_calls.count - before == (0 if case.fast else 1), "served by the wrong path"
    if case.method == "POST":  # the same request, chunked: the ASGI path's answer
        want = one(server, request(case.method, case.path, case.body or b"", chunked=True,
                                   headers=case.headers))
        assert (got.status, got.body) == (want.status, want.body)
        assert got.headers[b"content-type"] == want.headers[b"content-type"]
    assert int(got.headers[b"content-length"]) == len(got.body)
    assert {b"date", b"server"} <= got.headers.keys()


def test_the_golden_filter_reply_comes_from_the_fast_path(
    server: ServerThread, asgi_calls: type[Calls],
) -> None:
    before = asgi_calls.count
    got = one(server, request("POST", "/scheduler/filter", FLOOR))
    assert asgi_calls.count == before
    assert got.body == (FIXTURES / "filter-names-floor.filter.reply.json").read_bytes()


def test_a_body_over_the_limit_is_refused_by_the_asgi_path_unread(
    server: ServerThread, asgi_calls: type[Calls],
) -> None:
    limit = server.server.settings.max_body_bytes
    huge = request("POST", "/scheduler/filter", b"").replace(
        b"Content-Length: 0", b"Content-Length: %d" % (limit + 1))
    before = asgi_calls.count
    with connect(server) as sock:
        sock.sendall(huge)
        got = replies(sock, 1)[0]
    assert asgi_calls.count - before == 1
    # kube-scheduler's filter protocol: the error in the reply's Error field.
    assert json.loads(got.body)["Error"] == (
        f"raygate: body of {limit + 1} bytes exceeds the limit of {limit}")


def test_pipelined_requests_are_answered_in_order_on_both_paths(
    server: ServerThread, asgi_calls: type[Calls],
) -> None:
    before = asgi_calls.count
    batch = (request("POST", "/scheduler/filter", FLOOR)
             + request("POST", "/scheduler/prioritize", FLOOR, chunked=True)  # ASGI
             + request("GET", "/healthz")
             + request("POST", "/scheduler/prioritize", FLOOR))
    with connect(server) as sock:
        sock.sendall(batch)
        got = replies(sock, 4)
    # Behind the ASGI request, the next ones queue on uvicorn's pipeline (ASGI as well)
    # unless it was answered before they arrived.
    assert 1 <= asgi_calls.count - before <= 3
    filter_reply = (FIXTURES / "filter-names-floor.filter.reply.json").read_bytes()
    prioritize_reply = (FIXTURES / "filter-names-floor.prioritize.reply.json").read_bytes()
    assert [r.body for r in got] == [filter_reply, prioritize_reply, b'{"status":"ok"}',
                                     prioritize_reply]


def test_a_body_arriving_in_pieces_is_answered_once_whole(server: ServerThread) -> None:
    raw = request("POST", "/scheduler/filter", FLOOR)
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(raw), 113):
            sock.sendall(raw[i:i + 113])
        got = replies(sock, 1)[0]
    assert got.body == (FIXTURES / "filter-names-floor.filter.reply.json").read_bytes()


@pytest.mark.parametrize(("headers", "version"), [
    ((("Connection", "close"),), "1.1"),
    ((), "1.0"),
])
def test_the_connection_closes_after_the_reply_when_the_client_asks(
    server: ServerThread, headers: tuple[tuple[str, str], ...], version: str,
) -> None:
    with connect(server) as sock:
        sock.sendall(request("GET", "/healthz", headers=headers, version=version))
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nconnection: close\r\n" in data
    assert data.endswith(b'{"status":"ok"}')


def test_the_connection_stays_open_between_requests(server: ServerThread) -> None:
    with connect(server) as sock:
        for _ in range(3):
            sock.sendall(request("GET", "/healthz"))
            assert replies(sock, 1, "GET")[0].status == 200


def test_shutdown_answers_a_request_still_arriving_then_closes() -> None:
    server = start_demo_server()
    try:
        raw = request("POST", "/scheduler/filter", FLOOR)
        with connect(server) as idle, connect(server) as busy:
            idle.sendall(request("GET", "/healthz"))
            assert replies(idle, 1, "GET")[0].status == 200
            busy.sendall(raw[:len(raw) // 2])
            server.loop.call_soon_threadsafe(server.server.stop)
            assert closed(idle)  # idle keep-alive connections are closed at once
            busy.sendall(raw[len(raw) // 2:])
            data = b""
            while chunk := busy.recv(1 << 16):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"\r\nconnection: close\r\n" in data
        assert data.endswith((FIXTURES / "filter-names-floor.filter.reply.json").read_bytes())
    finally:
        server.thread.join(15)


def test_a_client_that_does_not_read_its_replies_is_not_read_either(
    server: ServerThread,
) -> None:
    # Pipelined requests whose replies pile up unread: the server stops reading once its
    # write buffer is full, instead of buffering replies without bound, and reads again
    # once the client reads. Names the cache does not know pass filter, so each ~90 KB
    # request gets a ~90 KB reply.
    names = [f"unknown-node-{i:05d}.example.internal" for i in range(2000)]
    body = json.dumps({"Pod": json.loads(FLOOR)["Pod"], "Nodes": None,
                       "NodeNames": names}).encode()
    raw = request("POST", "/scheduler/filter", body)
    count = 400  # 36 MB each way: more than the kernel buffers of both ends hold
    with connect(server) as sock:
        sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 2
        while sent < count * len(raw) and time.monotonic() < deadline:
            try:
                sent += sock.send(raw[sent % len(raw):])
            except BlockingIOError:
                time.sleep(0.001)  # the server is busy, or has stopped reading
        buffered = max(c.transport.get_write_buffer_size()
                       for c in list(server.server._http.server_state.connections))
        assert buffered < 1 << 20, f"{buffered} bytes of replies buffered for one client"
        sock.settimeout(30)
        whole, part = divmod(sent, len(raw))
        assert all(r.status == 200 for r in replies(sock, whole))
        if part:
            sock.sendall(raw[part:])
            assert replies(sock, 1)[0].body.count(b"unknown-node-") == len(names)


# --- found by review: the keep-alive timer, idle bodies, a closing connection -------------


@pytest.fixture
def short_keep_alive() -> Iterator[ServerThread]:
    """A server whose idle keep-alive timeout is 1 s (uvicorn reads it per connection)."""
    thread = start_demo_server()
    thread.server._http.config.timeout_keep_alive = 1
    yield thread
    thread.stop()


def test_a_fast_reply_does_not_time_out_the_request_behind_it(
    short_keep_alive: ServerThread,
) -> None:
    # healthz (fast) and a 2 s long-poll (ASGI) in one read: the idle timeout armed after
    # the first reply must not cut the long-poll.
    with connect(short_keep_alive) as sock:
        sock.sendall(request("GET", "/v1/admission"))
        version = replies(sock, 1, "GET")[0].headers[b"etag"].decode().strip('"')
        sock.sendall(request("GET", "/healthz") + request(
            "GET", f"/v1/admission?waitForChange={version}&timeoutSeconds=2"))
        got = replies(sock, 2, "GET")
    assert [r.status for r in got] == [200, 200]


def test_a_client_slow_to_read_is_not_timed_out_as_idle(short_keep_alive: ServerThread) -> None:
    # 400 pipelined requests (one read) whose ~9 MB of replies outgrow the socket buffers:
    # the server stops reading and waits. Not reading for longer than the idle timeout
    # leaves the connection paused, not idle: once the client reads, it stays usable.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)  # no autotuning
    sock.settimeout(10)
    with sock:
        sock.connect(("127.0.0.1", short_keep_alive.server.http_port))
        count = 400
        sock.sendall(request("GET", "/openapi.json") * count)
        time.sleep(2.5)
        assert all(r.status == 200 for r in replies(sock, count, "GET"))
        sock.sendall(request("GET", "/healthz"))
        assert replies(sock, 1, "GET")[0].body == b'{"status":"ok"}'


def test_an_idle_connection_keeps_no_request_body(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(request("POST", "/scheduler/filter", FLOOR))
        replies(sock, 1)
        held = [c for c in list(server.server._http.server_state.connections)
                if isinstance(c, FastPathProtocol) and getattr(c, "_chunks", None)]
    assert held == []


def test_requests_behind_the_last_one_before_shutdown_are_not_run() -> None:
    server = start_demo_server()
    metrics = server.server.metrics
    try:
        raw = request("POST", "/scheduler/filter", FLOOR)
        with connect(server) as sock:
            sock.sendall(raw[:len(raw) // 2])
            server.loop.call_soon_threadsafe(server.server.stop)
            time.sleep(0.3)
            sock.sendall(raw[len(raw) // 2:] + request("POST", "/scheduler/prioritize", FLOOR)
                         + request("GET", "/healthz?x=1"))
            data = b""
            while chunk := sock.recv(1 << 16):
                data += chunk
        assert data.count(b"HTTP/1.1 ") == 1
    finally:
        server.thread.join(15)
    exposition = metrics.exposition(b"").decode().splitlines()
    assert 'raygate_requests_total{code="200",route="/scheduler/filter"} 1.0' in exposition
    assert 'raygate_requests_total{code="200",route="/scheduler/prioritize"} 0.0' in exposition


def test_a_connection_answered_before_its_body_ended_still_times_out_when_idle(
    short_keep_alive: ServerThread,
) -> None:
    # POST to a GET route: 405 at once; the body's rest arrives after the reply, and then
    # the connection is idle and must close after the idle timeout (uvicorn alone would
    # keep it for ever).
    head = (b"POST /healthz HTTP/1.1\r\nHost: raygate\r\nContent-Length: 2000\r\n\r\n")
    with connect(short_keep_alive) as sock:
        sock.sendall(head + b"x" * 1000)
        (reply,) = replies(sock, 1)
        assert (reply.status, reply.headers[b"allow"]) == (405, b"GET, HEAD")
        sock.sendall(b"x" * 1000)
        sock.settimeout(5)
        assert closed(sock)


def test_uvicorn_is_the_version_the_fast_path_was_written_for() -> None:
    """The fast path and the request deadline live inside uvicorn's httptools protocol
    (its private attributes included): a new uvicorn is a reviewed change of the pin."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    (pin,) = [d for d in project["optional-dependencies"]["server"] if d.startswith("uvicorn")]
    assert pin == f"uvicorn=={version('uvicorn')}"
