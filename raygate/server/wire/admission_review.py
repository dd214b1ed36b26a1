"""``admission.k8s.io/v1`` AdmissionReview: the request fields the Ray-pod webhook reads,
and the response it writes."""

from __future__ import annotations

import msgspec

from raygate.server.wire.kube import Container, PodMeta, SchedulingGate

__all__ = ["AdmissionResponse", "AdmissionReviewIn", "AdmissionReviewOut"]


class PodSpecForPatch(msgspec.Struct, rename="camel"):
    containers: list[Container] | None = None
    init_containers: list[Container] | None = None
    node_name: str | None = None
    scheduling_gates: list[SchedulingGate] | None = None


class PodForPatch(msgspec.Struct):
    metadata: PodMeta = msgspec.field(default_factory=PodMeta)
    spec: PodSpecForPatch = msgspec.field(default_factory=PodSpecForPatch)


class AdmissionRequest(msgspec.Struct, rename="camel"):
    uid: str = ""
    operation: str = ""
    object: PodForPatch | None = None


class AdmissionReviewIn(msgspec.Struct, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: AdmissionRequest | None = None


class AdmissionResponse(msgspec.Struct, rename="camel", omit_defaults=True):
    uid: str
    allowed: bool  # required on the wire: no default, so omit_defaults never drops it
    patch_type: str | None = None
    patch: str | None = None
    """base64 of a JSON Patch (RFC 6902)."""
    warnings: list[str] | None = None


class AdmissionReviewOut(msgspec.Struct, rename="camel"):
    response: AdmissionResponse
    api_version: str = "admission.k8s.io/v1"
    kind: str = "AdmissionReview"
