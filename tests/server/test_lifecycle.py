"""Shutdown, request deadlines and the predicate bound, against real servers: an
in-process server for what needs a look inside, and ``raygate serve --demo`` as a real
process for SIGTERM and the exit status."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.config.settings import ServeSettings
from testkit.builders import make_node, make_pod, make_raycluster
from testkit.volcano_objects import node_info, task_info
from tests.conftest import FakeClock, ServerThread, snapshot_of, wait_until

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]

CPU = make_node("cpu-1").obj()
GPU = make_node("gpu-1").gpus(8).obj()
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=1, min=1, max=1).obj()
FLOOR_POD = make_pod("b1").ray("rc", "base").requests(cpu="1").obj()
FILTER = json.dumps({"Pod": FLOOR_POD, "Nodes": None, "NodeNames": ["cpu-1", "gpu-1"]}).encode()
PREDICATE = json.dumps({"task": task_info(FLOOR_POD), "node": node_info(GPU)}).encode()


class Upload:
    """A POST whose body the test sends in two halves, holding the request in flight."""

    def __init__(self, port: int, path: str, body: bytes) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=15)
        self.body = body
        self.half = len(body) // 2
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: raygate\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:self.half])

    def finish(self) -> tuple[http.client.HTTPResponse, bytes]:
        """The rest of the body; the reply and its body."""
        self.sock.sendall(self.body[self.half:])
        response = http.client.HTTPResponse(self.sock, method="POST")
        response.begin()
        return response, response.read()

    def close(self) -> None:
        self.sock.close()


def closed_after(sock: socket.socket) -> float:
    """Seconds until the server closes ``sock`` (whatever it sends before)."""
    started = time.monotonic()
    sock.settimeout(15)
    while sock.recv(4096):
        continue
    return time.monotonic() - started


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=5).close()
    except (ConnectionRefusedError, ConnectionResetError):
        # A connection the kernel queued just before the listener closed is reset, not
        # refused (seen once in CI): the listener is closing all the same.
        return True
    return False


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def server_with(**settings: Any) -> ServerThread:
    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(CPU, GPU, CLUSTER))
    thread = ServerThread(cache, FakeClock(), settings=ServeSettings(**settings))
    thread.start()
    return thread


class LongPoll(threading.Thread):
    """``GET /v1/admission?waitForChange=...``: waits until the listing changes or the
    server ends it."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        version = httpx.get(f"{url}/v1/admission", timeout=10).headers["etag"].strip('"')
        self.url = f"{url}/v1/admission?waitForChange={version}&timeoutSeconds=300"
        self.status: int | None = None
        self.start()

    def run(self) -> None:
        self.status = httpx.get(self.url, timeout=60).status_code


# --- stop: not ready first, then drain ---------------------------------------------------


def test_stop_reports_not_ready_then_closes_and_lets_in_flight_requests_finish() -> None:
    thread = server_with(shutdown_delay_seconds=3.0, shutdown_grace_seconds=30.0,
                         header_timeout_seconds=60.0)
    port = thread.server.http_port
    assert httpx.get(f"{thread.url}/readyz", timeout=10).status_code == 200
    upload = Upload(port, "/scheduler/filter", FILTER)
    poll = LongPoll(thread.url)
    try:
        thread.loop.call_soon_threadsafe(thread.server.stop)

        def not_ready() -> bool:
            reply = httpx.get(f"{thread.url}/readyz", timeout=10)
            return reply.status_code == 503 and reply.json()["status"] == "shutting-down"

        # Within the delay: new connections are still served, readiness is off.
        wait_until(not_ready, "/readyz to answer 503 shutting-down")
        with grpc.insecure_channel(thread.grpc_target) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert httpx.get(f"{thread.url}/healthz", timeout=10).status_code == 200
        assert poll.is_alive()  # long-polls go on during the delay
        # Then the listener closes; the long-poll is answered with what it has.
        wait_until(lambda: refuses_connections(port), "the listener to close")
        poll.join(15)
        assert poll.status == 200
        # The upload that was in flight is still answered, and the connection closed.
        reply, body = upload.finish()
        assert reply.status == 200 and reply.getheader("connection") == "close"
        assert json.loads(body)["NodeNames"] == ["cpu-1"]
        thread.thread.join(15)
        assert not thread.thread.is_alive()
    finally:
        upload.close()


def test_in_flight_requests_are_cut_after_the_grace() -> None:
    grace = 0.5
    thread = server_with(shutdown_grace_seconds=grace, header_timeout_seconds=60.0)
    upload = Upload(thread.server.http_port, "/scheduler/filter", FILTER)
    try:
        started = time.monotonic()
        thread.loop.call_soon_threadsafe(thread.server.stop)
        closed_after(upload.sock)  # the stalled upload is cut ...
        assert time.monotonic() - started >= grace  # ... but not before the grace
        thread.thread.join(15)
        assert not thread.thread.is_alive()
    finally:
        upload.close()


# --- SIGTERM to `raygate serve` ----------------------------------------------------------


class Raygate:
    """``raygate serve --demo`` in a process of its own, on ports it chose."""

    LISTENING = re.compile(r"serving HTTP on [\d.]+:(\d+), gRPC on port (\d+)")

    def __init__(self, *flags: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "raygate", "serve", "--demo", "--http-addr", f"{HOST}:0",
             "--grpc-addr", f"{HOST}:0", "--log-format", "json", *flags],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self.ports = threading.Event()
        self.http_port = self.grpc_port = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ports.wait(30):
            self.process.kill()
            raise AssertionError("raygate did not start:\n" + "".join(self.lines))
        self.url = f"http://{HOST}:{self.http_port}"

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            found = self.LISTENING.search(line)
            if found:
                self.http_port, self.grpc_port = int(found[1]), int(found[2])
                self.ports.set()


@pytest.fixture
def raygate() -> Iterator[Raygate]:
    process = Raygate("--shutdown-delay-seconds", "2", "--shutdown-grace-seconds", "20",
                      "--header-timeout-seconds", "60")
    yield process
    if process.process.poll() is None:
        process.process.kill()
    process.process.wait()
    process.reader.join(10)  # stderr read to its end
    assert process.process.stderr is not None
    process.process.stderr.close()


def test_sigterm_drains_and_exits_0(raygate: Raygate) -> None:
    wait_until(lambda: httpx.get(f"{raygate.url}/readyz", timeout=10).status_code == 200,
               "the demo to be ready")
    upload = Upload(raygate.http_port, "/scheduler/filter", FILTER)
    poll = LongPoll(raygate.url)
    try:
        raygate.process.send_signal(signal.SIGTERM)
        wait_until(lambda: httpx.get(f"{raygate.url}/readyz", timeout=10).status_code == 503,
                   "/readyz to answer 503")
        wait_until(lambda: refuses_connections(raygate.http_port), "the listener to close")
        poll.join(15)
        assert poll.status == 200
        assert upload.finish()[0].status == 200
        assert raygate.process.wait(15) == 0, "".join(raygate.lines)
    finally:
        upload.close()


# --- request deadlines -------------------------------------------------------------------

TIMEOUT = 0.3

STALLS: list[tuple[str, bytes]] = [
    ("nothing sent", b""),
    ("half a request head", b"POST /scheduler/filter HTTP/1.1\r\nHost: raygate\r\nContent-"),
    ("head without its end", b"GET /healthz HTTP/1.1\r\nHost: raygate\r\n"),
    ("half a body", b"POST /scheduler/filter HTTP/1.1\r\nHost: raygate\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(FILTER) + FILTER[:100]),
    ("a second request, half sent", b"GET /healthz HTTP/1.1\r\nHost: raygate\r\n\r\n"
                                    b"GET /healthz HTTP/1.1\r\nHo"),
]


@pytest.fixture(scope="module")
def deadline_server() -> Iterator[ServerThread]:
    thread = server_with(header_timeout_seconds=TIMEOUT)
    yield thread
    thread.stop()


@pytest.mark.parametrize(("name", "sent"), STALLS, ids=[s[0] for s in STALLS])
def test_a_stalled_request_is_disconnected_after_the_header_timeout(
    deadline_server: ServerThread, name: str, sent: bytes,
) -> None:
    url = deadline_server.url
    before = metric(url, "raygate_requests_timed_out_total", listener="main")
    with socket.create_connection((HOST, deadline_server.server.http_port)) as sock:
        sock.sendall(sent)
        assert closed_after(sock) >= TIMEOUT - 0.01, name
    assert metric(url, "raygate_requests_timed_out_total", listener="main") == before + 1
    # The server goes on serving.
    reply = httpx.post(f"{url}/scheduler/filter", content=FILTER, timeout=10)
    assert reply.status_code == 200 and reply.json()["NodeNames"] == ["cpu-1"]


def test_an_idle_keep_alive_connection_is_not_a_stalled_request(
    deadline_server: ServerThread,
) -> None:
    with socket.create_connection((HOST, deadline_server.server.http_port)) as sock:
        connection = http.client.HTTPConnection(HOST)
        connection.sock = sock
        for _ in range(2):
            connection.request("GET", "/healthz")
            assert connection.getresponse().read() == b'{"status":"ok"}'
            # Idle between requests well past the header timeout: keep-alive's business.
            threading.Event().wait(TIMEOUT * 3)


# --- the predicate bound -----------------------------------------------------------------


@pytest.fixture
def one_predicate_server() -> Iterator[ServerThread]:
    thread = server_with(predicate_concurrency=1, header_timeout_seconds=60.0)
    yield thread
    thread.stop()


def test_predicates_beyond_the_bound_get_503_at_once(one_predicate_server: ServerThread) -> None:
    url = one_predicate_server.url
    in_flight = "raygate_requests_in_flight"
    held = Upload(one_predicate_server.server.http_port, "/volcano/predicate", PREDICATE)
    try:
        # The slot is taken when the request starts, before its body is read.
        wait_until(lambda: metric(url, in_flight, route="/volcano/predicate") == 1,
                   "the held predicate to take the slot")
        refused = httpx.post(f"{url}/volcano/predicate", content=PREDICATE, timeout=10)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["reason"] == "Unavailable"
        # Other routes are not bounded by it.
        assert httpx.post(f"{url}/scheduler/filter", content=FILTER,
                          timeout=10).status_code == 200
        answered, body = held.finish()
        assert answered.status == 200 and json.loads(body)["code"] == 3
    finally:
        held.close()
    assert metric(url, in_flight, route="/volcano/predicate") == 0
    reply = httpx.post(f"{url}/volcano/predicate", content=PREDICATE, timeout=10)
    assert reply.status_code == 200 and reply.json()["code"] == 3  # floor pod, GPU node
    assert metric(url, "raygate_requests_shed_total", route="/volcano/predicate") == 1
    assert metric(url, "raygate_requests_total", route="/volcano/predicate", code="503") == 1


def test_a_predicate_whose_client_goes_away_mid_body_frees_its_slot(
    one_predicate_server: ServerThread,
) -> None:
    url = one_predicate_server.url
    in_flight = "raygate_requests_in_flight"
    held = Upload(one_predicate_server.server.http_port, "/volcano/predicate", PREDICATE)
    wait_until(lambda: metric(url, in_flight, route="/volcano/predicate") == 1,
               "the held predicate to take the slot")
    held.close()
    wait_until(lambda: metric(url, in_flight, route="/volcano/predicate") == 0,
               "the slot to be freed")
    reply = httpx.post(f"{url}/volcano/predicate", content=PREDICATE, timeout=10)
    assert reply.status_code == 200 and reply.json()["code"] == 3


def test_a_predicate_behind_unread_replies_frees_its_slot_after_the_header_timeout() -> None:
    # One send: 400 pipelined GET /openapi.json (~9 MB of replies, more than the socket
    # buffers hold) and half a predicate. raygate parses the predicate's head (taking the
    # slot) after it stopped reading because the client does not read: the request can
    # never arrive, and the deadline must not wait for raygate's own pause.
    thread = server_with(predicate_concurrency=1, header_timeout_seconds=TIMEOUT)
    try:
        url = thread.url
        in_flight = "raygate_requests_in_flight"
        timed_out = metric(url, "raygate_requests_timed_out_total", listener="main")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)  # no autotuning
        with sock:
            sock.connect((HOST, thread.server.http_port))
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: raygate\r\n\r\n" * 400
                         + b"POST /volcano/predicate HTTP/1.1\r\nHost: raygate\r\n"
                         + b"Content-Length: %d\r\n\r\n" % len(PREDICATE)
                         + PREDICATE[:len(PREDICATE) // 2])
            wait_until(lambda: metric(url, "raygate_requests_timed_out_total",
                                      listener="main") == timed_out + 1,
                       "the connection to be aborted")
            assert metric(url, in_flight, route="/volcano/predicate") == 0
        reply = httpx.post(f"{url}/volcano/predicate", content=PREDICATE, timeout=10)
        assert reply.status_code == 200 and reply.json()["code"] == 3
    finally:
        thread.stop()
