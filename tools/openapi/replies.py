"""raygate's own replies (explain, health) and the webhook's AdmissionReview, in and out."""

from __future__ import annotations

import msgspec

from raygate.contract.admission_status import ScaleGate
from raygate.contract.explain import ExplainReply
from raygate.server.wire.admission_review import AdmissionReviewIn, AdmissionReviewOut
from tools.openapi.decoded import tidy
from tools.openapi.schema import Schema, ref, strings_to


def own_components() -> dict[str, Schema]:
    """raygate's own replies (explain, health) and the webhook's review, in and out."""
    return {**_explain(), **_review_out(), **_review_in(), "Health": _health()}


def _explain() -> dict[str, Schema]:
    _, explain = msgspec.json.schema_components(
        [ExplainReply], ref_template="#/components/schemas/{name}")
    components: dict[str, Schema] = {}
    for name, made in explain.items():
        if name == ScaleGate.__name__:
            continue  # the admission status', written by hand in the file with its prose
        schema = tidy(made)
        # Every field is written, defaults included.
        schema["required"] = list(schema["properties"])
        schema["additionalProperties"] = False
        components[name] = schema
    return components


def _review_out() -> dict[str, Schema]:
    _, review = msgspec.json.schema_components(
        [AdmissionReviewOut], ref_template="#/components/schemas/AdmissionReviewOut.{name}")
    components: dict[str, Schema] = {}
    for name, made in review.items():
        schema = tidy(made)
        if name == "AdmissionReviewOut":
            schema["required"] = ["apiVersion", "kind", "response"]
        schema["additionalProperties"] = False
        components[f"AdmissionReviewOut.{name}" if name != "AdmissionReviewOut" else name] = (
            schema)
    components["AdmissionReviewOut"]["description"] = (
        "admission.k8s.io/v1 AdmissionReview with its response: a JSON patch that marks "
        "Ray pods, or allowed with none.")
    return components


def _review_in() -> dict[str, Schema]:
    _, review_in = msgspec.json.schema_components(
        [AdmissionReviewIn], ref_template="#/components/schemas/AdmissionReviewIn.{name}")
    components: dict[str, Schema] = {}
    for name, made in review_in.items():
        components[name if name == "AdmissionReviewIn" else f"AdmissionReviewIn.{name}"] = (
            tidy(made, parsed=False))
    # A review without a request, or a request without its uid, is a 400.
    components["AdmissionReviewIn"]["properties"]["request"] = ref(
        "AdmissionReviewIn.AdmissionRequest")
    components["AdmissionReviewIn"]["required"] = ["request"]
    components["AdmissionReviewIn.AdmissionRequest"]["required"] = ["uid"]
    components["AdmissionReviewIn.AdmissionRequest"]["properties"]["uid"]["minLength"] = 1
    components["AdmissionReviewIn"]["description"] = (
        "admission.k8s.io/v1 AdmissionReview with its request, as the API server sends it "
        "(`request.object` the Pod being created): the fields raygate reads.")
    return components


def _health() -> Schema:
    kind_report = {
        "type": "object", "additionalProperties": False,
        "required": ["resource", "state", "synced", "objects", "events", "relists", "errors"],
        "properties": {
            "resource": {"type": "string"},
            "state": {"type": "string",
                      "enum": ["pending", "listing", "watching", "backoff", "absent"]},
            "synced": {"type": "boolean"}, "objects": {"type": "integer"},
            "events": {"type": "integer"}, "relists": {"type": "integer"},
            "errors": {"type": "integer"}, "lastEventAgeSeconds": {"type": "number"},
            "lastError": {"type": "string"}}}
    return {
        "type": "object", "additionalProperties": False, "required": ["status", "source",
                                                                      "objects"],
        "properties": {
            "status": {"type": "string", "enum": ["ready", "not-ready", "shutting-down"]},
            "source": {"type": "string", "description": "Where the cluster state comes from."},
            "objects": strings_to({"type": "integer"}),
            "kinds": {**strings_to(kind_report),
                      "description": "Following a cluster: each kind's list/watch state."},
            "absent": {"type": "array", "items": {"type": "string"},
                       "description": "Following a cluster: the custom resources not "
                                      "installed."}}}
