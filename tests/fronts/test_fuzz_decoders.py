"""Fuzzing the JSON decoders directly, in process (Hypothesis): arbitrary bytes, any JSON
value, and valid documents mutated (``tests.fronts.attack_bodies``' strategies). Each
decoder may refuse its input only with its documented error, never with anything else:

* the request handlers (kube-scheduler, Volcano, explain, the webhook): ``BadRequest``,
  which ``raygate.server.http.routes.reply_for`` turns into the peer's own error reply;
* the wire decoders under them: ``msgspec.DecodeError`` (``ValidationError`` is one);
* the list/watch decoders (``raygate.server.kube.client``): ``TransportError`` for a reply that
  is not a list or an event; an object that does not decode is set aside, not raised;
  its conversion to a policy view: ``ConversionError``;
* snapshot files: ``SnapshotError``, with the file and item in its message.

Bodies nest at most a few hundred levels: deeper ones hit a known bug (RecursionError,
``tests/fronts/test_attack_routes.py::test_deep_nesting_is_bad_input``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raygate.contract.errors import BadRequest
from raygate.policy.config import PolicyConfig
from raygate.server.cache import convert
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot_files import SnapshotError, demo_text, load_text
from raygate.server.fronts import webhook
from raygate.server.fronts.admission.http import wait_timeout
from raygate.server.fronts.explain.http import ExplainHttp
from raygate.server.fronts.explain.service import ExplainService
from raygate.server.fronts.scheduler import SchedulerExtender
from raygate.server.fronts.volcano import VolcanoExtender
from raygate.server.kube.decode import Decoders, decode_line, decode_page
from raygate.server.kube.resources import RESOURCES
from raygate.server.kube.transport import TransportError
from raygate.server.metrics.registry import Metrics
from raygate.server.wire import DECODE_ERRORS
from raygate.server.wire import scheduler as wire
from testkit.builders import T0_EPOCH, make_node, make_pod, make_raycluster, object_list
from tests.fronts.attack_bodies import SEEDS, bodies, encode, mutated

FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

_config = PolicyConfig()
_cache = ClusterCache(_config, "demo")
_cache.publish(build_snapshot(load_text(demo_text(), "demo"), _config))
_clock = lambda: T0_EPOCH + 40 * 60  # noqa: E731 - the demo's own moment (conftest)
_scheduler = SchedulerExtender(_cache, _clock)
_volcano = VolcanoExtender(_cache, _clock)
_explain = ExplainHttp(ExplainService(_cache, _clock))

HANDLERS: dict[str, tuple[Callable[[bytes], bytes], list[Any]]] = {
    "scheduler filter": (_scheduler.filter, SEEDS["/scheduler/filter"]),
    "scheduler prioritize": (_scheduler.prioritize, SEEDS["/scheduler/prioritize"]),
    "scheduler preempt": (_scheduler.preempt, SEEDS["/scheduler/preempt"]),
    "volcano predicate": (_volcano.predicate, SEEDS["/volcano/predicate"]),
    "volcano prioritize": (_volcano.prioritize, SEEDS["/volcano/prioritize"]),
    "volcano victims": (_volcano.victims, SEEDS["/volcano/preemptable"]),
    "volcano jobEnqueueable": (_volcano.job_enqueueable, SEEDS["/volcano/jobEnqueueable"]),
    "explain": (_explain.post, SEEDS["/v1/explain"]),
    "webhook": (webhook.RayPodWebhook(_cache, Metrics(), place=True, marker=True,
                                      clock=_clock).mutate, [{
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE",
                    "object": make_pod("w").ray("rc", "g").requests(cpu="1").obj()}}]),
}


def _strict_json(body: bytes) -> bool:
    """Is ``body`` JSON as a Go peer writes it (UTF-8, numbers in range)? The filter's
    NodeList items and Volcano's evictees are echoed byte for byte (``msgspec.Raw``, not
    validated), so only then must the reply be strict JSON too."""
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(HANDLERS))
def test_request_handlers_refuse_only_with_bad_request(name: str) -> None:
    handler, seeds = HANDLERS[name]

    @FUZZ
    @given(body=bodies(seeds))
    def fuzz(body: bytes) -> None:
        try:
            reply = handler(body)
        except BadRequest as exc:
            refusal = str(exc)
        else:
            if _strict_json(body):
                msgspec.json.decode(reply)  # what it answers is JSON
            return
        assert refusal, "a refusal says why"

    fuzz()


@FUZZ
@given(body=bodies(SEEDS["/scheduler/filter"] + SEEDS["/scheduler/preempt"]))
def test_scheduler_envelopes_decode_or_raise_decode_error(body: bytes) -> None:
    for decode in (wire.decode_filter_args, wire.decode_preempt_args):
        with contextlib.suppress(*DECODE_ERRORS):
            decode(body)


@FUZZ
@given(raw=st.text(max_size=20))
def test_long_poll_timeouts_parse_or_are_bad_requests(raw: str) -> None:
    try:
        seconds = wait_timeout(raw)
    except BadRequest:
        return
    assert 0 <= seconds <= 300


# --- list/watch: what the API server sends --------------------------------------------------

OBJECTS: dict[str, list[Any]] = {
    "Node": [make_node("n1").gpus(4).obj(), make_node("n2").obj()],
    "Pod": [make_pod("w1").ray("rc", "g").requests(cpu="2").on("n1").obj(),
            make_pod("h").head("rc").requests(cpu="1").preempted().obj()],
    "RayCluster": [make_raycluster("rc").autoscaling().group("g", replicas=2, min=1, max=4,
                                                             hosts=2).obj()],
    "PodGroup": [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                  "metadata": {"name": "ray-rc-pg", "namespace": "ray", "uid": "pg-1",
                               "resourceVersion": "7"},
                  "spec": {"minMember": 3}, "status": {"phase": "Inqueue", "running": 1}}],
    "Workload": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                  "metadata": {"name": "rc-wl", "namespace": "ray", "uid": "wl-1"},
                  "spec": {"podSets": [{"name": "head", "count": 1}]},
                  "status": {"conditions": [{"type": "Admitted", "status": "True"}]}}],
}
RESOURCE = {r.kind: r for r in RESOURCES}


def _view_or_conversion_error(kind: str, obj: Any) -> None:
    with contextlib.suppress(convert.ConversionError):
        RESOURCE[kind].view(obj)


@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_watch_lines_decode_or_are_transport_errors(kind: str) -> None:
    decoders = Decoders(RESOURCE[kind].wire)
    events = [{"type": t, "object": o} for t in ("ADDED", "MODIFIED", "DELETED")
              for o in OBJECTS[kind]]
    events.append({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                                               "code": 410, "reason": "Expired"}})

    @FUZZ
    @given(line=bodies(events))
    def fuzz(line: bytes) -> None:
        try:
            event = decode_line(line, decoders)
        except TransportError:
            return
        if event.obj is not None and event.type in ("ADDED", "MODIFIED"):
            _view_or_conversion_error(kind, event.obj)

    fuzz()


@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_list_pages_decode_or_are_transport_errors(kind: str) -> None:
    decoders = Decoders(RESOURCE[kind].wire)
    page = {"apiVersion": "v1", "kind": f"{kind}List",
            "metadata": {"resourceVersion": "42", "continue": "abc"}, "items": OBJECTS[kind]}

    @FUZZ
    @given(data=bodies([page]))
    def fuzz(data: bytes) -> None:
        try:
            listed = decode_page(data, decoders)
        except TransportError:
            return
        for obj in listed.items:
            _view_or_conversion_error(kind, obj)

    fuzz()


# --- snapshot files ----------------------------------------------------------------------------

SNAPSHOT = object_list(*(o for objs in OBJECTS.values() for o in objs))


def _yaml_of(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc)


@pytest.mark.parametrize("metadata", [True, 5, [1], "x"])
def test_metadata_not_a_mapping_is_a_snapshot_error(metadata: Any) -> None:
    pod = make_pod("w").obj()
    pod["metadata"] = metadata
    with pytest.raises(SnapshotError):
        load_text(json.dumps(object_list(pod)), "bad.yaml")


@FUZZ
@given(text=st.one_of(
    mutated([SNAPSHOT]).map(lambda b: b.decode("utf-8", "replace")),
    st.text(max_size=200),
    st.just(_yaml_of(SNAPSHOT)).flatmap(lambda y: st.integers(0, len(y)).map(
        lambda cut: y[:cut])),
    st.sampled_from(["- a\n- b", "--- !!python/object:os.system\n", "a: &x [*x]", "{",
                     "kind: List\nitems: 5", "...\n---\n", "\t", "? [a]\n: b"]),
))
def test_snapshot_text_loads_or_is_a_snapshot_error(text: str) -> None:
    try:
        load_text(text, "fuzz.yaml")
    except SnapshotError as exc:
        refusal = str(exc)
    else:
        return
    assert refusal.startswith("fuzz.yaml"), "the error names the file"


def test_the_seeds_themselves_are_accepted() -> None:
    """The mutations start from documents every decoder takes: a fuzz run that only ever
    saw refusals would prove little."""
    for name, (handler, seeds) in HANDLERS.items():
        for seed in seeds:
            assert handler(encode(seed)), name
    load_text(json.dumps(SNAPSHOT), "seed")
    for kind, objects in OBJECTS.items():
        decoders = Decoders(RESOURCE[kind].wire)
        for obj in objects:
            line = json.dumps({"type": "ADDED", "object": obj}).encode()
            RESOURCE[kind].view(decode_line(line, decoders).obj)
