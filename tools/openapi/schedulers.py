"""The schedulers' envelopes and results: k8s.io/kube-scheduler/extender/v1 and Volcano's
pkg/scheduler/plugins/extender."""

from __future__ import annotations

from tools.openapi.schema import Schema, nullable, ref, strings_to


def scheduler_components() -> dict[str, Schema]:
    """k8s.io/kube-scheduler/extender/v1 and Volcano's pkg/scheduler/plugins/extender."""
    return {**_filter_and_prioritize(), **_preempt(), **_volcano()}


def _filter_and_prioritize() -> dict[str, Schema]:
    """kube-scheduler's filter and prioritize: one request, two replies."""
    names = nullable({"type": "array", "items": {"type": "string"}})
    node_list = {"type": "object", "description": "A v1.NodeList",
                 "properties": {"items": nullable({"type": "array",
                                                   "items": ref("kube.Node")})}}
    nodes_out = {"type": "object", "additionalProperties": False,
                 "required": ["metadata", "items"],
                 "description": "A v1.NodeList of the nodes that pass, each byte for byte as "
                                "it was sent (raygate does not rebuild them).",
                 "properties": {"metadata": {"type": "object"}, "items": {"type": "array"}}}
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
    }


def _preempt() -> dict[str, Schema]:
    """kube-scheduler's preempt: the victims it proposes, and those raygate allows."""
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
    return {
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
    }


def _volcano() -> dict[str, Schema]:
    """Volcano's extender verbs: sessions, predicate, prioritize, victims, votes."""
    task = nullable(ref("volcano.TaskInfo"))
    return {
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
