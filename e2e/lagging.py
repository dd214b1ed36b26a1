"""A raygate whose view of the cluster lags by seconds, with a kube-scheduler of its own.

raygate's cache lags kube-scheduler by the time a watch event takes to arrive: a few
milliseconds here, rarely more, so a scenario cannot count on the race between a bind and
raygate's next decision. ``LaggingRaygate`` forces it: a second raygate reads the API
server through ``DelayProxy``, which hands on the events of its watches ``delay`` seconds
late (its lists and writes go through at once), and a second kube-scheduler profile,
``ray-scheduler-lagging``, calls it with deploy/'s extender settings. A double of the
network, not of a component: both are the real programs.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster import REPO, Testbed
from testbed.common import RAYGATE_ACCOUNT
from testbed.pki import Pki
from testbed.processes import free_port, wait_for

__all__ = ["SCHEDULER_NAME", "DelayProxy", "LaggingRaygate", "explain", "metric",
           "node_class"]

SCHEDULER_NAME = "ray-scheduler-lagging"


def metric(url: str, name: str, **labels: str) -> float:
    """The sum of the series of ``name`` whose labels include ``labels``, as the raygate
    at ``url`` counts them."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line
                                               for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def explain(url: str, pod: dict[str, Any], token: str = "", nodes: str = "") -> dict[str, Any]:
    """What the raygate at ``url`` says of ``pod`` now (``POST /v1/explain``, over
    ``nodes`` when given; ``token`` when its authz is on)."""
    query = f"?nodes={nodes}" if nodes else ""
    request = urllib.request.Request(
        f"{url}/v1/explain{query}", data=json.dumps({"pod": pod}).encode(),
        headers={"Authorization": f"Bearer {token}"} if token else {}, method="POST")
    reply: dict[str, Any] = json.load(urllib.request.urlopen(request, timeout=10))
    return reply


def node_class(url: str, node: str, token: str = "") -> str:
    """How the raygate at ``url`` classes ``node`` now: ``gpu``, ``cpu``, or ``unknown``
    while its cache has not seen it (``explain`` with any pod)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "probe", "namespace": "default", "uid": "probe"},
           "spec": {"containers": [{"name": "probe", "image": "example.invalid/p:1"}]}}
    reply = explain(url, pod, token, nodes=node)
    return next((str(n["nodeClass"]) for n in reply["nodes"] if n["name"] == node),
                "unknown")


class DelayProxy:
    """HTTPS on 127.0.0.1:``port`` in front of kube-apiserver, with its certificate: the
    response to a watch comes ``delay`` seconds late, every other response (a LIST, a
    PATCH) at once, and nothing overtakes what came before it on a connection. That is a
    lagging cache: raygate's writes and lists are not slowed, the events after them are.
    HTTP/1.1 without pipelining, as the kubernetes client speaks it: each request is read
    whole (head and ``Content-Length`` body) and marks the response that follows."""

    def __init__(self, upstream_port: int, pki: Pki, delay: float) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self._server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_tls.load_cert_chain(pki.apiserver_cert, pki.apiserver_key)
        self._client_tls = ssl.create_default_context(cafile=str(pki.ca_cert))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="delay-proxy",
                                        daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self._server_tls), self._loop).result(30)
        self.port: int = self._server.sockets[0].getsockname()[1]

    async def _handle(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter
                      ) -> None:
        try:
            upstream, to_upstream = await asyncio.open_connection(
                "127.0.0.1", self.upstream_port, ssl=self._client_tls,
                server_hostname="127.0.0.1")
        except OSError:
            to_client.close()
            return
        late = [False]  # does the response now coming answer a watch?
        await asyncio.gather(self._requests(client, to_upstream, late),
                             self._responses(upstream, to_client, late))

    @staticmethod
    async def _requests(client: asyncio.StreamReader, to_upstream: asyncio.StreamWriter,
                        late: list[bool]) -> None:
        while True:
            try:
                head = await client.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await client.readexactly(length)
            except (OSError, ValueError, asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError):
                to_upstream.close()
                return
            request_line = head.split(b"\r\n", 1)[0]
            late[0] = b"watch=true" in request_line or b"watch=1" in request_line
            to_upstream.write(head + body)

    async def _responses(self, upstream: asyncio.StreamReader,
                         to_client: asyncio.StreamWriter, late: list[bool]) -> None:
        loop = asyncio.get_running_loop()
        due = 0.0  # when the last bytes go: later bytes never go before them
        while True:
            try:
                data = await upstream.read(65536)
            except OSError:
                data = b""
            due = max(due, loop.time() + (self.delay if late[0] else 0.0))
            loop.call_at(due, self._send, to_client, data)
            if not data:
                return

    @staticmethod
    def _send(sink: asyncio.StreamWriter, data: bytes) -> None:
        if sink.is_closing():
            return
        if data:
            sink.write(data)
        else:
            sink.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


class LaggingRaygate:
    """raygate behind a ``DelayProxy`` and ``ray-scheduler-lagging`` calling it; ``stop``
    ends both. ``args``: more ``raygate serve`` flags (``--requeue=off``, say)."""

    def __init__(self, testbed: Testbed, delay: float, args: tuple[str, ...] = ()) -> None:
        self.testbed = testbed
        assert testbed.pki is not None
        self.proxy = DelayProxy(testbed.ports.apiserver, testbed.pki, delay)
        self.http_port = free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.args = args

    def start(self) -> LaggingRaygate:
        testbed = self.testbed
        kubeconfig = testbed.service_account_kubeconfig(RAYGATE_ACCOUNT)
        lagging = Path(str(kubeconfig) + ".lagging")
        document = yaml.safe_load(kubeconfig.read_text())
        for cluster in document["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.proxy.port}"
        lagging.write_text(yaml.safe_dump(document))
        config = testbed.workdir / "raygate.yaml"  # deploy/'s settings, as start_raygate wrote
        raygate = testbed.run("raygate-lagging", [
            sys.executable, "-m", "raygate", "serve", f"--kubeconfig={lagging}",
            f"--config={config}", f"--http-addr=127.0.0.1:{self.http_port}",
            f"--grpc-addr=127.0.0.1:{free_port()}", "--authz=off",
            "--shutdown-delay-seconds=0", *self.args,
        ], env={"PYTHONPATH": str(REPO)})
        wait_for("lagging raygate /readyz", lambda: urllib.request.urlopen(
            f"{self.url}/readyz", timeout=2).status == 200, 120, raygate)
        scheduler = testbed.scheduler_configuration()
        scheduler["leaderElection"] = {"leaderElect": False}
        scheduler["profiles"] = [{"schedulerName": SCHEDULER_NAME}]
        for extender in scheduler["extenders"]:
            extender["urlPrefix"] = f"{self.url}/scheduler"
        path = testbed.workdir / f"{SCHEDULER_NAME}.yaml"
        path.write_text(yaml.safe_dump(scheduler))
        testbed.start_scheduler(SCHEDULER_NAME, path,
                                scheduler["clientConnection"]["kubeconfig"], free_port())
        return self

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.url, name, **labels)

    def node_class(self, node: str) -> str:
        """``gpu``, ``cpu``, or ``unknown`` while its lagging cache has not seen ``node``."""
        return node_class(self.url, node)

    def stop(self) -> None:
        for name in (SCHEDULER_NAME, "raygate-lagging"):
            process = self.testbed.processes.pop(name, None)
            if process is not None:
                process.stop()
        self.proxy.close()
