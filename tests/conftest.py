"""Shared fixtures: a real raygate server (HTTP + gRPC) on loopback, fed by the real
snapshot loader, with a clock the test controls."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
import uvloop

from raygate.policy.config import PolicyConfig
from raygate.server.app import build_server
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot import Snapshot
from raygate.server.cache.snapshot_files import demo_text, load_text
from raygate.server.listeners import WebhookListener, bind_socket
from testkit.builders import T0_EPOCH, Obj, object_list


class FakeClock:
    """Seconds since the epoch, moved by the test, never by the wall clock."""

    def __init__(self, now: float = T0_EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def snapshot_of(*objects: Obj, config: PolicyConfig | None = None) -> Snapshot:
    """Objects through the real loader (as a `kubectl get -o json` List) into a snapshot."""
    loaded = load_text(json.dumps(object_list(*objects)), "test")
    return build_snapshot(loaded, config or PolicyConfig())


class ServerThread:
    """raygate's real servers in a background thread with their own event loop.

    ``verify``: a client context trusting the server's certificate when it serves TLS
    (with a client certificate loaded when it requires one)."""

    def __init__(self, cache: ClusterCache, clock: FakeClock,
                 verify: ssl.SSLContext | None = None, **options: Any) -> None:
        sock = bind_socket("127.0.0.1", 0)
        self.server = build_server(cache, sock, "127.0.0.1:0", clock=clock, **options)
        self.cache = cache
        self.clock = clock
        self.verify = verify
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="raygate-test-server", daemon=True)
        scheme = "http" if verify is None else "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.http_port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.run())

    def start(self) -> None:
        self.thread.start()
        with httpx.Client(base_url=self.url, verify=self.verify or True) as client:
            for _ in range(500):
                try:
                    if client.get("/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                threading.Event().wait(0.01)
        raise RuntimeError("raygate test server did not start")

    @property
    def grpc_target(self) -> str:
        """Where its gRPC server listens (known once started)."""
        return f"127.0.0.1:{self.server.grpc_port}"

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.stop)
        self.thread.join(15)

    def publish(self, *objects: Obj, config: PolicyConfig | None = None) -> Snapshot:
        snap = snapshot_of(*objects, config=config)
        self.cache.publish(snap)
        return snap


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    cache = ClusterCache(PolicyConfig(), "test")
    thread = ServerThread(cache, FakeClock())
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[httpx.Client]:
    server.clock.now = T0_EPOCH
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def post_json(client: httpx.Client, path: str, body: Any) -> httpx.Response:
    return client.post(path, content=json.dumps(body),
                       headers={"Content-Type": "application/json"})


def start_demo_server() -> ServerThread:
    """A started server of the demo cluster, at 04:40 on its day: its preemption at 04:05
    is past the 300 s thrash guard."""
    config = PolicyConfig()
    cache = ClusterCache(config, "demo")
    cache.publish(build_snapshot(load_text(demo_text(), "demo"), config))
    thread = ServerThread(cache, FakeClock(T0_EPOCH + 40 * 60))
    thread.start()
    return thread


@pytest.fixture(scope="module")
def demo_server() -> Iterator[ServerThread]:
    thread = start_demo_server()
    yield thread
    thread.stop()


def wait_until(condition: Callable[[], bool], what: str = "the condition",
               timeout: float = 15.0) -> None:
    """Poll ``condition``; the bound is for a broken server, not for a slow machine."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.002)


@contextmanager
def webhook_server(folder: Path) -> Iterator[tuple[str, ssl.SSLContext, Path]]:
    """A server with its webhook listener on loopback, under a certificate of a CA made
    here: (the listener's https:// URL, a client context trusting the CA, the CA's PEM
    file in ``folder``)."""
    ca = trustme.CA()
    cert = ca.issue_cert("raygate.raygate-system.svc", "127.0.0.1")
    cert_file, key_file, ca_file = folder / "tls.crt", folder / "tls.key", folder / "ca.crt"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    webhook = WebhookListener(bind_socket("127.0.0.1", 0), str(cert_file), str(key_file))
    # Ready once its plain HTTP port answers: the webhook listener is served beside it,
    # on a socket already listening.
    server = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock(), webhook=webhook)
    server.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    try:
        yield f"https://127.0.0.1:{webhook.sock.getsockname()[1]}", context, ca_file
    finally:
        server.stop()
