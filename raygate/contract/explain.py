"""The explain API's reply (``raygate.io/v1`` ``Explanation``): the placement decision for
one pod and each node's verdict, as the server sends it and ``raygate explain`` reads it.

camelCase keys, as the rest of raygate's API; ``raygate/server/openapi.json`` describes
the same document (its schemas are generated from these structs, but the scale gates':
the admission status' ``ScaleGate``, whose schema is written there by hand)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from raygate.contract.admission_status import ScaleGate

__all__ = ["ExplainReply", "NodeReply"]


class _Base(msgspec.Struct, rename="camel"):
    """camelCase keys, as the rest of raygate's API."""


# No docstrings on the replies: a struct's docstring becomes its description in the
# OpenAPI document generated from them.
class NodeReply(_Base):
    name: str
    node_class: str
    class_reason: str
    passes: bool
    rule: str
    reason: str
    score: int | None


class ExplainReply(_Base, kw_only=True):
    api_version: str = "raygate.io/v1"
    kind: str = "Explanation"
    pod: str
    verdict: str
    rule: str
    role: str
    reason: str
    thrash_guard_until: datetime | None
    thrash_guard_active: bool
    admission_state: str | None = None
    admission_reason: str | None = None
    native_placement: str | None = None
    nodes: list[NodeReply]
    # The pod's group's, as its RayCluster's admission status shows them. A default, so
    # that a reply of a server before it still reads.
    scale_gates: list[ScaleGate] = msgspec.field(default_factory=list)
