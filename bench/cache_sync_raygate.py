"""``bench.cache_sync``'s raygate process: the list/watch source, the cache and the HTTP
server, as ``raygate serve`` runs them, with a timer on each batch the cache writer
applies; it answers the driver's commands over a pipe."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from bench.memory import read_memory

__all__ = ["raygate_main"]

HOST = "127.0.0.1"


def raygate_main(conn: Connection, kubeconfig: str, admission: bool,
                 publish_interval: float | None) -> None:
    import uvloop

    from raygate.policy.config import PolicyConfig
    from raygate.server.app import build_server
    from raygate.server.cache.cluster import ClusterCache
    from raygate.server.kube.client import KubeTransport, load_connection
    from raygate.server.kube.source import LiveSource
    from raygate.server.kube.transport import WatchSettings
    from raygate.server.listeners import bind_socket

    logging.basicConfig(level=logging.WARNING, format="raygate: %(message)s")
    logging.getLogger("raygate.kube").setLevel(logging.INFO)
    batches: list[tuple[int, float]] = []
    cache = ClusterCache(PolicyConfig(), "bench")
    def on_batch(changes: int, seconds: float) -> None:
        batches.append((changes, seconds))
        if seconds > 0.5:
            logging.getLogger("raygate.kube").info("applied %d changes in %.2fs (CPU)",
                                                   changes, seconds)

    settings = WatchSettings() if publish_interval is None else WatchSettings(
        publish_interval=publish_interval)
    source = LiveSource(cache, KubeTransport(load_connection(kubeconfig, None, {}), settings),
                        settings, on_batch=on_batch)
    server = build_server(cache, bind_socket(HOST, 0), f"{HOST}:0")
    loop = uvloop.new_event_loop()

    def control() -> None:
        started = time.perf_counter()
        source.start()
        while not cache.ready:
            time.sleep(0.01)
        ready_s = time.perf_counter() - started
        if not admission:
            loop.call_soon_threadsafe(server.services.admission.close)
        memory = read_memory()
        conn.send({"ready_s": ready_s, "rss_kib": memory.rss_kib, "hwm_kib": memory.hwm_kib,
                   "http_port": server.http_port, "counts": cache.snapshot.counts(),
                   "batches": len(batches)})
        _answer(conn, source, cache, batches, lambda: loop.call_soon_threadsafe(server.stop))

    threading.Thread(target=control, daemon=True).start()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(server.run())


def _answer(conn: Connection, source: Any, cache: Any, batches: list[tuple[int, float]],
            stop_server: Callable[[], object]) -> None:
    """raygate's process: the driver's commands, until ``stop``."""
    pods = next(w for w in source.watchers if w.kind == "Pod")
    while True:
        command = conn.recv()
        if command[0] == "reset":
            batches.clear()
            conn.send("ok")
        elif command[0] == "batches":
            conn.send(list(batches))
        elif command[0] == "version":
            conn.send({"pods": pods.resource_version, "rss_kib": read_memory().rss_kib,
                       "counts": cache.snapshot.counts(),
                       "applied": sum(n for n, _ in batches)})
        elif command[0] == "stop":
            source.stop()
            stop_server()
            conn.send("stopped")
            return
