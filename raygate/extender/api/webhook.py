"""The Ray-pod marker webhook (``POST /mutate/ray-pods``, AdmissionReview v1).

With raygate as an extender of the *default* scheduler, ``managedResources`` scopes the
extender to pods that ask for a marker resource, so kube-scheduler calls raygate for Ray
pods only. This webhook adds that marker — ``raygate.io/managed: 1`` in the first
container's requests and limits — to every pod that carries KubeRay's labels.
"""

from __future__ import annotations

import base64
import logging

import msgspec

from raygate.extender.errors import BadRequest, MissingField
from raygate.extender.http.routes import Route
from raygate.extender.logs import about
from raygate.extender.wire import DECODE_ERRORS
from raygate.extender.wire import admission_review as wire
from raygate.plugin.model import LABEL_CLUSTER, LABEL_NODE_TYPE

__all__ = ["MARKER", "mutate_ray_pods", "webhook_routes"]

log = logging.getLogger("raygate.webhook")

MARKER = "raygate.io/managed"
# An extended resource must be set in limits, and requests (if given) must equal them
# (core/v1 validation: extended resources cannot be overcommitted). kubelet drops
# extended resources its node does not advertise before admitting the pod, and
# kube-scheduler ignores the marker under `ignoredByScheduler: true`.
_MARKER_VALUE = "1"
_REVIEW = msgspec.json.Decoder(wire.AdmissionReviewIn)


def _escape(key: str) -> str:
    """A map key as a JSON Pointer token (RFC 6901: ``~`` → ``~0``, ``/`` → ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def _patch(pod: wire.PodForPatch) -> list[dict[str, object]]:
    containers = pod.spec.containers or []
    if not containers:
        return []
    resources = containers[0].resources
    base = "/spec/containers/0/resources"
    marker = {MARKER: _MARKER_VALUE}
    if resources is None:
        return [{"op": "add", "path": base, "value": {"requests": marker, "limits": marker}}]
    ops: list[dict[str, object]] = []
    for part, values in (("requests", resources.requests), ("limits", resources.limits)):
        if values is None:
            ops.append({"op": "add", "path": f"{base}/{part}", "value": marker})
        elif values.get(MARKER) != _MARKER_VALUE:
            ops.append({"op": "add", "path": f"{base}/{part}/{_escape(MARKER)}",
                        "value": _MARKER_VALUE})
    return ops


def mutate_ray_pods(body: bytes) -> bytes:
    try:
        review = _REVIEW.decode(body)
    except DECODE_ERRORS as exc:
        raise BadRequest(f"cannot decode AdmissionReview: {exc}") from None
    request = review.request
    if request is None or not request.uid:
        raise MissingField("request.uid")
    response = wire.AdmissionResponse(uid=request.uid, allowed=True)
    pod = request.object
    labels = (pod.metadata.labels or {}) if pod is not None else {}
    # The objectSelector already limits calls to ray.io/is-ray-node=yes; the labels the
    # policy uses decide (a KubeRay pod has both).
    if pod is not None and LABEL_CLUSTER in labels and LABEL_NODE_TYPE in labels:
        ops = _patch(pod)
        if ops:
            response.patch_type = "JSONPatch"
            response.patch = base64.b64encode(msgspec.json.encode(ops)).decode()
            log.debug("marked %s/%s with %s", pod.metadata.namespace, pod.metadata.name, MARKER,
                      extra=about(namespace=pod.metadata.namespace, pod=pod.metadata.name))
    return msgspec.json.encode(wire.AdmissionReviewOut(response=response))


def webhook_routes() -> dict[str, Route]:
    """The admission webhook, served on the HTTPS listener (``--webhook-addr``)."""
    return {"/mutate/ray-pods": Route(b"POST", mutate_ray_pods)}
