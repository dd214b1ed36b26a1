"""raygate's connection to the API server, against the double (``testkit/apiserver.py``)
on loopback: read timeouts, events split across chunks, exec-plugin credentials, a wrong
token, an unreachable server, a streaming list that never ends its initial events,
compressed replies.

Nothing here waits for time to pass: each test waits (generously) for the cache to
show what it must, and the retry delays are injected small.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from raygate.server.kube.client import KubeTransport, load_connection
from raygate.server.kube.source import LiveSource
from raygate.server.kube.transport import BackoffPolicy, WatchSettings
from testkit.apiserver import CORE, CRDS, kubeconfig_text
from tests.kube.live import FAST, NODES, PODS, WAIT, Live, populate, worker


def test_a_silent_watch_is_cut_by_the_read_timeout(tmp_path: Path) -> None:
    settings = WatchSettings(page_size=50, read_timeout=0.3, request_timeout=10.0,
                             rediscover_seconds=0.05, freeze_gc=False,
                             backoff=BackoffPolicy(initial=0.01, maximum=0.05))
    live = Live(tmp_path, settings)
    try:
        populate(live.double)
        live.start()
        errors = live.kind("Pod").errors
        live.double.stall()
        live.double.create(worker("rc-workers-s", "cpu-1"))
        live.wait(lambda: live.kind("Pod").errors > errors, "the read timeout")
        assert "timed out" in live.kind("Pod").last_error.lower()
        live.double.stall(False)
        live.wait_snapshot(lambda s: len(s.pods_on_node("cpu-1")) == 2, "the stalled event")
        assert live.kind("Pod").relists == 0
    finally:
        live.stop()


def test_events_split_across_chunks_are_joined(tmp_path: Path) -> None:
    live = Live(tmp_path, split_lines=True)
    try:
        populate(live.double)
        live.start()
        for i in range(5):
            live.double.create(worker(f"rc-workers-{i}", "cpu-2"))
        live.wait_converged()
    finally:
        live.stop()


def test_credentials_from_an_exec_plugin(tmp_path: Path) -> None:
    live = Live(tmp_path)
    try:
        populate(live.double)
        credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                                 "kind": "ExecCredential",
                                 "status": {"token": live.double.token}})
        kubeconfig = live.double.kubeconfig(
            tmp_path / "exec-kubeconfig",
            exec_command=[sys.executable, "-c", f"print({credential!r})"])
        live.start(kubeconfig)
        assert live.converged()
    finally:
        live.stop()


def test_a_wrong_token_is_an_error_reported_per_kind(tmp_path: Path) -> None:
    live = Live(tmp_path)
    try:
        live.double.token = "another-token"
        connection = load_connection(str(live.kubeconfig), None, {})
        source = LiveSource(live.cache, KubeTransport(connection, FAST), FAST)
        live.source = source
        source.start()
        live.wait(lambda: live.kind("Node").errors > 0, "an auth error")
        assert "401" in live.kind("Node").last_error
        assert not live.cache.ready
    finally:
        live.stop()


def test_an_unreachable_api_server_is_one_line_until_it_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Every kind retrying against a port nothing listens on: one warning (no urllib3
    retry storm below it), then one line when the API server is there."""
    with socket.socket() as probe:  # a port nothing listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    live = Live(tmp_path)  # its double listens elsewhere until restarted on the port below
    kubeconfig = tmp_path / "unreachable-kubeconfig"
    kubeconfig.write_text(kubeconfig_text(f"http://127.0.0.1:{port}", "raygate-test-token"))
    caplog.set_level(logging.DEBUG, logger="raygate")
    caplog.set_level(logging.DEBUG, logger="urllib3")
    try:
        connection = load_connection(str(kubeconfig), None, {})
        source = LiveSource(live.cache, KubeTransport(connection, FAST), FAST)
        live.source = source
        source.start()
        # Each kind fails again and again (backoff 10-50 ms with the FAST settings).
        live.wait(lambda: all(live.kind(k).errors >= 5 for k in ("Node", "Pod")),
                  "repeated connection failures")
        assert source.reachability.failures >= 10
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.getMessage().split(" (")[0] for r in warnings] == [
            "no answer from the API server"], [r.getMessage() for r in warnings]
        assert "Connection refused" in warnings[0].getMessage()
        # urllib3 makes one attempt per request: no retries, so no "Retrying" warnings.
        assert not [r for r in caplog.records
                    if r.name.startswith("urllib3") and "Retrying" in r.getMessage()]

        live.double.stop()
        live.double.port = port
        live.double.start()
        live.wait(lambda: live.cache.ready, "the sync once the API server answers")
        back = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith("the API server answers again")]
        assert len(back) == 1, back
        assert re.fullmatch(r"the API server answers again, after [\d.]+s and \d+ failed "
                            r"attempts", back[0])
        assert source.reachability.down_since is None
        assert [r.getMessage().split(" (")[0] for r in caplog.records
                if r.levelno >= logging.WARNING] == ["no answer from the API server"]
    finally:
        live.stop()


@pytest.mark.parametrize("how", ["another-bookmark-first", "the-stream-ends"])
def test_a_streaming_list_whose_initial_events_never_end_is_listed_in_pages(
    tmp_path: Path, how: str,
) -> None:
    """A server that takes the streaming list's parameters but never sends the bookmark
    that ends the initial events: each kind is listed in pages as soon as it shows (a
    periodic bookmark, or the end of the stream), and nothing is ready before."""
    live = Live(tmp_path)
    try:
        populate(live.double)
        live.double.initial_events_end = False
        starting = threading.Thread(target=live.start, daemon=True)
        starting.start()
        served = sum(1 for c in (*CORE, *CRDS) if live.double.served(c))
        live.wait(lambda: live.double.open_watches() == served, "a streaming list of each kind")
        assert not live.cache.ready
        if how == "another-bookmark-first":
            assert live.double.bookmark() == served
        else:
            assert live.double.end_watches() == served
        starting.join(WAIT)
        assert live.cache.ready
        assert live.double.list_requests(PODS) == 1  # pages of 2 (continues not counted)
        live.wait_converged()
    finally:
        live.stop()


def test_the_double_writes_the_initial_events_end_bookmark_as_kube_apiserver() -> None:
    """kube-apiserver 1.37's bytes, read from one (the pods and nodes of a fresh cluster)."""
    from testkit.watch_list import bookmark_object

    assert bookmark_object(PODS, 208, initial_events_end=True) == (
        b'{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"208","annotations":'
        b'{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}')
    assert bookmark_object(NODES, 211, initial_events_end=True) == (
        b'{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"211","annotations":'
        b'{"k8s.io/initial-events-end":"true"}},"spec":{},"status":{"daemonEndpoints":'
        b'{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"",'
        b'"bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"",'
        b'"kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}}')


@pytest.mark.parametrize("stream_list", [True, False], ids=["streamed", "in-pages"])
def test_compressed_replies_are_inflated(tmp_path: Path, stream_list: bool) -> None:
    """gzip asked for: the double compresses as kube-apiserver does (LIST replies over
    128 KiB; a streaming list each flush a member of its own) and the cache is the same."""
    live = Live(tmp_path, replace(FAST, page_size=500, compression=True,
                                  stream_list=stream_list))
    try:
        populate(live.double)
        for i in range(250):  # ~0.7 KiB each: a LIST page over 128 KiB
            live.double.create(worker(f"rc-workers-{i}", "cpu-1"))
        live.start()
        assert live.double.compressed >= 1
        live.double.create(worker("rc-workers-late", "cpu-2"))
        live.wait_converged()
        assert live.cache.snapshot.counts()["pods"] == 4 + 251
    finally:
        live.stop()
