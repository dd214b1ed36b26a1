"""The Ray-pod marker webhook with real AdmissionReview JSON, over HTTPS on loopback."""

from __future__ import annotations

import base64
import copy
import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from raygate.extender.api.webhook import MARKER
from tests.builders import Obj, make_pod
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
    """RFC 6902 ``add`` (all the webhook emits), enough to check the patched pod."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [t.replace("~1", "/").replace("~0", "~")
                          for t in op["path"].lstrip("/").split("/")]
        target: Any = out
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        target[last] = op["value"]
    return out


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


@pytest.mark.parametrize("pod", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_ray_pods_get_the_marker(pod: Obj, https: tuple[str, ssl.SSLContext]) -> None:
    reply = mutate(https, review(pod))
    assert reply.status_code == 200
    out = reply.json()
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


def test_an_already_marked_pod_is_left_alone(https: tuple[str, ssl.SSLContext]) -> None:
    pod = make_pod("w").ray("rc", "g").requests(**{"raygate.io/managed": "1"}).obj()
    pod["spec"]["containers"][0]["resources"]["limits"] = {MARKER: "1"}
    response = mutate(https, review(pod)).json()["response"]
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
