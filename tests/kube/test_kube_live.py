"""raygate following a cluster: the real ``kubernetes`` client, through a generated
kubeconfig, against the API-server double (``testkit/apiserver.py``) on loopback.

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
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.model import GroupKey
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.keys import KINDS, key_of
from raygate.server.cache.snapshot import Snapshot
from raygate.server.fronts.scheduler import HostPriorities
from raygate.server.kube.client import KubeTransport, load_connection
from raygate.server.kube.source import LiveSource
from raygate.server.kube.transport import BackoffPolicy, WatchSettings
from testkit.apiserver import CORE, CRDS, ApiServerDouble, kubeconfig_text
from testkit.builders import (
    Obj,
    make_event,
    make_node,
    make_nodeclaim,
    make_pod,
    make_raycluster,
)
from tests.conftest import FakeClock, ServerThread, post_json

NODES, PODS, EVENTS = CORE
RAYCLUSTERS, PODGROUPS, WORKLOADS_V1BETA2, WORKLOADS_V1BETA1, NODECLAIMS = CRDS
WAIT = 20.0  # seconds: generous, only spent when something is broken
NO_DRA = ["DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"]
"""The DRA kinds, absent from a double that does not serve resource.k8s.io (in the order
raygate follows its kinds: what makes a GPU node first, the claims last)."""
GANGS = "PodGroup.scheduling.k8s.io"  # Kubernetes' own gangs: not served by default

FAST = WatchSettings(page_size=2, rediscover_seconds=0.05, request_timeout=10.0,
                     backoff=BackoffPolicy(initial=0.01, maximum=0.05), freeze_gc=False,
                     stream_list=True)
"""The streaming list where the double serves it (it does unless told not to)."""
PAGES = replace(FAST, stream_list=False)
"""LIST pages only, raygate's default."""


class Live:
    """A double, raygate's live source following it, and helpers to wait on both."""

    def __init__(self, tmp_path: Path, settings: WatchSettings = FAST, **double: Any) -> None:
        self.double = ApiServerDouble(**double).start()
        self.double.install(RAYCLUSTERS)
        self.double.install(PODGROUPS)
        self.kubeconfig = self.double.kubeconfig(tmp_path / "kubeconfig")
        self.cache = ClusterCache(PolicyConfig(), "double")
        self.settings = settings
        self.source: LiveSource | None = None
        self._changed = threading.Condition()
        self.cache.add_listener(self._notify)
        # Status counters change without a publish: wake the waiters every 10 ms too.
        self._ticking = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._ticking.wait(0.01):
            self._notify(self.cache.snapshot)

    def _notify(self, _: Snapshot) -> None:
        with self._changed:
            self._changed.notify_all()

    def start(self, kubeconfig: Path | None = None) -> LiveSource:
        connection = load_connection(str(kubeconfig or self.kubeconfig), None, {})
        transport = KubeTransport(connection, self.settings)
        self.source = LiveSource(self.cache, transport, self.settings)
        self.source.start()
        self.wait(lambda: self.cache.ready, "the first sync")
        served = sum(1 for c in (*CORE, *CRDS) if self.double.served(c))
        self.wait(lambda: self.double.open_watches() == served, "a watch of each kind")
        return self.source

    def stop(self) -> None:
        if self.source is not None:
            self.source.stop()
        self.double.stop()
        self._ticking.set()
        self._ticker.join()

    def wait(self, done: Callable[[], bool], what: str) -> None:
        with self._changed:
            if not self._changed.wait_for(done, timeout=WAIT):
                raise AssertionError(f"timed out waiting for {what}")

    def wait_snapshot(self, done: Callable[[Snapshot], bool], what: str) -> None:
        self.wait(lambda: done(self.cache.snapshot), what)

    def kind(self, kind: str) -> Any:
        assert self.cache.sync is not None
        return self.cache.sync.kinds[kind]

    def converged(self) -> bool:
        return cache_state(self.cache.snapshot) == double_state(self.double)

    def wait_converged(self) -> None:
        try:
            self.wait(self.converged, "the cache to match the API server")
        except AssertionError:
            assert cache_state(self.cache.snapshot) == double_state(self.double)
            raise


def double_state(double: ApiServerDouble) -> dict[str, dict[Any, str]]:
    """{kind: {cache key: resourceVersion}} of what the API server holds."""
    out: dict[str, dict[Any, str]] = {kind: {} for kind in KINDS}
    for collection in (*CORE, *CRDS):
        if not double.served(collection):
            continue
        for (namespace, name), obj in double.objects(collection).items():
            meta = obj["metadata"]
            key: Any = meta["uid"] if collection.kind == "Pod" else (
                name if collection.kind in ("Node", "NodeClaim") else (namespace, name))
            out[collection.kind][key] = meta["resourceVersion"]
    return out


def cache_state(snap: Snapshot) -> dict[str, dict[Any, str]]:
    out: dict[str, dict[Any, str]] = {kind: {} for kind in KINDS}
    objects = snap.objects
    for kind, views in (("Node", objects.nodes), ("Pod", objects.pods),
                        ("RayCluster", objects.rayclusters), ("PodGroup", objects.podgroups),
                        ("Workload", objects.workloads)):
        for view in views:
            entry = snap.version_of(kind, key_of(view))
            assert entry is not None
            out[kind][key_of(view)] = entry[0]
    return out


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    live = Live(tmp_path)
    yield live
    live.stop()


def populate(double: ApiServerDouble) -> None:
    double.create(make_node("cpu-1").obj())
    double.create(make_node("cpu-2").obj())
    double.create(make_node("gpu-1").gpus(8).obj())
    double.create(make_raycluster("rc").autoscaling().group("workers", min=2, max=10).obj())
    double.create(make_pod("rc-head").head("rc").on("cpu-1").obj())
    for i in range(3):
        double.create(make_pod(f"web-{i}", "default").on("cpu-2").obj())


def worker(name: str, node: str | None = None) -> Obj:
    builder = make_pod(name).ray("rc", "workers").requests(cpu="1")
    return (builder.on(node) if node else builder).obj()


def gpu_refused(server: ServerThread, pod: Obj) -> bool:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        reply = post_json(client, "/scheduler/filter",
                          {"Pod": pod, "NodeNames": ["cpu-1", "cpu-2", "gpu-1"]})
    body = reply.json()
    return "gpu-1" in body["FailedAndUnresolvableNodes"]


@pytest.mark.parametrize(("stream_list", "watch_list"), [(True, True), (True, False),
                                                        (False, True)],
                         ids=["streamed", "refused-so-in-pages", "in-pages"])
def test_initial_sync_then_readyz_reports_each_kind(live: Live, stream_list: bool,
                                                    watch_list: bool) -> None:
    """By the streaming list where asked for and served, else by LIST pages."""
    populate(live.double)
    live.settings = FAST if stream_list else PAGES
    live.double.watch_list = watch_list
    live.double.list_delay = 0.02  # a slow API server: every page waits
    server = ServerThread(live.cache, FakeClock())
    server.start()
    try:
        with httpx.Client(base_url=server.url) as client:
            before = client.get("/readyz")
            assert before.status_code == 503 and before.json()["status"] == "not-ready"
            live.start()
            reply = client.get("/readyz")
        assert reply.status_code == 200
        body = reply.json()
        assert body["objects"] == {
            "deviceclasses": 0, "resourceslices": 0, "nodes": 3, "pods": 4, "rayclusters": 1,
            "podgroups": 0, "gang_groups": 0, "workloads": 0, "events": 0, "nodeclaims": 0,
            "resourceclaims": 0, "resourceclaimtemplates": 0}
        assert body["absent"] == [*NO_DRA[:2], GANGS, "Workload", "NodeClaim", *NO_DRA[2:]]
        kinds = body["kinds"]
        assert kinds["Pod"]["synced"] and kinds["Pod"]["objects"] == 4
        assert kinds["Pod"]["resource"] == "pods.v1"
        assert kinds["RayCluster"]["resource"] == "rayclusters.v1.ray.io"
        assert kinds["Workload"]["state"] == "absent" and not kinds["Workload"]["synced"]
        assert kinds["Node"]["lastEventAgeSeconds"] >= 0
    finally:
        server.stop()
    asked = [q for path, q in live.double.requests if path == PODS.path]
    streamed = [q for q in asked if q.get("sendInitialEvents") == "true"]
    # The streaming list is asked for once; refused, LIST pages of 2: the 4 pods took a
    # first request and a continue. Served, its stream goes on as the watch.
    streaming = stream_list and watch_list
    assert len(streamed) == (1 if stream_list else 0)
    assert all(q["resourceVersionMatch"] == "NotOlderThan" and "resourceVersion" not in q
               for q in streamed)
    assert sum(1 for q in asked if q.get("watch") != "true") == (0 if streaming else 2)
    assert live.double.watch_requests(PODS) == 2 - streaming - (not stream_list)
    assert live.converged()


def test_add_modify_delete_events_change_filter_answers(live: Live) -> None:
    populate(live.double)
    live.start()
    server = ServerThread(live.cache, FakeClock())
    server.start()
    try:
        pending = worker("rc-workers-new")
        group = GroupKey("ray", "rc", "workers")
        # No worker of the group is scheduled: a pending one is floor, kept off GPU nodes.
        assert gpu_refused(server, pending)
        live.double.create(worker("rc-workers-a", "cpu-1"))
        live.double.create(worker("rc-workers-b", "cpu-2"))
        live.wait_snapshot(lambda s: s.scheduled_count(group) == 2, "two scheduled workers")
        assert not gpu_refused(server, pending)  # the floor of 2 is held: it is surplus
        finished = worker("rc-workers-a", "cpu-1")
        finished["status"]["phase"] = "Succeeded"
        live.double.update(finished)
        live.wait_snapshot(lambda s: s.scheduled_count(group) == 1, "a worker finished")
        assert gpu_refused(server, pending)
        live.double.delete(worker("rc-workers-a"))
        live.wait_snapshot(lambda s: len(s.group_pods(group)) == 1, "a worker deleted")
        assert [p.name for p in live.cache.snapshot.pods_on_node("cpu-2")
                if p.is_ray] == ["rc-workers-b"]
    finally:
        server.stop()
    live.wait_converged()
    assert live.kind("Pod").relists == 0


def test_a_dropped_watch_resumes_without_a_relist(live: Live) -> None:
    populate(live.double)
    live.start()
    lists, watches = live.double.list_requests(PODS), live.double.watch_requests(PODS)
    assert live.double.drop_watches() == 5  # nodes, pods, events and two CRDs
    live.double.create(worker("rc-workers-c", "cpu-1"))
    live.wait_snapshot(lambda s: any(p.name == "rc-workers-c" for p in s.pods_on_node("cpu-1")),
                       "the event after the drop")
    assert live.double.list_requests(PODS) == lists
    assert live.double.watch_requests(PODS) > watches
    assert live.kind("Pod").relists == 0
    live.wait_converged()


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event", "http-410"])
def test_a_restart_with_changes_while_down_relists_and_converges(
    tmp_path: Path, gone_as_http: bool,
) -> None:
    live = Live(tmp_path, gone_as_http=gone_as_http)
    try:
        populate(live.double)
        for i in range(5):
            live.double.create(worker(f"rc-workers-{i}", "cpu-1"))
        live.start()
        live.double.stop()
        # While raygate cannot see: pods and a node go, others come, one changes.
        for i in range(3):
            live.double.delete(worker(f"rc-workers-{i}"))
        live.double.delete(make_node("cpu-2").obj())
        live.double.create(worker("rc-workers-9", "gpu-1"))
        moved = worker("rc-workers-4", "gpu-1")
        live.double.update(moved)
        live.double.compact()  # a restarted API server has none of the old versions
        live.double.start()
        live.wait(lambda: live.kind("Pod").relists >= 1 and live.kind("Node").relists >= 1,
                  "the re-lists after 410")
        live.wait_converged()
        snap = live.cache.snapshot
        assert snap.node("cpu-2") is None and "cpu-2" not in HostPriorities().of(snap)
        assert {p.name for p in snap.pods_on_node("gpu-1")} == {"rc-workers-4", "rc-workers-9"}
        assert snap.scheduled_count(GroupKey("ray", "rc", "workers")) == 3
    finally:
        live.stop()


def test_events_streaming_through_a_restart_converge(live: Live) -> None:
    populate(live.double)
    live.start()
    for i in range(40):
        live.double.create(worker(f"rc-workers-{i}", "cpu-1"))
        if i % 10 == 5:
            live.double.restart()
        if i % 3 == 0:
            live.double.delete(worker(f"rc-workers-{i // 2}"))
    live.wait_converged()


def test_an_unknown_event_type_is_skipped(live: Live) -> None:
    populate(live.double)
    live.start()
    weird = json.dumps({"type": "FROBNICATED", "object": worker("rc-workers-x", "cpu-1")})
    assert live.double.send_line(PODS, weird.encode()) == 1
    live.double.create(worker("rc-workers-y", "cpu-1"))
    live.wait_snapshot(lambda s: len(s.pods_on_node("cpu-1")) == 2, "the next event")
    assert live.kind("Pod").events["FROBNICATED"] == 1
    assert live.kind("Pod").relists == 0
    assert live.cache.snapshot.counts()["pods"] == 5


def test_a_crd_absent_at_start_is_followed_once_installed_and_dropped_when_deleted(
    live: Live,
) -> None:
    populate(live.double)
    live.start()
    assert live.cache.sync is not None
    assert live.cache.sync.absent() == [*NO_DRA[:2], GANGS, "Workload", "NodeClaim",
                                        *NO_DRA[2:]]
    live.double.install(WORKLOADS_V1BETA1)  # an older Kueue: v1beta1 only
    live.double.create({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "raycluster-rc-1", "namespace": "ray", "uid": "wl-1",
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                          "name": "rc", "uid": "x", "controller": True}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    })
    live.wait_snapshot(lambda s: len(s.workloads_of("ray", "rc")) == 1, "the new CRD's object")
    assert live.cache.snapshot.workloads_of("ray", "rc")[0].api_version == (
        "kueue.x-k8s.io/v1beta1")
    assert live.cache.sync.absent() == [*NO_DRA[:2], GANGS, "NodeClaim", *NO_DRA[2:]]
    assert live.kind("Workload").resource == "workloads.v1beta1.kueue.x-k8s.io"
    live.double.uninstall(WORKLOADS_V1BETA1)
    live.wait_snapshot(lambda s: s.counts()["workloads"] == 0, "the CRD's objects to go")
    live.wait(lambda: live.cache.sync is not None
              and live.cache.sync.absent() == [*NO_DRA[:2], GANGS, "Workload", "NodeClaim",
                                               *NO_DRA[2:]], "Workload absent again")
    assert live.cache.ready


def test_a_bookmark_lets_a_watch_resume_after_compaction_without_a_relist(live: Live) -> None:
    populate(live.double)
    live.start()
    assert live.source is not None
    pods = next(w for w in live.source.watchers if w.kind == "Pod")
    for i in range(3):  # the version moves on, with no pod event
        live.double.create(make_node(f"extra-{i}").obj())
    assert live.double.bookmark(PODS) == 1
    version = str(live.double.resource_version)
    live.wait(lambda: pods.resource_version == version, "the bookmark")
    live.double.compact()
    live.double.drop_watches(PODS)
    live.double.create(worker("rc-workers-z", "cpu-2"))
    live.wait_snapshot(lambda s: any(p.name == "rc-workers-z" for p in s.pods_on_node("cpu-2")),
                       "the event after the resumed watch")
    assert live.kind("Pod").relists == 0


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


def test_stop_closes_every_watch(live: Live) -> None:
    populate(live.double)
    source = live.start()
    assert live.double.open_watches() == 5
    source.stop()
    live.wait(lambda: live.double.open_watches() == 0, "the watches to close")
    assert not any(t.is_alive() for t in source._threads)


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


def test_only_the_node_autoscalers_pod_events_reach_the_cache(live: Live) -> None:
    """Pod events are asked with ``involvedObject.kind=Pod``; of those, the cache keeps
    Karpenter's and Cluster Autoscaler's words about Ray pods, and follows NodeClaims
    once their CRD is served."""
    populate(live.double)
    pending = worker("rc-workers-p")
    live.double.create(pending)
    live.start()
    live.double.create(make_event(pending, "Pulling", 'Pulling image "ray"',
                                  component="kubelet"))
    live.double.create(make_event(pending, "Nominated",
                                  "Pod should schedule on: nodeclaim/default-x7k2p"))
    live.wait_snapshot(lambda s: s.pod_event(pending["metadata"]["uid"]) is not None,
                       "Karpenter's event")
    assert live.cache.snapshot.counts()["events"] == 1
    assert all(query.get("fieldSelector") == "involvedObject.kind=Pod"
               for path, query in live.double.requests if path == EVENTS.path)
    live.double.install(NODECLAIMS)
    live.double.create(make_nodeclaim("default-x7k2p"))
    live.wait_snapshot(lambda s: s.follows_node_claims() and s.node_claim("default-x7k2p")
                       is not None, "the NodeClaim")


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
