"""The Ray-pod webhook with real AdmissionReview JSON: the gate while raygate's cache is
loading (over HTTPS on loopback, as the server serves it by default) and the opt-in marker.
The decision at admission: ``test_webhook_admission.py``."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from typing import Any, cast

import httpx
import jsonpatch
import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.native import GATE
from raygate.server.cache.cluster import ClusterCache
from raygate.server.fronts.webhook import MARKER, RayPodWebhook
from raygate.server.metrics.registry import Metrics
from testkit.builders import Obj, make_pod
from tests.conftest import webhook_server


def review(pod: Obj, uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002") -> Obj:
    """An AdmissionReview as kube-apiserver sends it for a Pod CREATE."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:ray-system:kuberay-operator",
                         "uid": "u-1", "groups": ["system:serviceaccounts"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def apply_patch(obj: Obj, ops: list[dict[str, Any]]) -> Obj:
    """RFC 6902, by the jsonpatch library: the patched pod as the API server makes it."""
    return cast(Obj, jsonpatch.apply_patch(obj, ops))


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ssl.SSLContext]]:
    with webhook_server(tmp_path_factory.mktemp("tls")) as (url, context, _):
        yield url, context


def mutate(https: tuple[str, ssl.SSLContext], body: Any) -> httpx.Response:
    url, context = https
    with httpx.Client(verify=context) as client:
        return client.post(f"{url}/mutate/ray-pods", content=json.dumps(body))


def _without_resources(pod: Obj) -> Obj:
    del pod["spec"]["containers"][0]["resources"]
    return pod


CASES = [
    ("no resources", _without_resources(make_pod("w").ray("rc", "g").obj())),
    ("requests only", make_pod("w").ray("rc", "g").requests(cpu="2").obj()),
    ("requests and limits", make_pod("w").ray("rc", "g").requests(cpu="2").limits(cpu="2").obj()),
    ("head", make_pod("h").head("rc").requests(cpu="1").obj()),
]


def marked(body: Obj, *, gate: bool = False, marker: bool = True) -> Obj:
    # A cache not loaded yet: every CPU-only Ray pod's decision waits at the gate.
    webhook = RayPodWebhook(ClusterCache(PolicyConfig(), "test"), Metrics(), place=gate,
                            marker=marker)
    return cast(Obj, json.loads(webhook.mutate(json.dumps(body).encode())))


@pytest.mark.parametrize("pod", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_with_the_marker_on_ray_pods_get_it(pod: Obj) -> None:
    out = marked(review(pod))
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    response = out["response"]
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patched = apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources["requests"][MARKER] == "1" and resources["limits"][MARKER] == "1"
    # Everything else is untouched.
    original = pod["spec"]["containers"][0].get("resources", {})
    for part in ("requests", "limits"):
        assert {k: v for k, v in resources[part].items() if k != MARKER} == original.get(part, {})


def test_an_already_marked_pod_is_left_alone() -> None:
    pod = make_pod("w").ray("rc", "g").requests(**{"raygate.io/managed": "1"}).obj()
    pod["spec"]["containers"][0]["resources"]["limits"] = {MARKER: "1"}
    response = marked(review(pod))["response"]
    assert "patch" not in response and response["allowed"] is True


@pytest.mark.parametrize("pod", [make_pod("web", "default").obj(),
                                 make_pod("half").label("ray.io/is-ray-node", "yes").obj()])
def test_other_pods_are_admitted_unchanged(pod: Obj, https: tuple[str, ssl.SSLContext]) -> None:
    response = mutate(https, review(pod)).json()["response"]
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize("body", [b"{", {"request": None}, {"request": {"uid": ""}},
                                  {"request": {"uid": "x", "object": "pod"}}])
def test_bad_reviews_are_400_and_the_webhook_keeps_serving(
    body: Any, https: tuple[str, ssl.SSLContext]
) -> None:
    url, context = https
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    with httpx.Client(verify=context) as client:
        assert client.post(f"{url}/mutate/ray-pods", content=content).status_code == 400
    assert mutate(https, review(make_pod("w").ray("rc", "g").obj())).status_code == 200


# --- the gate (placement.native: on, the server's default), while the cache loads ------------

GATE_CASES = [
    ("worker", make_pod("w").ray("rc", "g").requests(cpu="2").obj(), [GATE]),
    ("head", make_pod("h").head("rc").requests(cpu="1").obj(), [GATE]),
    ("behind Kueue's gate", make_pod("w").ray("rc", "g").gated("kueue.x-k8s.io/admission").obj(),
     ["kueue.x-k8s.io/admission", GATE]),
    ("gated already (reinvoked)", make_pod("w").ray("rc", "g").gated(GATE).obj(), [GATE]),
    ("names its node", make_pod("w").ray("rc", "g").on("n1").obj(), None),
    ("requests a GPU", make_pod("w").ray("rc", "g").requests(**{"nvidia.com/gpu": "1"}).obj(),
     None),
    ("a GPU in limits only", make_pod("w").ray("rc", "g").limits(**{"amd.com/gpu": "2"}).obj(),
     None),
    ("a GPU in an init container",
     make_pod("w").ray("rc", "g").init_requests(False, **{"nvidia.com/gpu": "1"}).obj(), None),
    ("zero GPUs", make_pod("w").ray("rc", "g").requests(**{"nvidia.com/gpu": "0"}).obj(), [GATE]),
    ("a GPU quantity that does not parse",
     make_pod("w").ray("rc", "g").requests(**{"nvidia.com/gpu": "lots"}).obj(), None),
]


@pytest.mark.parametrize(("pod", "gates"), [c[1:] for c in GATE_CASES],
                         ids=[c[0] for c in GATE_CASES])
def test_while_loading_ray_pods_are_gated_unless_they_need_no_rule(
    pod: Obj, gates: list[str] | None, https: tuple[str, ssl.SSLContext]
) -> None:
    response = mutate(https, review(pod)).json()["response"]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    patched = apply_patch(pod, patch)
    if gates is None:
        assert patched == pod
        return
    assert [g["name"] for g in patched["spec"]["schedulingGates"]] == gates
    patched["spec"].pop("schedulingGates")
    pod["spec"].pop("schedulingGates", None)
    assert patched == pod  # nothing else changes


def test_gate_and_marker_together() -> None:
    pod = make_pod("w").ray("rc", "g").obj()
    response = marked(review(pod), gate=True, marker=True)["response"]
    patched = apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert patched["spec"]["schedulingGates"] == [{"name": GATE}]
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {MARKER: "1"}


def test_an_update_is_never_gated() -> None:
    body = review(make_pod("w").ray("rc", "g").obj())
    body["request"]["operation"] = "UPDATE"  # gates can be set at CREATE only
    assert "patch" not in marked(body, gate=True, marker=False)["response"]


def test_a_pod_no_rule_foresaw_is_admitted_unchanged_and_counted() -> None:
    metrics = Metrics()

    class Broken(ClusterCache):
        @property
        def ready(self) -> bool:
            raise RuntimeError("a cache that cannot be read")

        @ready.setter
        def ready(self, value: bool) -> None:
            pass

    webhook = RayPodWebhook(Broken(PolicyConfig(), "test"), metrics, place=True, marker=False)
    out = json.loads(webhook.mutate(json.dumps(review(make_pod("w").ray("rc", "g").obj()))
                                    .encode()))
    assert out["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert metrics.placement_gates.labels("failed_open").value == 1
