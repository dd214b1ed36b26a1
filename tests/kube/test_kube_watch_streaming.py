"""The list/watch driver's streaming list (a watch with ``sendInitialEvents``) against a
scripted API server: no sockets, no waiting."""

from __future__ import annotations

from raygate.server.kube.decode import Decoders, decode_line
from raygate.server.kube.transport import (
    ApiError,
    ListPage,
    TransportError,
    WatchLine,
)
from raygate.server.wire import kube
from tests.kube.scripted import STREAMS, driver, pod


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
