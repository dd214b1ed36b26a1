"""A raygate whose view of the cluster lags by seconds, with a kube-scheduler of its own.

raygate's cache lags kube-scheduler by the time a watch event takes to arrive: a few
milliseconds here, rarely more, so a scenario cannot count on the race between a bind and
raygate's next decision. ``LaggingRaygate`` forces it: a second raygate reads the API
server through ``DelayProxy``, which hands on every byte the API server sends ``delay``
seconds late (requests go through at once), and a second kube-scheduler profile,
``ray-scheduler-lagging``, calls it with deploy/'s extender settings. A double of the
network, not of a component: both are the real programs.
"""

from __future__ import annotations

import heapq
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from testbed.cluster import REPO, Testbed
from testbed.processes import free_port, wait_for

__all__ = ["SCHEDULER_NAME", "DelayProxy", "LaggingRaygate", "metric"]

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


class DelayProxy:
    """TCP on 127.0.0.1:``port`` to ``upstream``; the upstream's bytes arrive ``delay``
    seconds late, in order. TLS passes through untouched."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream = upstream
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="delay-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, False),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True),
                             daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, late: bool) -> None:
        due: list[tuple[float, int, bytes]] = []
        ready = threading.Condition()
        order = 0

        def send() -> None:
            while True:
                with ready:
                    while not due:
                        ready.wait()
                    at, _, data = due[0]
                    wait = at - time.monotonic()
                    if wait > 0:
                        ready.wait(wait)
                        continue
                    heapq.heappop(due)
                try:
                    if not data:
                        sink.shutdown(socket.SHUT_WR)
                        return
                    sink.sendall(data)
                except OSError:
                    return

        if late:
            threading.Thread(target=send, daemon=True).start()
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not late:
                try:
                    if not data:
                        sink.shutdown(socket.SHUT_WR)
                        return
                    sink.sendall(data)
                except OSError:
                    return
                continue
            with ready:
                order += 1
                heapq.heappush(due, (time.monotonic() + self.delay, order, data))
                ready.notify()
            if not data:
                return

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()


class LaggingRaygate:
    """raygate behind a ``DelayProxy`` and ``ray-scheduler-lagging`` calling it; ``stop``
    ends both. ``args``: more ``raygate serve`` flags (``--requeue=off``, say)."""

    def __init__(self, testbed: Testbed, delay: float, args: tuple[str, ...] = ()) -> None:
        self.testbed = testbed
        self.proxy = DelayProxy(("127.0.0.1", testbed.ports.apiserver), delay)
        self.http_port = free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.args = args

    def start(self) -> LaggingRaygate:
        testbed = self.testbed
        kubeconfig = testbed.service_account_kubeconfig("raygate")
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

    def stop(self) -> None:
        for name in (SCHEDULER_NAME, "raygate-lagging"):
            process = self.testbed.processes.pop(name, None)
            if process is not None:
                process.stop()
        self.proxy.close()
