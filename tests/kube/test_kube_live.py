"""raygate following a cluster: the real ``kubernetes`` client, through a generated
kubeconfig, against the API-server double (``testkit/apiserver.py``) on loopback — the
first sync, events, dropped watches, restarts, CRDs that come and go, bookmarks, stop.

Nothing here waits for time to pass: each test waits (generously) for the cache to
show what it must, and the retry delays are injected small.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from raygate.policy.model import GroupKey
from raygate.server.fronts.scheduler import HostPriorities
from testkit.builders import (
    Obj,
    make_event,
    make_node,
    make_nodeclaim,
)
from tests.conftest import FakeClock, ServerThread, post_json
from tests.kube.live import (
    EVENTS,
    FAST,
    GANGS,
    NO_DRA,
    NODECLAIMS,
    PAGES,
    PODS,
    WORKLOADS_V1BETA1,
    Live,
    populate,
    worker,
)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    live = Live(tmp_path)
    yield live
    live.stop()


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


def test_stop_closes_every_watch(live: Live) -> None:
    populate(live.double)
    source = live.start()
    assert live.double.open_watches() == 5
    source.stop()
    live.wait(lambda: live.double.open_watches() == 0, "the watches to close")
    assert not any(t.is_alive() for t in source._threads)


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
