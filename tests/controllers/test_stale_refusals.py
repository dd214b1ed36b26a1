"""Stale refusals: a pod filter refused GPU nodes to on a snapshot that a later one
reverses gets one annotation, so kube-scheduler tries it again; over real HTTP, with the
annotation written by a recording double (the e2e scenario writes it to kube-apiserver).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import httpx
import pytest

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.controllers.stale_refusals import ANNOTATION, StaleRefusals
from testkit.builders import T0_EPOCH, Obj, iso, make_node, make_pod, make_raycluster
from tests.conftest import FakeClock, ServerThread, post_json

NODES = [make_node("cpu-1").obj(), make_node("gpu-1").gpus(8).obj()]
NAMES = ["cpu-1", "gpu-1"]
# Group `w`: floor 2. A pending pod is floor while fewer than 2 are scheduled.
CLUSTER = make_raycluster("rc").autoscaling().group("w", replicas=4, min=2, max=8).obj()


def worker(name: str, node: str = "") -> Obj:
    pod = make_pod(name).ray("rc", "w").requests(cpu="1")
    return (pod.on(node) if node else pod).obj()


@dataclass
class Recorder:
    """The annotate function: records each call, or fails when told to."""

    calls: list[tuple[str, str, str, dict[str, str]]] = field(default_factory=list)
    fail: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def __call__(self, namespace: str, name: str, uid: str,
                 annotations: Mapping[str, str]) -> None:
        self.calls.append((namespace, name, uid, dict(annotations)))
        self.done.set()
        if self.fail:
            raise OSError("403 Forbidden")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def served(recorder: Recorder) -> Iterator[ServerThread]:
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock(),
                          annotate_pod=recorder)
    thread.start()
    yield thread
    thread.stop()


def refused(server: ServerThread, pod: Obj) -> bool:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        reply = post_json(client, "/scheduler/filter",
                          {"Pod": pod, "Nodes": None, "NodeNames": NAMES}).json()
    return "gpu-1" in reply["FailedAndUnresolvableNodes"]


def settle(server: ServerThread) -> None:
    """Let the server's loop run the check the last publish scheduled."""
    time.sleep(0.3)
    stale = server.server.services.follower(StaleRefusals)
    assert stale is not None
    server.loop.call_soon_threadsafe(stale.check)
    time.sleep(0.1)


def metric(server: ServerThread, result: str) -> float:
    with httpx.Client(base_url=server.url) as client:
        text = client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith("raygate_requeue_nudges_total{") and f'result="{result}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def eventually(probe: Callable[[], bool]) -> bool:
    """``probe`` true within 10 s (the loop counts a patch's result when it ends)."""
    for _ in range(200):
        if probe():
            return True
        time.sleep(0.05)
    return False


@dataclass
class Case:
    id: str
    before: list[Obj]
    """What raygate sees when filter refuses ``subject``."""
    after: list[Obj]
    """What it sees next."""
    nudged: bool
    clock: float = 0.0
    """Seconds the clock moves between the two."""


SUBJECT = worker("late")
# The floor met, and a surplus worker of the group preempted on a GPU node at T0: SUBJECT
# is under the thrash guard for 300 s.
GUARDED = [worker("f1", "cpu-1"), worker("f2", "cpu-1"),
           make_pod("gone").ray("rc", "w").requests(cpu="1").on("gpu-1")
           .preempted(iso(T0_EPOCH)).obj(), SUBJECT]
CASES = [
    Case("the floor filled meanwhile: asked again",
         [worker("f1"), worker("f2"), SUBJECT],
         [worker("f1", "cpu-1"), worker("f2", "cpu-1"), SUBJECT], nudged=True),
    Case("the floor still short: not asked",
         [worker("f1"), worker("f2"), SUBJECT],
         [worker("f1", "cpu-1"), worker("f2"), SUBJECT], nudged=False),
    Case("the pod was bound meanwhile: forgotten",
         [worker("f1"), SUBJECT], [worker("f1", "cpu-1"), worker("late", "cpu-1")],
         nudged=False),
    Case("the RayCluster appeared and the floor is met: asked again",
         [SUBJECT], [CLUSTER, worker("f1", "cpu-1"), worker("f2", "cpu-1"), SUBJECT],
         nudged=True),
    Case("the thrash guard ended: asked again", GUARDED, GUARDED, nudged=True, clock=301),
    Case("the thrash guard still on: not asked", GUARDED, GUARDED, nudged=False, clock=100),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_refusal_a_later_snapshot_reverses_is_asked_again(
    case: Case, served: ServerThread, recorder: Recorder
) -> None:
    with_cluster = [] if case.id.startswith("the RayCluster appeared") else [CLUSTER]
    served.publish(*NODES, *with_cluster, *case.before)
    assert refused(served, SUBJECT)
    served.clock.now += case.clock
    served.publish(*NODES, CLUSTER, *case.after)
    settle(served)
    meta = SUBJECT["metadata"]
    if case.nudged:
        assert recorder.done.wait(10)
        assert [c[:3] for c in recorder.calls] == [
            (meta["namespace"], meta["name"], meta["uid"])]
        assert list(recorder.calls[0][3]) == [ANNOTATION]
        assert eventually(lambda: metric(served, "patched") == 1)
    else:
        assert recorder.calls == []
    # Once asked (or forgotten), never again: another publish changes nothing.
    calls = len(recorder.calls)
    served.publish(*NODES, CLUSTER, *case.after)
    settle(served)
    assert len(recorder.calls) == calls


def test_a_failed_patch_is_counted_and_logged_not_retried(
    served: ServerThread, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    recorder.fail = True
    served.publish(*NODES, CLUSTER, worker("f1"), worker("f2"), SUBJECT)
    assert refused(served, SUBJECT)
    served.publish(*NODES, CLUSTER, worker("f1", "cpu-1"), worker("f2", "cpu-1"), SUBJECT)
    settle(served)
    assert recorder.done.wait(10)
    assert eventually(lambda: metric(served, "failed") == 1)
    assert "could not ask kube-scheduler to try it again" in caplog.text
    served.publish(*NODES, CLUSTER, worker("f1", "cpu-1"), worker("f2", "cpu-1"), SUBJECT)
    settle(served)
    assert len(recorder.calls) == 1


def test_the_table_is_bounded(served: ServerThread, recorder: Recorder) -> None:
    stale = served.server.services.follower(StaleRefusals)
    assert stale is not None
    stale.limit = 3
    pods = [worker(f"p{i}") for i in range(5)]
    served.publish(*NODES, CLUSTER, *pods)
    for pod in pods:
        assert refused(served, pod)
    assert len(stale) == 3


def test_off_without_an_annotate_function(server: ServerThread, client: httpx.Client) -> None:
    """No cluster to write to (the demo, snapshot files) or `requeue.staleRefusals: off`:
    nothing is remembered."""
    server.publish(*NODES, CLUSTER, worker("f1"), SUBJECT)
    assert server.server.services.follower(StaleRefusals) is None
    reply = post_json(client, "/scheduler/filter",
                      {"Pod": SUBJECT, "Nodes": None, "NodeNames": NAMES}).json()
    assert "gpu-1" in reply["FailedAndUnresolvableNodes"]
