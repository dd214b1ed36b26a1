"""The parts of ``raygate/server/openapi.json`` made from code: every route that is not
the admission-status API (written by hand in the file, with its prose), and the schemas
of what raygate reads from the schedulers.

``python -m tools.openapi_document`` rewrites the file; ``tests/fronts/test_openapi_contract.py``
fails when the file is not what this makes of it.

- The request envelopes are the schedulers' own types: kube-scheduler's
  ``k8s.io/kube-scheduler/extender/v1`` (``ExtenderArgs``, ``ExtenderPreemptionArgs``; no
  JSON tags, so PascalCase keys, every key present, nil as ``null``) and Volcano's
  ``pkg/scheduler/plugins/extender`` (``PredicateRequest``, ``PrioritizeRequest``,
  ``PreemptableRequest``/``ReclaimableRequest``, ``JobEnqueueableRequest``: JSON tags
  on the envelopes, the ``api.*Info`` inside them PascalCase).
- The objects inside them (``v1.Pod``, ``v1.Node``, Volcano's ``TaskInfo``, ``NodeInfo``,
  ``JobInfo``) are described by the fields raygate decodes — from the msgspec structs of
  ``raygate.server.wire`` themselves, so the document cannot drift from the decoder —
  with quantities and times constrained as raygate parses them. Every other field of
  those objects is allowed and ignored.
- The replies are exactly what raygate writes (the golden fixtures in ``tests/fixtures``
  hold their bytes): raygate's own structs, and the upstream result types.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from raygate.contract.explain import ExplainReply
from raygate.server.cache import convert
from raygate.server.wire import kube, volcano
from raygate.server.wire.admission_review import AdmissionReviewIn, AdmissionReviewOut

DOCUMENT = Path(__file__).resolve().parent.parent / "raygate" / "server" / "openapi.json"

HAND_WRITTEN_PATHS = ("/v1/namespaces/{namespace}/rayclusters/{name}/admission",
                      "/v1/admission")
"""The admission-status API: written in the file by hand. Every other path is made here."""

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def strings_to(value: Schema) -> Schema:
    return {"type": "object", "additionalProperties": value}


def json_body(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERROR = ref("Error")
QUANTITY_PATTERN = (r"^\s*[+-]?(?:[0-9]{1,3}(?:\.[0-9]*)?|\.[0-9]+)"
                    r"(?:Ki|Mi|Gi|Ti|Pi|[numkMGTP]|[eE][+-]?[0-9])?\s*$")
"""resource.Quantity's grammar (``raygate.policy.quantity``), bounded so that every value
it matches is within an int64 (raygate refuses larger ones, and a pattern cannot say "at
most 2^63-1"): up to three integer digits, suffixes up to ``Pi``/``P``, a one-digit
exponent. raygate reads every quantity Kubernetes writes; this is what the document
promises."""
INT64 = 2**63 - 1
RFC3339 = {"anyOf": [{"type": "string", "format": "date-time"}, {"const": ""},
                     {"type": "null"}]}
"""A time as raygate parses it: RFC 3339; empty or null is no time."""


# --- the objects raygate decodes, from its wire structs ------------------------------------


def _tidy(node: Any, parsed: bool = True) -> Any:
    """msgspec's schema, as a request schema: no titles or docstrings (they describe the
    decoder), no empty ``required``; with ``parsed``, quantities and times as raygate
    parses them (the webhook parses neither)."""
    if isinstance(node, list):
        return [_tidy(item, parsed) for item in node]
    if not isinstance(node, dict):
        return node
    if parsed and node.get("anyOf") == [{"type": "string"}, {"type": "integer"},
                                        {"type": "number"}]:
        return ref("kube.Quantity")
    out: Schema = {}
    for key, value in node.items():
        if key in ("title", "description", "default") or (key == "required" and not value):
            continue
        if key == "properties":
            out[key] = {name: _time(name, _tidy(schema, parsed)) if parsed
                        else _tidy(schema, parsed) for name, schema in value.items()}
        else:
            out[key] = _tidy(value, parsed)
    return out


PARSED_TIMES = ("creationTimestamp", "deletionTimestamp")
"""The times raygate parses (``convert.timestamp``): RFC 3339, else a 400. A condition's
``lastTransitionTime`` too, but only for the condition types raygate reads: see
``wire_components``."""


def _time(name: str, schema: Schema) -> Schema:
    if name in PARSED_TIMES and schema == nullable({"type": "string"}):
        return RFC3339
    return schema


def wire_components() -> dict[str, Schema]:
    """``kube.*`` and ``volcano.*``: the objects inside the schedulers' requests."""
    _, kube_components = msgspec.json.schema_components(
        [kube.Pod, kube.Node], ref_template="#/components/schemas/kube.{name}")
    _, volcano_components = msgspec.json.schema_components(
        [volcano.TaskInfo, volcano.NodeInfo, volcano.JobInfo],
        ref_template="#/components/schemas/volcano.{name}")
    components = {f"kube.{name}": _tidy(schema) for name, schema in kube_components.items()}
    for name, schema in volcano_components.items():
        if name in kube_components:  # the Pod inside a TaskInfo is kube's
            continue
        components[f"volcano.{name}"] = _tidy(schema)
    # volcano's structs point at their own copy of the Pod: kube's is the one.
    text = json.dumps(components).replace('"#/components/schemas/volcano.Pod"',
                                          '"#/components/schemas/kube.Pod"')
    for name in kube_components:
        text = text.replace(f'"#/components/schemas/volcano.{name}"',
                            f'"#/components/schemas/kube.{name}"')
    components = json.loads(text)
    # A pod condition's time is parsed only when raygate reads the condition.
    components["kube.Condition"]["if"] = {
        "properties": {"type": {"enum": sorted(convert.POD_CONDITIONS)}}, "required": ["type"]}
    components["kube.Condition"]["then"] = {
        "properties": {"lastTransitionTime": RFC3339}}
    # NodeInfo.Node is kept raw and decoded as a Node when raygate's cache lacks it.
    components["volcano.NodeInfo"]["properties"]["Node"] = nullable(ref("kube.Node"))
    components["kube.Quantity"] = {
        "description": "A resource.Quantity: a string (`500m`, `4Gi`, `1e3`) or a number.",
        "anyOf": [{"type": "string", "pattern": QUANTITY_PATTERN},
                  {"type": "integer", "minimum": -INT64, "maximum": INT64},
                  {"type": "number", "minimum": -INT64, "maximum": INT64}]}
    for name, what in (("kube.Pod", "A v1.Pod"), ("kube.Node", "A v1.Node"),
                       ("volcano.TaskInfo", "Volcano's api.TaskInfo (PascalCase keys)"),
                       ("volcano.NodeInfo", "Volcano's api.NodeInfo"),
                       ("volcano.JobInfo", "Volcano's api.JobInfo")):
        components[name]["description"] = (
            f"{what}: the fields raygate reads. Every other field is allowed and ignored.")
    return dict(sorted(components.items()))


def own_components() -> dict[str, Schema]:
    """raygate's own replies (explain, health) and the scheduler protocols' results."""
    _, explain = msgspec.json.schema_components(
        [ExplainReply], ref_template="#/components/schemas/{name}")
    components: dict[str, Schema] = {}
    for name, made in explain.items():
        schema = _tidy(made)
        # Every field is written, defaults included.
        schema["required"] = list(schema["properties"])
        schema["additionalProperties"] = False
        components[name] = schema
    _, review = msgspec.json.schema_components(
        [AdmissionReviewOut], ref_template="#/components/schemas/AdmissionReviewOut.{name}")
    for name, made in review.items():
        schema = _tidy(made)
        if name == "AdmissionReviewOut":
            schema["required"] = ["apiVersion", "kind", "response"]
        schema["additionalProperties"] = False
        components[f"AdmissionReviewOut.{name}" if name != "AdmissionReviewOut" else name] = (
            schema)
    components["AdmissionReviewOut"]["description"] = (
        "admission.k8s.io/v1 AdmissionReview with its response: a JSON patch that marks "
        "Ray pods, or allowed with none.")
    _, review_in = msgspec.json.schema_components(
        [AdmissionReviewIn], ref_template="#/components/schemas/AdmissionReviewIn.{name}")
    for name, made in review_in.items():
        components[name if name == "AdmissionReviewIn" else f"AdmissionReviewIn.{name}"] = (
            _tidy(made, parsed=False))
    # A review without a request, or a request without its uid, is a 400.
    components["AdmissionReviewIn"]["properties"]["request"] = ref(
        "AdmissionReviewIn.AdmissionRequest")
    components["AdmissionReviewIn"]["required"] = ["request"]
    components["AdmissionReviewIn.AdmissionRequest"]["required"] = ["uid"]
    components["AdmissionReviewIn.AdmissionRequest"]["properties"]["uid"]["minLength"] = 1
    components["AdmissionReviewIn"]["description"] = (
        "admission.k8s.io/v1 AdmissionReview with its request, as the API server sends it "
        "(`request.object` the Pod being created): the fields raygate reads.")
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
    components["Health"] = {
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
    return components


def scheduler_components() -> dict[str, Schema]:
    """k8s.io/kube-scheduler/extender/v1 and Volcano's pkg/scheduler/plugins/extender."""
    names = nullable({"type": "array", "items": {"type": "string"}})
    node_list = {"type": "object", "description": "A v1.NodeList",
                 "properties": {"items": nullable({"type": "array",
                                                   "items": ref("kube.Node")})}}
    nodes_out = {"type": "object", "additionalProperties": False,
                 "required": ["metadata", "items"],
                 "description": "A v1.NodeList of the nodes that pass, each byte for byte as "
                                "it was sent (raygate does not rebuild them).",
                 "properties": {"metadata": {"type": "object"}, "items": {"type": "array"}}}
    meta_victims = {"type": "object",
                    "properties": {
                        "Pods": nullable({"type": "array", "items": {
                            "type": "object", "properties": {"UID": {"type": "string"}}}}),
                        "NumPDBViolations": {"type": "integer"}}}
    meta_victims_out = {
        "type": "object", "additionalProperties": False, "required": ["Pods", "NumPDBViolations"],
        "properties": {
            "Pods": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["UID"],
                "properties": {"UID": {"type": "string"}}}},
            "NumPDBViolations": {"type": "integer"}}}
    task = nullable(ref("volcano.TaskInfo"))
    return {
        "ExtenderArgs": {
            "description": "kube-scheduler's ExtenderArgs (filter and prioritize): the Pod, "
                           "and the candidate nodes as a NodeList (nodeCacheCapable: false) "
                           "or as names (true). The Go type allows a null Pod; kube-scheduler "
                           "never sends one, and raygate refuses it. kube-scheduler sends "
                           "every key (nil as null); a missing one reads as null, as in Go.",
            "type": "object", "required": ["Pod"],
            "properties": {"Pod": ref("kube.Pod"), "Nodes": nullable(node_list),
                           "NodeNames": names}},
        "ExtenderFilterResult": {
            "description": "kube-scheduler's ExtenderFilterResult. Errors are 200s with "
                           "`Error` set: kube-scheduler reads no body of another status.",
            "type": "object", "additionalProperties": False,
            "required": ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                         "Error"],
            "properties": {"Nodes": nullable(nodes_out), "NodeNames": names,
                           "FailedNodes": strings_to({"type": "string"}),
                           "FailedAndUnresolvableNodes": strings_to({"type": "string"}),
                           "Error": {"type": "string"}}},
        "HostPriorityList": {
            "description": "kube-scheduler's HostPriorityList: a score per node, 0-10.",
            "type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["Host", "Score"],
                "properties": {"Host": {"type": "string"},
                               "Score": {"type": "integer", "minimum": 0, "maximum": 10}}}},
        "ExtenderPreemptionArgs": {
            "description": "kube-scheduler's ExtenderPreemptionArgs: the victims it proposes, "
                           "whole Pods (nodeCacheCapable: false) or UIDs (true).",
            "type": "object", "required": ["Pod"],
            "properties": {
                "Pod": ref("kube.Pod"),
                "NodeNameToVictims": nullable(strings_to(nullable({
                    "type": "object",
                    "properties": {"Pods": nullable({"type": "array",
                                                     "items": ref("kube.Pod")}),
                                   "NumPDBViolations": {"type": "integer"}}}))),
                "NodeNameToMetaVictims": nullable(strings_to(nullable(meta_victims)))}},
        "ExtenderPreemptionResult": {
            "description": "kube-scheduler's ExtenderPreemptionResult, always with UIDs.",
            "type": "object", "additionalProperties": False,
            "required": ["NodeNameToMetaVictims"],
            "properties": {"NodeNameToMetaVictims": strings_to(meta_victims_out)}},
        "volcano.OnSessionRequest": {
            "description": "Volcano's OnSessionOpenRequest / OnSessionCloseRequest: the "
                           "whole session. raygate reads none of it (its own cache is the "
                           "source of truth): any body, of any size.",
            "type": "object"},
        "volcano.PredicateRequest": {
            "type": "object", "properties": {"task": task,
                                             "node": nullable(ref("volcano.NodeInfo"))}},
        "volcano.PredicateResponse": {
            "description": "`status` is the Go field ErrorMessage: empty passes. `code`: 0 "
                           "Success, 1 Error, 2 Unschedulable, 3 UnschedulableAndUnresolvable.",
            "type": "object", "additionalProperties": False, "required": ["status", "code"],
            "properties": {"status": {"type": "string"},
                           "code": {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]}}},
        "volcano.PrioritizeRequest": {
            "type": "object", "properties": {
                "task": task, "nodes": nullable({"type": "array",
                                                 "items": nullable(ref("volcano.NodeInfo"))})}},
        "volcano.PrioritizeResponse": {
            "type": "object", "additionalProperties": False,
            "required": ["nodeScore", "errorMessage"],
            "properties": {"nodeScore": strings_to({"type": "number"}),
                           "errorMessage": {"type": "string"}}},
        "volcano.VictimsRequest": {
            "description": "Volcano's PreemptableRequest and ReclaimableRequest (one type).",
            "type": "object", "properties": {
                "evictor": task,
                "evictees": nullable({"type": "array", "items": task})}},
        "volcano.VictimsResponse": {
            "description": "`status`: 1 permit (these victims), 0 abstain (`{\"status\":0}`), "
                           "-1 reject. `victims`: the evictees that may go, byte for byte "
                           "as sent.",
            "type": "object", "additionalProperties": False, "required": ["status"],
            "properties": {"status": {"type": "integer", "enum": [-1, 0, 1]},
                           "victims": nullable({"type": "array", "items": task})}},
        "volcano.JobEnqueueableRequest": {
            "type": "object", "properties": {"job": nullable(ref("volcano.JobInfo"))}},
        "volcano.VoteResponse": {
            "description": "0 abstain (raygate always does, for now), 1 permit, -1 reject.",
            "type": "object", "additionalProperties": False, "required": ["status"],
            "properties": {"status": {"type": "integer", "enum": [-1, 0, 1]}}},
    }


# --- the operations ------------------------------------------------------------------------

NOT_FOUND = json_body(ERROR, "Not served (a path raygate does not know).")
BAD_REQUEST = json_body(ERROR, "The body is not one raygate can read; the message says "
                               "where. kube-scheduler then goes on without raygate.")
TOO_LARGE = json_body(ERROR, "The body exceeds the limit (`--max-body-bytes`).")
UNAUTHORIZED = {
    **json_body(ERROR, "Authorization is on (`--authz`) and the request has no bearer "
                       "token, or one the API server's TokenReview rejects."),
    "headers": {"WWW-Authenticate": {"description": "`Bearer`.",
                                     "schema": {"type": "string"}}}}
FORBIDDEN = json_body(ERROR, "Authorization is on and the caller may not `get` `pods` in "
                             "the namespace (a SubjectAccessReview).")
UNAVAILABLE = json_body(ERROR, "Authorization is on and the API server cannot verify the "
                               "caller now; retry.")


def post(operation_id: str, summary: str, request: Schema, replies: dict[str, Schema],
         tag: str) -> Schema:
    return {"post": {
        "operationId": operation_id, "summary": summary, "tags": [tag],
        "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
        "responses": replies}}


def scheduler_paths() -> dict[str, Schema]:
    tag = "kube-scheduler extender"
    return {
        "/scheduler/filter": post(
            "schedulerFilter", "kube-scheduler's filter verb: nodes the pod may use",
            ref("ExtenderArgs"), {
                "200": json_body(ref("ExtenderFilterResult"), "The nodes that pass; errors "
                                 "too (`Error` set, every node passed: raygate fails open)."),
                "404": NOT_FOUND}, tag),
        "/scheduler/prioritize": post(
            "schedulerPrioritize", "kube-scheduler's prioritize verb: a score per node",
            ref("ExtenderArgs"), {
                "200": json_body(ref("HostPriorityList"), "A score for every node asked."),
                "400": BAD_REQUEST, "404": NOT_FOUND, "413": TOO_LARGE}, tag),
        "/scheduler/preempt": post(
            "schedulerPreempt", "kube-scheduler's preempt verb: the victims raygate allows",
            ref("ExtenderPreemptionArgs"), {
                "200": json_body(ref("ExtenderPreemptionResult"), "The victims per node, "
                                 "with protected pods removed or substituted."),
                "400": BAD_REQUEST, "404": NOT_FOUND, "413": TOO_LARGE}, tag),
    }


def volcano_paths() -> dict[str, Schema]:
    tag = "Volcano extender"

    def verb(name: str, summary: str, request: str, reply: str, *, shed: bool = False,
             ) -> tuple[str, Schema]:
        replies = {"200": json_body(ref(reply), "The answer; errors too, in the reply's own "
                                    "shape (raygate fails open)."), "404": NOT_FOUND}
        if shed:
            replies["503"] = {
                **json_body(ERROR, "Too many predicate calls in flight "
                                   "(`--predicate-concurrency`): refused at once, the body "
                                   "unread."),
                "headers": {"Retry-After": {"description": "Seconds.",
                                            "schema": {"type": "integer"}}}}
        return f"/volcano/{name}", post(f"volcano{name[0].upper()}{name[1:]}", summary,
                                        ref(request), replies, tag)

    session = {"type": "object", "additionalProperties": False, "maxProperties": 0}
    paths = dict([
        verb("predicate", "Volcano's predicate: may the task use the node",
             "volcano.PredicateRequest", "volcano.PredicateResponse", shed=True),
        verb("prioritize", "Volcano's prioritize: a score per node",
             "volcano.PrioritizeRequest", "volcano.PrioritizeResponse"),
        verb("preemptable", "Volcano's preemptable: which evictees may go",
             "volcano.VictimsRequest", "volcano.VictimsResponse"),
        verb("reclaimable", "Volcano's reclaimable: which evictees may go",
             "volcano.VictimsRequest", "volcano.VictimsResponse"),
        verb("jobEnqueueable", "Volcano's jobEnqueueable: a vote on enqueueing the job",
             "volcano.JobEnqueueableRequest", "volcano.VoteResponse"),
    ])
    for name in ("onSessionOpen", "onSessionClose"):
        paths[f"/volcano/{name}"] = post(
            f"volcano{name[0].upper()}{name[1:]}", f"Volcano's {name}: acknowledged",
            ref("volcano.OnSessionRequest"),
            {"200": json_body(session, "`{}`."), "404": NOT_FOUND}, tag)
    return dict(sorted(paths.items()))


def own_paths() -> dict[str, Schema]:
    nodes = {"name": "nodes", "in": "query", "required": False,
             "schema": {"type": "string"},
             "description": "Only these nodes, comma-separated; every node when absent."}
    name = {"in": "path", "required": True, "schema": {"type": "string"}}
    explained = json_body(ref("ExplainReply"), "The decision, and each node's verdict.")
    return {
        "/v1/namespaces/{namespace}/pods/{name}/explain": {"get": {
            "operationId": "explainPod", "tags": ["explain"],
            "summary": "Why raygate would place a pod where it would, node by node",
            "parameters": [{"name": "namespace", **name}, {"name": "name", **name}, nodes],
            "responses": {"200": explained,
                          "404": json_body(ERROR, "raygate's cache holds no such pod."),
                          "401": UNAUTHORIZED, "403": FORBIDDEN, "503": UNAVAILABLE}}},
        "/v1/explain": post(
            "explainGivenPod", "The same for a pod given in the body (one not created yet)",
            {"type": "object", "required": ["pod"], "properties": {
                "pod": ref("kube.Pod"),
                "nodeNames": nullable({"type": "array", "items": {"type": "string"}})}},
            {"200": explained, "400": BAD_REQUEST,
             "413": json_body(ERROR, "More than 1 MiB."), "401": UNAUTHORIZED,
             "403": FORBIDDEN, "503": UNAVAILABLE}, "explain"),
        "/mutate/ray-pods": {
            "servers": [{"url": "https://{webhook}", "variables": {"webhook": {
                "default": "raygate.raygate-system.svc:8443",
                "description": "The webhook listener (`--webhook-addr`), HTTPS only; "
                               "not served on the main port."}}}],
            **post("mutateRayPods", "The admission webhook: marks Ray pods for raygate's "
                   "scheduler", ref("AdmissionReviewIn"), {
                       "200": json_body(ref("AdmissionReviewOut"), "Allowed, with a JSON "
                                        "patch for a Ray pod."),
                       "400": json_body(ERROR, "Not an AdmissionReview with a request."),
                       "404": NOT_FOUND}, "webhook")},
        "/healthz": {"get": {
            "operationId": "healthz", "tags": ["operations"],
            "summary": "The process is alive (stays 200 while shutting down)",
            "responses": {"200": json_body({
                "type": "object", "additionalProperties": False, "required": ["status"],
                "properties": {"status": {"const": "ok"}}}, "`{\"status\":\"ok\"}`.")}}},
        "/readyz": {"get": {
            "operationId": "readyz", "tags": ["operations"],
            "summary": "The cache is loaded and raygate is not shutting down",
            "responses": {"200": json_body(ref("Health"), "Ready."),
                          "503": json_body(ref("Health"), "Not synced yet, or shutting "
                                           "down.")}}},
        "/metrics": {"get": {
            "operationId": "metrics", "tags": ["operations"],
            "summary": "Prometheus' text exposition (docs/operations.md lists the metrics)",
            "responses": {"200": {"description": "The metrics.", "content": {
                "text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {
            "operationId": "getOpenAPI", "tags": ["operations"], "summary": "This document",
            "responses": {"200": json_body({"type": "object"}, "OpenAPI 3.1.")}}},
    }


INFO = {
    "title": "raygate",
    "version": "v1",
    "description": (
        "Every HTTP route raygate serves: the kube-scheduler extender verbs "
        "(`/scheduler/*`), the Volcano extender verbs (`/volcano/*`), raygate's own API "
        "(admission status, explain), health, metrics, and the admission webhook (on its "
        "own HTTPS listener). The admission status is also served over gRPC "
        "(`raygate.v1.Admission`, protos/raygate/v1/admission.proto), explain as "
        "`raygate.v1.Explain`. Fields may be added; clients ignore fields they do not "
        "know. A method a path does not serve is a 405 with `Allow`; HEAD is answered "
        "wherever GET is."),
}


def build(current: Schema) -> Schema:
    """The document: ``current``'s hand-written admission paths and their components,
    everything else made here."""
    generated = {**wire_components(), **own_components(), **scheduler_components()}
    hand = {name: schema for name, schema in current["components"]["schemas"].items()
            if name not in generated and not name.startswith(
                ("kube.", "volcano.", "AdmissionReviewIn.", "AdmissionReviewOut."))}
    paths = {**scheduler_paths(), **volcano_paths(), **own_paths()}
    for path in HAND_WRITTEN_PATHS:
        paths[path] = current["paths"][path]
    return {
        "openapi": "3.1.0",
        "info": INFO,
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted({**hand, **generated}.items()))},
    }


# --- checking bodies against the document ------------------------------------------------


@functools.cache
def _registry() -> Registry[Any]:
    document = json.loads(DOCUMENT.read_text())
    registry: Registry[Any] = Registry().with_resource(
        "urn:raygate:openapi", Resource.from_contents(document, default_specification=DRAFT202012))
    return registry


def schema_errors(schema: Schema, body: Any) -> list[str]:
    """What is wrong with ``body`` against ``schema``, one of the document's (its ``$ref``s
    resolved in the file as it is), formats checked; empty when nothing is."""
    target = schema.get("$ref")
    validator = Draft202012Validator({"$ref": "urn:raygate:openapi" + target} if target
                                     else schema, registry=_registry(),
                                     format_checker=FormatChecker())
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(body)]


def render(document: Schema) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.openapi_document",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args(argv)
    text = DOCUMENT.read_text()
    made = render(build(json.loads(text)))
    if args.check:
        if made != text:
            print(f"{DOCUMENT} is stale: run python -m tools.openapi_document", file=sys.stderr)
            return 1
        return 0
    DOCUMENT.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
