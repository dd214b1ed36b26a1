"""The Ray-pod webhook (``POST /mutate/ray-pods``, AdmissionReview v1) on pod CREATE.

It does up to two things to a pod carrying KubeRay's labels:

- **place** (``placement.native: on``, the default): decide the pod in its create's
  admission with the policy's rules (``policy.native.decide_at_admission``: the role
  counted from the cache's snapshot and the pods admitted but not seen yet,
  ``controllers.admitted_pods``) and write the decision into it: the native rule (node
  affinity), the labels ``raygate.io/role`` and ``raygate.io/rule``, and the annotation
  ``raygate.io/admitted`` by which raygate finds it again. The pod is created with its
  rule: one API write. Only where the decision has to wait (a worker whose RayCluster the
  cache lacks, a surplus worker of an all-or-nothing scale-up, a cache not loaded yet) is
  the scheduling gate ``raygate.io/placement`` added instead, for raygate's leader to
  release (``raygate.server.controllers.gate_release``). Never for a pod that names its node
  (the API forbids gates there) or asks for a GPU resource (it gets no rule).
- **mark** (``webhook.marker: on``; off by default): add the extended resource
  ``raygate.io/managed: 1`` to the first container, so that a default-scheduler extender
  with ``managedResources`` is called for Ray pods only. No node autoscaler offers that
  resource: where Karpenter or Cluster Autoscaler runs, the marker keeps every Ray pod from
  getting a node. Only for clusters without node autoscaling.

The webhook reads the snapshot the cache published last and never waits for another; it
is served on a thread and event loop of its own (``raygate.server.server``), so no request
or controller of the main loop delays a pod's create. A dry-run create is decided but
holds no place. A review that cannot be read is a 400 (the API server then applies the
webhook's ``failurePolicy: Ignore``: the pod is created unchanged); a pod whose patch
cannot be made is admitted unchanged, counted and logged. Never a 500 that blocks pod
creation.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import time
from collections.abc import Callable

import msgspec

from raygate.contract.errors import MissingField
from raygate.policy.classify import LABEL_ROLE, LABEL_RULE, written_role
from raygate.policy.config import PolicyConfig
from raygate.policy.model import LABEL_CLUSTER, LABEL_NODE_TYPE, GroupKey
from raygate.policy.native import (
    ANNOTATION_ADMITTED,
    GATE,
    admission_patch,
    decide_at_admission,
    places_taken,
)
from raygate.policy.quantity import QuantityError, parse_milli
from raygate.process.logs import about
from raygate.server.cache import convert
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.convert_gated import affinity_shape
from raygate.server.cache.snapshot import Snapshot
from raygate.server.controllers.admitted_pods import AdmittedPods
from raygate.server.http.routes import Route
from raygate.server.metrics.registry import Metrics
from raygate.server.wire import admission_review as wire
from raygate.server.wire import decode, kube

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


def _marker_patch(pod: kube.Pod) -> Patch:
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


def _asks_for_gpu(pod: kube.Pod, config: PolicyConfig) -> bool:
    """Any container requests or limits a configured GPU resource (as
    ``classify.gpu_pod_resources`` reads the cached pod). A quantity that does not parse
    counts as a GPU: the API server refuses that pod anyway, and no gate is the safe side.
    Used only where the cache cannot decide the pod: a pod whose GPU comes through DRA (a
    claim, a resource a DeviceClass backs) is gated then; its release finds it a GPU pod
    and writes no rule."""
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


def _gate_patch(pod: kube.Pod, config: PolicyConfig) -> Patch:
    if pod.spec.node_name or _asks_for_gpu(pod, config):
        return []
    gates = pod.spec.scheduling_gates
    if gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]
    if any(g.name == GATE for g in gates):
        return []  # reinvoked, or created gated already
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]


class RayPodWebhook:
    """The webhook's one route, placing and/or marking as configured."""

    def __init__(self, cache: ClusterCache, metrics: Metrics, *, place: bool, marker: bool,
                 admitted: AdmittedPods | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        """Its snapshot (and the policy in force with it), read once per review."""
        self.metrics = metrics
        self.place = place
        self.marker = marker
        self.admitted = AdmittedPods() if admitted is None else admitted
        self.clock = clock
        self._seconds = metrics.webhook_seconds.labels()
        self._counted: Snapshot | None = None
        self._counts: dict[GroupKey, int] = {}

    def mutate(self, body: bytes) -> bytes:
        started = time.perf_counter()
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
            ops = self._patch(pod, request.uid, request.dry_run)
            if ops:
                response.patch_type = "JSONPatch"
                response.patch = base64.b64encode(msgspec.json.encode(ops)).decode()
        reply = msgspec.json.encode(wire.AdmissionReviewOut(response=response))
        self._seconds.observe(time.perf_counter() - started)
        return reply

    def _patch(self, pod: kube.Pod, uid: str, dry_run: bool) -> Patch:
        where = about(namespace=pod.metadata.namespace,
                      pod=pod.metadata.name or pod.metadata.generate_name)
        try:
            ops = self._place(pod, uid, dry_run) if self.place else []
            if self.marker:
                ops += _marker_patch(pod)
        except Exception:  # a pod no rule foresaw: created unchanged, never a 500
            self.metrics.placement_gates.labels("failed_open").inc()
            log.exception("%s/%s: cannot make the webhook's patch; admitted unchanged",
                          pod.metadata.namespace, pod.metadata.name or
                          pod.metadata.generate_name, extra=where)
            return []
        return ops

    def _place(self, pod: kube.Pod, uid: str, dry_run: bool) -> Patch:
        annotations = pod.metadata.annotations
        if annotations is not None and annotations.admitted is not None:
            self._decided_before(pod, annotations.admitted, uid, dry_run)
            return []
        if not self.cache.ready:
            return self._gate(pod, self.cache.snapshot.config, "raygate's cache is loading")
        snap, now = self.cache.snapshot, self.clock()
        view = dataclasses.replace(convert.pod_view(pod, "$.request.object"),
                                   node_affinity=affinity_shape(pod.spec.affinity))
        key = view.group_key
        decided = decide_at_admission(view, snap, snap.config, now, lambda: self._taken(
            snap, key) + self.admitted.held(key, snap, now))
        if isinstance(decided, str):
            return self._gate(pod, snap.config, decided)
        role, decision, rule = decided.role.role, decided.decision, decided.rule
        ops = admission_patch(view, rule, {LABEL_ROLE: role.value,
                                           LABEL_RULE: decision.rule.value},
                              {ANNOTATION_ADMITTED: uid}, has_annotations=annotations
                              is not None, config=snap.config)
        if not dry_run:  # a dry run is never created: it holds no place
            self.admitted.admit(key, uid, role, now)
        self.metrics.placement_admissions.labels(decision.rule.value, rule.value).inc()
        log.debug("%s/%s: created as %s with %s (%s: %s)", view.namespace,
                  pod.metadata.name or pod.metadata.generate_name, role.value, rule.value,
                  decision.rule.value, decision.reason,
                  extra=about(namespace=view.namespace, raycluster=view.ray_cluster))
        return ops

    def _taken(self, snap: Snapshot, key: GroupKey) -> int:
        """``places_taken`` in ``snap``, counted once per snapshot and group: a burst's
        admissions between two publishes walk the group once."""
        if self._counted is not snap:
            self._counted, self._counts = snap, {}
        taken = self._counts.get(key)
        if taken is None:
            taken = self._counts[key] = places_taken(key, snap)
        return taken

    def _decided_before(self, pod: kube.Pod, token: str, uid: str, dry_run: bool) -> None:
        """A pod decided earlier in this create: by this webhook (reinvoked: counted then)
        or by another raygate replica's, called before this one. The decision stands; this
        replica counts its place too, so that the two give each floor place once."""
        if token == uid or dry_run:
            return
        view = convert.pod_view(pod, "$.request.object")
        role = written_role(view)
        if role is not None:
            self.admitted.admit(view.group_key, token, role, self.clock())

    def _gate(self, pod: kube.Pod, config: PolicyConfig, why: str) -> Patch:
        ops = _gate_patch(pod, config)
        if ops:
            self.metrics.placement_gates.labels("gated").inc()
            log.debug("gated %s/%s with %s: %s", pod.metadata.namespace,
                      pod.metadata.name or pod.metadata.generate_name, GATE, why,
                      extra=about(namespace=pod.metadata.namespace))
        return ops

    def routes(self) -> dict[str, Route]:
        """The admission webhook, served on the HTTPS listener (``--webhook-addr``)."""
        return {"/mutate/ray-pods": Route(b"POST", self.mutate)}
