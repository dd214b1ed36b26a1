"""The Ray-pod webhook (``POST /mutate/ray-pods``, AdmissionReview v1) on pod CREATE.

It does up to two things to a pod carrying KubeRay's labels:

- **gate** (``placement.native: on``, the default): add the scheduling gate
  ``raygate.io/placement``, so that no scheduler and no node autoscaler acts on the pod
  until raygate has written its placement into it (``raygate.server.controllers.placement``). Not
  for a pod that names its node (the API forbids gates there) or asks for a GPU (raygate
  has no rule for it: a gate would only cost a write).
- **mark** (``webhook.marker: on``; off by default): add the extended resource
  ``raygate.io/managed: 1`` to the first container, so that a default-scheduler extender
  with ``managedResources`` is called for Ray pods only. No node autoscaler offers that
  resource: where Karpenter or Cluster Autoscaler runs, the marker keeps every Ray pod from
  getting a node. Only for clusters without node autoscaling.

A review that cannot be read is a 400 (the API server then applies the webhook's
``failurePolicy: Ignore``: the pod is created unchanged); a pod whose patch cannot be made
is admitted unchanged, counted and logged. Never a 500 that blocks pod creation.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

import msgspec

from raygate.contract.errors import MissingField
from raygate.contract.logs import about
from raygate.plugin.config import PolicyConfig
from raygate.plugin.model import LABEL_CLUSTER, LABEL_NODE_TYPE
from raygate.plugin.native import GATE
from raygate.plugin.quantity import QuantityError, parse_milli
from raygate.server.http.routes import Route
from raygate.server.metrics.registry import Metrics
from raygate.server.wire import admission_review as wire
from raygate.server.wire import decode

__all__ = ["MARKER", "RayPodWebhook"]

log = logging.getLogger("raygate.webhook")

MARKER = "raygate.io/managed"
# An extended resource must be set in limits, and requests (if given) must equal them
# (core/v1 validation: extended resources cannot be overcommitted). kubelet drops
# extended resources its node does not advertise before admitting the pod, and
# kube-scheduler ignores the marker under `ignoredByScheduler: true`.
_MARKER_VALUE = "1"
_REVIEW = msgspec.json.Decoder(wire.AdmissionReviewIn)

Patch = list[dict[str, object]]


def _escape(key: str) -> str:
    """A map key as a JSON Pointer token (RFC 6901: ``~`` → ``~0``, ``/`` → ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def _marker_patch(pod: wire.PodForPatch) -> Patch:
    containers = pod.spec.containers or []
    if not containers:
        return []
    resources = containers[0].resources
    base = "/spec/containers/0/resources"
    marker = {MARKER: _MARKER_VALUE}
    if resources is None:
        return [{"op": "add", "path": base, "value": {"requests": marker, "limits": marker}}]
    ops: Patch = []
    for part, values in (("requests", resources.requests), ("limits", resources.limits)):
        if values is None:
            ops.append({"op": "add", "path": f"{base}/{part}", "value": marker})
        elif values.get(MARKER) != _MARKER_VALUE:
            ops.append({"op": "add", "path": f"{base}/{part}/{_escape(MARKER)}",
                        "value": _MARKER_VALUE})
    return ops


def _asks_for_gpu(pod: wire.PodForPatch, config: PolicyConfig) -> bool:
    """Any container requests or limits a configured GPU resource (as
    ``classify.gpu_pod_resources`` reads the cached pod). A quantity that does not parse
    counts as a GPU: the API server refuses that pod anyway, and no gate is the safe side.
    A pod whose GPU comes through DRA (a claim, a resource a DeviceClass backs) is gated:
    the webhook reads no cache; its release finds it a GPU pod and writes no rule."""
    for container in (*(pod.spec.containers or ()), *(pod.spec.init_containers or ())):
        resources = container.resources
        if resources is None:
            continue
        for values in (resources.requests, resources.limits):
            for resource in config.gpu_resources:
                value = (values or {}).get(resource)
                if value is None:
                    continue
                try:
                    if parse_milli(value) > 0:
                        return True
                except QuantityError:
                    return True
    return False


def _gate_patch(pod: wire.PodForPatch, config: PolicyConfig) -> Patch:
    if pod.spec.node_name or _asks_for_gpu(pod, config):
        return []
    gates = pod.spec.scheduling_gates
    if gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]
    if any(g.name == GATE for g in gates):
        return []  # reinvoked, or created gated already
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]


class RayPodWebhook:
    """The webhook's one route, gating and/or marking as configured."""

    def __init__(self, config: Callable[[], PolicyConfig], metrics: Metrics, *,
                 gate: bool, marker: bool) -> None:
        self.config = config
        """The policy in force (its GPU resources), read per review: reloads apply."""
        self.metrics = metrics
        self.gate = gate
        self.marker = marker

    def mutate(self, body: bytes) -> bytes:
        review = decode(_REVIEW.decode, body, "AdmissionReview")
        request = review.request
        if request is None or not request.uid:
            raise MissingField("request.uid")
        response = wire.AdmissionResponse(uid=request.uid, allowed=True)
        pod = request.object
        labels = (pod.metadata.labels or {}) if pod is not None else {}
        # The objectSelector already limits calls to ray.io/is-ray-node=yes; the labels the
        # policy uses decide (a KubeRay pod has both). Gates can be set at CREATE only.
        if (pod is not None and LABEL_CLUSTER in labels and LABEL_NODE_TYPE in labels
                and request.operation in ("CREATE", "")):
            ops = self._patch(pod)
            if ops:
                response.patch_type = "JSONPatch"
                response.patch = base64.b64encode(msgspec.json.encode(ops)).decode()
        return msgspec.json.encode(wire.AdmissionReviewOut(response=response))

    def _patch(self, pod: wire.PodForPatch) -> Patch:
        where = about(namespace=pod.metadata.namespace, pod=pod.metadata.name)
        try:
            ops = _gate_patch(pod, self.config()) if self.gate else []
            gated = bool(ops)
            if self.marker:
                ops += _marker_patch(pod)
        except Exception:  # a pod no rule foresaw: created unchanged, never a 500
            self.metrics.placement_gates.labels("failed_open").inc()
            log.exception("%s/%s: cannot make the webhook's patch; admitted unchanged",
                          pod.metadata.namespace, pod.metadata.name, extra=where)
            return []
        if gated:
            self.metrics.placement_gates.labels("gated").inc()
            log.debug("gated %s/%s with %s", pod.metadata.namespace, pod.metadata.name,
                      GATE, extra=where)
        return ops

    def routes(self) -> dict[str, Route]:
        """The admission webhook, served on the HTTPS listener (``--webhook-addr``)."""
        return {"/mutate/ray-pods": Route(b"POST", self.mutate)}
