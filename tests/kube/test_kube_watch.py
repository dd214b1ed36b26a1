"""The list/watch driver against a scripted API server: no sockets, no waiting.

Each test scripts what the transport answers (pages, streams, errors), runs the driver
in the test's thread until the script runs out, then reads the cache and the requests.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.model import PodView
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.keys import POD, WORKLOAD
from raygate.server.cache.sync import SyncStatus
from raygate.server.kube.decode import Decoders, decode_line
from raygate.server.kube.resources import RESOURCES, Resource, Served
from raygate.server.kube.source import CacheWriter
from raygate.server.kube.transport import (
    ApiError,
    Backoff,
    BackoffPolicy,
    Gone,
    ListPage,
    NotServed,
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


def test_lists_in_pages_then_watches_from_the_lists_version() -> None:
    run = driver()
    run.transport.lists = [ListPage([pod("a", 5)], "10", continue_="tok"),
                           ListPage([pod("b", 7)], "10")]
    run.transport.watches = [[WatchLine("ADDED", obj=pod("c", 11))]]
    run()
    assert run.requests("list") == [("list", "/api/v1/pods", ""),
                                    ("list", "/api/v1/pods", "tok")]
    assert run.requests("watch")[0] == ("watch", "/api/v1/pods", "10")
    assert run.names() == {"a", "b", "c"}
    assert run.watcher.status.synced and run.cache.ready  # set by the writer's batch


def test_a_dropped_watch_resumes_from_the_last_version_without_listing() -> None:
    run = driver()
    run.transport.lists = [ListPage([pod("a", 5)], "10")]
    run.transport.watches = [
        [WatchLine("ADDED", obj=pod("b", 11)), WatchLine("MODIFIED", obj=pod("a", 12)),
         TransportError("connection reset")],
        [bookmark(20)],  # then the server's timeout ends the stream cleanly
        [WatchLine("DELETED", obj=pod("a", 21))],
    ]
    run()
    assert [c[2] for c in run.requests("watch")] == ["10", "12", "20", "21"]
    assert len(run.requests("list")) == 1
    assert run.names() == {"b"}
    # One backoff after the broken stream, none after the clean end; the script's end
    # is the last one.
    assert 0.8 <= run.delays[0] < 1.6 and len(run.delays) == 2
    assert run.watcher.status.events["BOOKMARK"] == 1


def test_an_error_event_of_410_lists_again_and_drops_what_is_gone() -> None:
    run = driver()
    run.transport.lists = [ListPage([pod("a", 5), pod("b", 6)], "10"),
                           ListPage([pod("b", 6), pod("c", 30)], "31")]
    gone = kube.Status(code=410, reason="Expired", message="too old resource version")
    run.transport.watches = [[WatchLine("ERROR", status=gone)], [bookmark(32)]]
    run()
    assert run.names() == {"b", "c"}
    assert [c[2] for c in run.requests("watch")][:2] == ["10", "31"]
    assert run.watcher.status.relists == 1
    assert run.delays[:-1] == []  # a 410 is no failure: list again at once


def test_http_410_on_a_watch_lists_again() -> None:
    run = driver()
    run.transport.lists = [ListPage([pod("a", 5)], "10"), ListPage([], "40")]
    run.transport.watches = [Gone(410, "Expired", "too old"), []]
    run()
    assert run.names() == set()
    assert run.watcher.status.relists == 1


def test_a_relist_keeps_the_views_of_unchanged_objects() -> None:
    run = driver()
    a, b = pod("a", 5), pod("b", 6)
    run.transport.lists = [ListPage([a, b, pod("c", 7)], "10")]
    run()
    held = run.writer.current()
    run.watcher.stop.clear()
    c = pod("c", 7)
    run.transport.lists = [ListPage([pod("a", 5), pod("b", 8), pod("c", 9, node="n2")], "11")]
    run()
    after = run.writer.current()
    # The same resourceVersion is the same object: its view is kept, not rebuilt.
    assert after.pod(a.metadata.uid) is held.pod(a.metadata.uid)
    # A new version changing nothing raygate reads keeps the view too, with the version.
    assert after.pod(b.metadata.uid) is held.pod(b.metadata.uid)
    assert after.version_of(POD, b.metadata.uid) == ("8", held.pod(b.metadata.uid))
    view = after.pod(c.metadata.uid)
    assert view is not None and view.node_name == "n2"
    assert run.watcher.status.relists == 1


def test_an_expired_continue_token_starts_the_list_over() -> None:
    run = driver()
    run.transport.lists = [
        ListPage([pod("a", 5)], "10", continue_="t1"),
        Gone(410, "Expired", "The provided continue parameter is too old"),
        ListPage([pod("b", 15)], "20", continue_="t2"),
        ListPage([pod("c", 16)], "20"),
    ]
    run.transport.watches = [[WatchLine("ADDED", obj=pod("d", 21))]]
    run()
    assert [c[2] for c in run.requests("list")] == ["", "t1", "", "t2"]
    assert run.names() == {"b", "c", "d"}


def test_unknown_event_types_are_skipped() -> None:
    run = driver()
    run.transport.lists = [ListPage([], "10")]
    run.transport.watches = [[WatchLine("FROBNICATED"), WatchLine("ADDED", obj=pod("a", 11))]]
    run()
    assert run.names() == {"a"}
    assert run.watcher.status.events["FROBNICATED"] == 1
    assert len(run.requests("list")) == 1


def test_an_object_raygate_cannot_read_is_left_out() -> None:
    run = driver()
    run.transport.lists = [ListPage([pod("a", 5), pod("b", 6, cpu="lots")], "10",
                                    unreadable=[(kube.ObjectMeta(name="c"), "bad")])]
    unreadable_a = WatchLine("MODIFIED", meta=kube.ObjectMeta(
        name="a", namespace="ray", uid=pod("a", 5).metadata.uid), problem="bad")
    run.transport.watches = [[unreadable_a]]
    run()
    assert run.names() == set()
    assert run.watcher.status.errors >= 2


def test_other_errors_back_off_with_jitter_and_reset_after_a_success() -> None:
    settings = WatchSettings(backoff=BackoffPolicy(initial=1.0, maximum=4.0, jitter=0.5),
                             freeze_gc=False, stream_list=False)
    run = driver(settings=settings)
    run.transport.lists = [TransportError("refused")] * 4 + [ListPage([], "10")]
    run.transport.watches = [ApiError(500, "InternalError", "etcd timeout"),
                             [WatchLine("ADDED", obj=pod("a", 11))],
                             ApiError(429, "TooManyRequests", "slow down")]
    run()
    bases = [1.0, 2.0, 4.0, 4.0, 1.0, 1.0]  # x2 each time, capped; reset by each success
    for delay, base in zip(run.delays, bases, strict=False):
        assert base <= delay < base * 1.5
    assert len(run.delays) == len(bases) + 1  # and the one that ends the script
    assert [c[2] for c in run.requests("watch")][:3] == ["10", "10", "11"]


def test_backoff_is_exponential_capped_and_jittered() -> None:
    backoff = Backoff(BackoffPolicy(initial=0.8, maximum=30.0, factor=2.0, jitter=1.0),
                      random.Random(1))
    delays = [backoff.next() for _ in range(8)]
    for i, delay in enumerate(delays):
        base = min(0.8 * 2**i, 30.0)
        assert base <= delay < 2 * base
    assert len(set(delays)) == len(delays)
    backoff.reset()
    assert 0.8 <= backoff.next() < 1.6


def test_a_crd_not_installed_is_absent_until_discovery_finds_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = WatchSettings(rediscover_seconds=60.0, freeze_gc=False, stream_list=False)
    run = driver(WORKLOADS, settings)
    # Not served at all, twice; then Kueue is installed at v1beta1 only.
    run.transport.discovery = {
        "kueue.x-k8s.io/v1beta2": [None, None, None],
        "kueue.x-k8s.io/v1beta1": [None, frozenset({"clusterqueues"}),
                                   frozenset({"workloads"})],
    }
    run.transport.lists = [ListPage([workload("wl-1", 5)], "10")]
    run.transport.watches = [[WatchLine("ADDED", obj=workload("wl-2", 11))]]
    with caplog.at_level("INFO", logger="raygate.kube"):
        run()
    assert run.delays[:2] == [60.0, 60.0]
    assert run.requests("list") == [("list", "/apis/kueue.x-k8s.io/v1beta1/workloads", "")]
    assert {w.name for w in run.writer.current().objects.workloads} == {"wl-1", "wl-2"}
    assert sum("not installed" in r.message for r in caplog.records) == 1
    assert run.watcher.status.resource == "workloads.v1beta1.kueue.x-k8s.io"


def test_a_crd_deleted_while_watched_empties_its_kind() -> None:
    run = driver(WORKLOADS, WatchSettings(rediscover_seconds=5.0, freeze_gc=False,
                                          stream_list=False))
    run.transport.discovery = {"kueue.x-k8s.io/v1beta2": [frozenset({"workloads"}), None],
                               "kueue.x-k8s.io/v1beta1": [None]}
    run.transport.lists = [ListPage([workload("wl-1", 5)], "10")]
    run.transport.watches = [NotServed(404, "NotFound", "the server could not find it")]
    run()
    assert run.writer.current().objects.workloads == ()
    assert run.delays[:2] == [5.0, 5.0]  # looked up again, still absent
    assert run.watcher.status.resource == ""


def test_sync_status_reports_readiness_and_the_age_of_the_last_event() -> None:
    now = [100.0]
    sync = SyncStatus(["Node", "Pod", "Workload"], clock=lambda: now[0])
    assert not sync.ready()
    sync.kinds["Node"].synced = True
    sync.kinds["Workload"].state = "absent"
    assert not sync.ready() and sync.absent() == ["Workload"]
    sync.kinds["Pod"].synced = True
    sync.kinds["Pod"].last_event = 97.5
    sync.kinds["Pod"].events.update({"ADDED": 3, "MODIFIED": 2})
    assert sync.ready()
    report = sync.report()
    assert report["Pod"].last_event_age_seconds == 2.5 and report["Pod"].events == 5
    assert report["Node"].last_event_age_seconds is None
    assert msgspec.json.decode(msgspec.json.encode(report["Pod"]))["lastEventAgeSeconds"] == 2.5


# --- the streaming list ---------------------------------------------------------------


def initial_events_end(rv: int) -> WatchLine:
    """The BOOKMARK that ends a streaming list's initial events, as decoded."""
    return decode_line(b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1",'
                       b'"metadata":{"resourceVersion":"%d","annotations":{'
                       b'"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},'
                       b'"status":{}}}' % rv, Decoders(kube.Pod))


def test_the_streaming_list_fills_the_cache_and_goes_on_as_the_watch() -> None:
    run = driver(settings=STREAMS)
    run.transport.streams = [[WatchLine("ADDED", obj=pod("a", 5)),
                              WatchLine("ADDED", obj=pod("b", 7)),
                              WatchLine("ADDED", obj=pod("x", 8)),
                              initial_events_end(10),
                              WatchLine("ADDED", obj=pod("c", 11)),
                              WatchLine("DELETED", obj=pod("x", 12))]]
    run()
    # One request: the stream's end resumes the watch from the last version; no LIST.
    assert run.transport.calls[0] == ("stream", "/api/v1/pods", "")
    assert run.requests("list") == []
    assert run.requests("watch")[0] == ("watch", "/api/v1/pods", "12")
    assert run.names() == {"a", "b", "c"}
    status = run.watcher.status
    assert status.synced and run.cache.ready and status.relists == 0
    # The state's events are the list's, not the watch's.
    assert status.events["ADDED"] == 1 and status.events["DELETED"] == 1


def test_nothing_of_the_initial_events_is_in_the_cache_before_the_bookmark() -> None:
    """A stream that ends before its bookmark (a server that does not send it) left
    nothing in the cache: the state is listed in pages."""
    run = driver(settings=STREAMS)
    run.transport.streams = [[WatchLine("ADDED", obj=pod("a", 5)),
                              WatchLine("ADDED", obj=pod("b", 7))]]
    run.transport.lists = [TransportError("the API server went away")]
    run()
    assert [c[0] for c in run.transport.calls][:2] == ["stream", "list"]
    assert run.names() == set()
    assert not run.watcher.status.synced and not run.cache.ready


def test_a_refused_streaming_list_is_listed_in_pages() -> None:
    run = driver(settings=STREAMS)
    refused = ApiError(422, "Invalid", 'ListOptions.meta.k8s.io "" is invalid: '
                       "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for "
                       "watch unless the WatchList feature gate is enabled")
    run.transport.streams = [refused]
    run.transport.lists = [ListPage([pod("a", 5)], "10")]
    run.transport.watches = [[WatchLine("ADDED", obj=pod("b", 11))]]
    run()
    assert [c[0] for c in run.transport.calls][:3] == ["stream", "list", "watch"]
    assert run.names() == {"a", "b"}
    assert run.delays[:-1] == []  # a refusal is no failure: listed at once


def test_a_server_error_on_the_streaming_list_backs_off_and_streams_again() -> None:
    run = driver(settings=STREAMS)
    run.transport.streams = [ApiError(503, "ServiceUnavailable", "etcd is busy"),
                             [WatchLine("ADDED", obj=pod("a", 5)), initial_events_end(10)]]
    run()
    assert run.requests("list") == []
    assert run.names() == {"a"}
    assert len(run.delays) == 2  # the backoff, then the one that ends the script


def test_a_410_on_the_watch_streams_the_state_again_and_drops_what_is_gone() -> None:
    run = driver(settings=STREAMS)
    gone = kube.Status(code=410, reason="Expired", message="too old resource version")
    run.transport.streams = [
        [WatchLine("ADDED", obj=pod("a", 5)), WatchLine("ADDED", obj=pod("b", 6)),
         initial_events_end(10), WatchLine("ERROR", status=gone)],
        [WatchLine("ADDED", obj=pod("b", 6)), WatchLine("ADDED", obj=pod("c", 30)),
         initial_events_end(31)]]
    run()
    assert run.names() == {"b", "c"}
    assert run.watcher.status.relists == 1
    assert [c[0] for c in run.transport.calls] == ["stream", "stream", "watch"]


def test_a_pods_deletion_is_published_at_once() -> None:
    """Changes that come while a publish is not due yet wait for it, but a pod's deletion
    goes at once: KubeRay replaces a deleted pod at once, and the webhook must count the
    replacement's group without the pod it replaces."""
    cache = ClusterCache(PolicyConfig(), "test")
    writer = CacheWriter(cache, SyncStatus([POD]), publish_interval=3600.0, freeze_gc=False)
    published = threading.Semaphore(0)
    cache.add_listener(lambda _: published.release())
    thread = threading.Thread(target=writer.run, daemon=True)
    thread.start()
    try:
        a, b = (PodView(n, "ray", n, labels={"ray.io/cluster": "rc"}) for n in ("a", "b"))
        writer.replace(POD, [("1", a), ("1", b)], "1")
        assert published.acquire(timeout=10)  # the first, after a quiet spell: at once
        writer.change(POD, "MODIFIED", a.uid, "2", a)
        assert not published.acquire(timeout=0.2), "not due for an hour"
        writer.change(POD, "DELETED", b.uid, "3", b)
        assert published.acquire(timeout=10), "the deletion is published at once"
        assert cache.snapshot.pod(b.uid) is None and cache.snapshot.pod(a.uid) is not None
    finally:
        writer.stop()
        thread.join(timeout=10)
