"""The operations: the kube-scheduler and Volcano extender verbs, explain, the webhook,
health, metrics and the document itself (the admission-status API's are written by hand
in the file)."""

from __future__ import annotations

from tools.openapi.schema import ERROR, Schema, json_body, nullable, ref

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
    """raygate's own: explain, the webhook, health, metrics and this document."""
    return {**_explain_paths(), **_webhook_paths(), **_operations_paths()}


def _explain_paths() -> dict[str, Schema]:
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
    }


def _webhook_paths() -> dict[str, Schema]:
    return {
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
    }


def _operations_paths() -> dict[str, Schema]:
    return {
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
