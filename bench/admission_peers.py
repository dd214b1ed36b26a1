"""``bench.admission_watchers``' two helper processes: the **server** (raygate's server,
``app.build_server``, over the cluster snapshot, a publisher thread changing one pending
pod's message ``rate`` times a second and logging when) and the **watchers** (gRPC
``Watch`` streams and HTTP long-polls recording when each change arrives). Run as
``python -m bench.admission_watchers _serve|_watch ...``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.payloads import CLUSTER, NAMESPACE, OVERFLOW_GROUP, ray_worker_pod

__all__ = ["MARK_BYTES", "pin", "serve", "watch"]

HOST = "127.0.0.1"
VARIANTS = 16
"""Distinct snapshots the publisher cycles through (built before serving)."""
MARK_BYTES = re.compile(rb"available: (\d+) Insufficient cpu")
READY_TIMEOUT_S = 60.0


def pin(cpu: int) -> None:
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or one CPU
        if cpu < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {cpu})


def _pending_pod(variant: int) -> dict[str, Any]:
    pod = ray_worker_pod(OVERFLOW_GROUP, index=900_000)
    pod["status"] = {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "lastTransitionTime": "2026-11-30T04:12:31Z",
        "message": f"0/500 nodes are available: {1000 + variant} Insufficient cpu."}]}
    return pod


# --- the server process -----------------------------------------------------------------


def serve(snapshot_file: Path, http_port: int, grpc_port: int, rate: float,
          publish_log: Path) -> None:
    import dataclasses

    import msgspec
    import uvloop

    from raygate.policy.config import PolicyConfig
    from raygate.server.app import build_server
    from raygate.server.cache import convert
    from raygate.server.cache.cluster import ClusterCache
    from raygate.server.cache.editor import build_snapshot
    from raygate.server.cache.snapshot_files import load_text
    from raygate.server.listeners import bind_socket
    from raygate.server.wire import kube

    pin(0)
    logging.basicConfig(level=logging.WARNING)
    config = PolicyConfig()
    base = load_text(snapshot_file.read_text(), str(snapshot_file))
    variants = [
        build_snapshot(dataclasses.replace(base, pods=(*base.pods, convert.pod_view(
            msgspec.convert(_pending_pod(i), kube.Pod, strict=False)))), config)
        for i in range(VARIANTS)]
    cache = ClusterCache(config, "bench")
    cache.publish(variants[0])
    server = build_server(cache, bind_socket(HOST, http_port), f"{HOST}:{grpc_port}")
    stop = threading.Event()

    def publisher() -> None:
        with publish_log.open("w") as log:
            n = 1
            while rate > 0 and not stop.wait(1 / rate):
                variant = n % VARIANTS
                cache.publish(variants[variant])
                log.write(f"{variant} {time.monotonic()}\n")
                log.flush()
                n += 1

    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    try:
        uvloop.run(server.run())
    finally:
        stop.set()
        thread.join(5)


# --- the watcher process ------------------------------------------------------------------


@dataclass
class _Tally:
    """What the watchers of one process saw."""

    total: int
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    synced: int = 0
    grpc: list[tuple[int, float]] = field(default_factory=list)
    """(variant, CLOCK_MONOTONIC) per change received."""
    http: list[tuple[int, float]] = field(default_factory=list)

    def one_synced(self) -> None:
        self.synced += 1
        if self.synced == self.total:
            self.ready.set()


async def _grpc_watch(channel: Any, cluster: str, tally: _Tally) -> None:
    from raygate.contract.proto.raygate.v1 import admission_pb2 as pb

    # Raw bytes, not parsed messages: the watchers share a CPU with the load, and should
    # take as little of it as a Go client would. One cluster: ADDED, SYNCED, then only
    # MODIFIED; the marker is plain text inside the message.
    watch = channel.unary_stream("/raygate.v1.Admission/Watch",
                                 request_serializer=pb.WatchRequest.SerializeToString,
                                 response_deserializer=None)
    seen = 0
    async for message in watch(pb.WatchRequest(namespace=NAMESPACE, name=cluster)):
        seen += 1
        if seen == 2:  # SYNCED
            tally.one_synced()
        elif seen > 2:
            found = MARK_BYTES.search(message)
            if found:
                tally.grpc.append((int(found[1]) - 1000, time.monotonic()))


async def _http_poll(port: int, tally: _Tally) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    path = f"/v1/namespaces/{NAMESPACE}/rayclusters/{CLUSTER}/admission"
    version = ""
    first = True
    while True:
        query = f"?waitForChange={version}&timeoutSeconds=30" if not first else ""
        writer.write(f"GET {path}{query} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head, re.I)[1])  # type: ignore[index]
        body = await reader.readexactly(length)
        at = time.monotonic()
        latest = re.search(rb'"version":"([0-9a-f]+)"', body)[1].decode()  # type: ignore[index]
        if first:
            first = False
            tally.one_synced()
        elif latest != version:
            found = MARK_BYTES.search(body)
            if found:
                tally.http.append((int(found[1]) - 1000, at))
        version = latest


async def watch(ports: tuple[int, int], counts: tuple[int, int, int], out: Path) -> None:
    """``counts``: gRPC watchers of ray/bench, HTTP long-polls of ray/bench, gRPC watchers
    each of its own rc-<i>."""
    import grpc

    grpc_port, http_port = ports
    n_grpc, n_http, n_spread = counts
    tally = _Tally(n_grpc + n_http + n_spread)
    channels = [grpc.aio.insecure_channel(f"{HOST}:{grpc_port}") for _ in range(
        max(1, (n_grpc + n_spread) // 100))]
    clusters = [CLUSTER] * n_grpc + [f"rc-{i}" for i in range(n_spread)]
    tasks = [asyncio.ensure_future(_grpc_watch(channels[i % len(channels)], cluster, tally))
             for i, cluster in enumerate(clusters)]
    tasks += [asyncio.ensure_future(_http_poll(http_port, tally)) for _ in range(n_http)]
    try:
        await asyncio.wait_for(tally.ready.wait(), READY_TIMEOUT_S)
    except TimeoutError:
        failed = [t.exception() for t in tasks if t.done() and t.exception()]
        print(f"only {tally.synced} of {tally.total} watchers synced; "
              f"{len(failed)} failed, e.g. {failed[:1]!r}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    print("ready", flush=True)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await stopping.wait()
    for task in tasks:
        task.cancel()
    out.write_text(json.dumps({"grpc": tally.grpc, "http": tally.http}))
    for channel in channels:
        await channel.close()
