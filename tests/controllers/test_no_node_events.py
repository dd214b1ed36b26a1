"""``NoNodeComingEvents``: a warning on each pod its node autoscaler will bring no node
for, told once per verdict, by the leader; over the admission scenarios' pods with
Karpenter's and Cluster Autoscaler's own events."""

from __future__ import annotations

from raygate.policy.admission import PodState, admission_status
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.controllers.events import EventRecorder
from raygate.server.controllers.no_node_events import NoNodeComingEvents
from raygate.server.metrics.registry import Metrics
from testkit.builders import T0_EPOCH
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, snapshot_of
from tests.controllers.event_api import FakeEventApi, taken

NO_NODE = {"auto-ca-no", "auto-no-pool", "auto-stranded"}
CONFIG = PolicyConfig()


def world(*, leading: bool = True) -> tuple[ClusterCache, NoNodeComingEvents, FakeEventApi,
                                            EventRecorder]:
    cache = ClusterCache(CONFIG, "test")
    cache.publish(snapshot_of(*sc.node_autoscaler(), config=CONFIG))
    api, clock = FakeEventApi(), FakeClock(T0_EPOCH)
    recorder = EventRecorder(api, Metrics(), "raygate-0", clock=clock)
    return cache, NoNodeComingEvents(cache, clock, recorder, leading=lambda: leading), \
        api, recorder


def said(recorder: EventRecorder, api: FakeEventApi) -> dict[str, dict[str, object]]:
    recorder.write(*taken(recorder))
    return {str(b["regarding"]["name"]): b for b in api.events.values()}


def test_each_pod_with_no_node_coming_is_warned_once_in_its_states_words() -> None:
    cache, outlook, api, recorder = world()
    assert outlook.check() == len(NO_NODE)
    events = said(recorder, api)
    assert set(events) == NO_NODE
    snap = cache.snapshot
    cluster = snap.raycluster("ray", "auto")
    assert cluster is not None
    states = {p.name: p for p in admission_status(cluster, snap, snap.config,
                                                  T0_EPOCH).status.pods}
    for name, body in events.items():
        assert states[name].state is PodState.NO_NODE_COMING
        assert (body["reason"], body["type"]) == ("NoNodeComing", "Warning")
        assert str(body["note"]) in states[name].reason  # the admission API's own words
    cache.publish(snapshot_of(*sc.node_autoscaler(), config=CONFIG))  # the same verdicts again
    assert outlook.check() == 0


def test_a_replica_that_does_not_lead_says_nothing() -> None:
    _, outlook, api, recorder = world(leading=False)
    assert outlook.check() == 0
    assert said(recorder, api) == {}
