"""Volcano's ``extender`` plugin protocol (``pkg/scheduler/plugins/extender/argument.go``).

The request envelopes carry JSON tags (``task``, ``node``, ``nodes``, ``evictor``,
``evictees``, ``job``); the Volcano objects inside them (``api.TaskInfo``,
``api.NodeInfo``, ``api.JobInfo``) have none, so their keys are Go field names in
PascalCase; the Pod and Node inside keep Kubernetes' camelCase. Only the fields raygate
reads are declared: a NodeInfo carries every task on the node with its full Pod
(``Tasks``), which is skipped unbuilt. Unknown keys are ignored — Volcano's structs grow
between releases.
"""

from __future__ import annotations

import msgspec

from raygate.server.wire.kube import Pod

__all__ = [
    "JobEnqueueableRequest",
    "NodeInfo",
    "PredicateRequest",
    "PredicateResponse",
    "PrioritizeRequest",
    "PrioritizeResponse",
    "TaskInfo",
    "VictimsRequest",
    "VictimsResponse",
    "VoteResponse",
]

UNSET = msgspec.UNSET

# api.TaskStatus bit flags (pkg/scheduler/api/types.go).
TASK_PENDING = 1
TASK_RUNNING = 32
TASK_RELEASING = 64


class TaskInfo(msgspec.Struct, rename="pascal"):
    """``api.TaskInfo``: ``UID`` is the pod UID, ``Job`` is ``<namespace>/<podgroup>``;
    ``NodeName`` and ``Status`` are promoted from the embedded TransactionContext."""

    uid: str = msgspec.field(default="", name="UID")
    job: str = ""
    name: str = ""
    namespace: str = ""
    node_name: str = ""
    status: int = 0
    priority: int = 0
    pod: Pod | None = None


class NodeInfo(msgspec.Struct, rename="pascal"):
    """``api.NodeInfo``: the name, and the Node kept raw, decoded only when raygate's cache
    does not know the node."""

    name: str = ""
    node: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    """Raw JSON, ``null`` when absent (msgspec cannot put Raw in a union)."""


class PredicateRequest(msgspec.Struct):
    task: TaskInfo | msgspec.UnsetType | None = UNSET
    node: NodeInfo | msgspec.UnsetType | None = UNSET


class PredicateResponse(msgspec.Struct):
    """``status`` is the Go field ErrorMessage: a *string*; empty passes, whatever
    ``code`` says. Codes: 0 Success, 1 Error, 2 Unschedulable,
    3 UnschedulableAndUnresolvable, 4 Wait, 5 Skip."""

    status: str = ""
    code: int = 0


class PrioritizeRequest(msgspec.Struct):
    task: TaskInfo | msgspec.UnsetType | None = UNSET
    nodes: list[NodeInfo] | msgspec.UnsetType | None = UNSET


class PrioritizeResponse(msgspec.Struct, rename="camel"):
    """``nodeScore`` must never be null: Volcano treats null or a missing key as an error
    and then chooses no node from the candidate group."""

    node_score: dict[str, float] = msgspec.field(default_factory=dict)
    error_message: str = ""


class VictimsRequest(msgspec.Struct):
    """``PreemptableRequest`` (and ``ReclaimableRequest``, the same type). Evictees stay raw:
    the victims raygate agrees to are echoed back byte for byte, because Volcano uses the
    returned TaskInfos directly (``Resreq`` for the resource maths, ``Job``, ``NodeName``
    and ``Pod`` to evict)."""

    evictor: TaskInfo | msgspec.UnsetType | None = UNSET
    evictees: list[msgspec.Raw] | msgspec.UnsetType | None = UNSET


class VictimsResponse(msgspec.Struct):
    """``status`` is an *int* vote here: 1 permit, 0 abstain, -1 reject. A non-zero vote
    with an empty list vetoes eviction in raygate's tier."""

    status: int = 0
    victims: list[msgspec.Raw] | None = None


class JobInfo(msgspec.Struct, rename="pascal"):
    uid: str = msgspec.field(default="", name="UID")
    name: str = ""
    namespace: str = ""
    queue: str = ""
    min_available: int = 0
    priority: int = 0


class JobEnqueueableRequest(msgspec.Struct):
    job: JobInfo | msgspec.UnsetType | None = UNSET


class VoteResponse(msgspec.Struct):
    status: int = 0


# One decoder per request shape, built once: each verb's body is decoded straight into
# its struct.
PREDICATE_REQUEST = msgspec.json.Decoder(PredicateRequest)
PRIORITIZE_REQUEST = msgspec.json.Decoder(PrioritizeRequest)
VICTIMS_REQUEST = msgspec.json.Decoder(VictimsRequest)
TASK_INFO = msgspec.json.Decoder(TaskInfo)
"""An evictee of a victims request: kept raw in the request, decoded one by one, so the
reply can echo the ones that may go byte for byte."""
JOB_ENQUEUEABLE_REQUEST = msgspec.json.Decoder(JobEnqueueableRequest)
