"""A scripted API server for the list/watch driver: the transport answers what the test
scripts (pages, streams, errors) and stops the driver when the script runs out; the
driver runs in the test's thread, its waits recorded instead of slept."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.keys import POD, WORKLOAD
from raygate.server.cache.sync import SyncStatus
from raygate.server.kube.resources import RESOURCES, Resource, Served
from raygate.server.kube.source import CacheWriter
from raygate.server.kube.transport import (
    ListPage,
    TransportError,
    WatchLine,
    WatchSettings,
)
from raygate.server.kube.watch import KindWatcher
from raygate.server.wire import kube
from testkit.builders import make_pod

PODS = next(r for r in RESOURCES if r.kind == POD)
WORKLOADS = next(r for r in RESOURCES if r.kind == WORKLOAD)


def pod(name: str, rv: int, **changes: str) -> kube.Pod:
    builder = make_pod(name)
    if "node" in changes:
        builder = builder.on(changes["node"])
    obj = builder.obj()
    obj["metadata"]["resourceVersion"] = str(rv)
    if "cpu" in changes:
        obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": changes["cpu"]}}
    return msgspec.convert(obj, kube.Pod)


def workload(name: str, rv: int) -> kube.Workload:
    return msgspec.convert({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": name, "namespace": "ray", "resourceVersion": str(rv)}},
        kube.Workload)


def bookmark(rv: int) -> WatchLine:
    return WatchLine("BOOKMARK", obj=msgspec.convert(
        {"metadata": {"resourceVersion": str(rv)}}, kube.Pod))


Script = list[Any]  # answers in order: a value to return or an exception to raise


@dataclass
class Stream:
    lines: list[WatchLine | Exception]

    def __iter__(self) -> Iterator[WatchLine]:
        for line in self.lines:
            if isinstance(line, Exception):
                raise line
            yield line

    def close(self) -> None:
        pass


@dataclass
class FakeTransport:
    stop: threading.Event
    lists: Script = field(default_factory=list)
    watches: Script = field(default_factory=list)
    streams: Script = field(default_factory=list)
    """Streaming lists (watches with initial events)."""
    discovery: dict[str, Script] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def _next(self, script: Script) -> Any:
        if not script:
            # The script has run out: the test is over.
            self.stop.set()
            raise TransportError("end of script")
        answer = script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def discover(self, group_version: str) -> frozenset[str] | None:
        self.calls.append(("discover", group_version))
        answer: frozenset[str] | None = self._next(self.discovery.setdefault(group_version, []))
        return answer

    def list(self, served: Served, limit: int, continue_: str) -> ListPage:
        self.calls.append(("list", served.path, continue_))
        page: ListPage = self._next(self.lists)
        return page

    def watch(self, served: Served, resource_version: str, timeout_seconds: int, *,
              initial_events: bool = False) -> Stream:
        if initial_events:
            self.calls.append(("stream", served.path, resource_version))
            return Stream(self._next(self.streams))
        self.calls.append(("watch", served.path, resource_version))
        lines = self._next(self.watches)
        return Stream(lines)

    def close(self) -> None:
        pass


@dataclass
class Run:
    transport: FakeTransport
    cache: ClusterCache
    writer: CacheWriter
    watcher: KindWatcher
    delays: list[float]

    def __call__(self) -> None:
        self.watcher.run()
        self.writer.drain()

    def names(self) -> set[str]:
        return {p.name for p in self.writer.current().objects.pods}

    def requests(self, verb: str) -> list[tuple[str, ...]]:
        return [c for c in self.transport.calls if c[0] == verb]


LISTS = WatchSettings(freeze_gc=False, stream_list=False)
"""LIST pages, as an API server that does not serve the streaming list is listed."""
STREAMS = WatchSettings(freeze_gc=False, page_size=2, stream_list=True)


def driver(resource: Resource = PODS, settings: WatchSettings | None = None) -> Run:
    stop = threading.Event()
    transport = FakeTransport(stop)
    cache = ClusterCache(PolicyConfig(), "test")
    sync = SyncStatus([resource.kind])
    writer = CacheWriter(cache, sync, freeze_gc=False)
    delays: list[float] = []

    def wait(seconds: float) -> bool:
        delays.append(seconds)
        return not stop.is_set()

    watcher = KindWatcher(resource, transport, writer, sync.kinds[resource.kind],
                          settings=settings or LISTS, stop=stop,
                          rng=random.Random(7), wait=wait)
    return Run(transport, cache, writer, watcher, delays)
