"""``KubeTransport``'s calls for ``raygate uninstall`` over real HTTP on loopback: the
request the API server gets, and a missing object as no error where the command says so
(e2e/test_uninstall.py has the real kube-apiserver answer them)."""

from __future__ import annotations

import pytest

from raygate.server.kube.client import KubeTransport
from raygate.server.kube.transport import ApiError
from tests.kube import test_kube_budgets
from tests.kube.test_kube_budgets import Recorder

api = test_kube_budgets.api  # the recording API server, and a transport to it


def test_the_webhook_configuration_is_deleted_by_name(
        api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    assert transport.delete_webhook_configuration("raygate-ray-pods") is True
    assert [(s.method, s.path) for s in recorder.seen] == [
        ("DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                   "raygate-ray-pods")]
    recorder.status, recorder.reply = 404, {"kind": "Status", "reason": "NotFound"}
    assert transport.delete_webhook_configuration("raygate-ray-pods") is False
    recorder.status, recorder.reply = 403, {"kind": "Status", "reason": "Forbidden"}
    with pytest.raises(ApiError, match="403"):
        transport.delete_webhook_configuration("raygate-ray-pods")


def test_a_deployment_is_scaled_to_zero_through_its_scale(
        api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    recorder.reply = {"kind": "Scale", "spec": {"replicas": 0},
                      "status": {"replicas": 2, "selector": "app.kubernetes.io/name=raygate"}}
    assert transport.scale_to_zero("raygate-system", "raygate") == (
        "app.kubernetes.io/name=raygate")
    [seen] = recorder.seen
    assert (seen.method, seen.path) == (
        "PATCH", "/apis/apps/v1/namespaces/raygate-system/deployments/raygate/scale")
    assert seen.content_type == "application/merge-patch+json"
    assert seen.body == {"spec": {"replicas": 0}}
    recorder.status, recorder.reply = 404, {"kind": "Status", "reason": "NotFound"}
    assert transport.scale_to_zero("raygate-system", "raygate") is None


def test_a_raycluster_gets_a_json_patch(api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    ops: list[dict[str, object]] = [{"op": "test", "path": "/metadata/uid", "value": "u"}]
    transport.patch_raycluster("ray", "rc", ops)
    [seen] = recorder.seen
    assert (seen.method, seen.path) == ("PATCH", "/apis/ray.io/v1/namespaces/ray/rayclusters/rc")
    assert seen.content_type == "application/json-patch+json"
    assert seen.body == ops
    recorder.status, recorder.reply = 422, {"kind": "Status", "reason": "Invalid"}
    with pytest.raises(ApiError, match="422"):
        transport.patch_raycluster("ray", "rc", ops)


def test_a_list_passes_its_selectors(api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    recorder.reply = {"kind": "PodList", "metadata": {}, "items": [{"metadata": {"name": "p"}}]}
    query = [("labelSelector", "ray.io/is-ray-node=yes"), ("fieldSelector", "status.phase=Pending")]
    assert len(list(transport.list_raw("/api/v1/pods", query=query))) == 1
    [seen] = recorder.seen
    assert seen.query == {"limit": ["500"], "labelSelector": ["ray.io/is-ray-node=yes"],
                          "fieldSelector": ["status.phase=Pending"]}
