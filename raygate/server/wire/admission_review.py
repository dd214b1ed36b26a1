"""``admission.k8s.io/v1`` AdmissionReview: the request fields the Ray-pod webhook reads,
and the response it writes."""

from __future__ import annotations

import msgspec

from raygate.server.wire.kube import Pod

__all__ = ["AdmissionResponse", "AdmissionReviewIn", "AdmissionReviewOut"]


class AdmissionRequest(msgspec.Struct, rename="camel"):
    uid: str = ""
    operation: str = ""
    object: Pod | None = None
    dry_run: bool = False


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
