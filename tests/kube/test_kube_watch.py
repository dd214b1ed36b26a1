"""The list/watch driver against a scripted API server: no sockets, no waiting.

Each test scripts what the transport answers (pages, watches, errors), runs the driver
in the test's thread until the script runs out, then reads the cache and the requests.
"""

from __future__ import annotations

import random
import threading

import msgspec
import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.model import PodView
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.keys import POD
from raygate.server.cache.sync import SyncStatus
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
from raygate.server.wire import kube
from tests.kube.scripted import WORKLOADS, bookmark, driver, pod, workload


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
