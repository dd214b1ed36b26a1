"""The objects raygate decodes (``kube.*``, ``volcano.*``), from the msgspec structs of
``raygate.server.wire`` themselves, so that the document cannot drift from the decoder:
with quantities and times constrained as raygate parses them."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from raygate.server.cache import convert
from raygate.server.wire import kube, volcano
from tools.openapi.schema import Schema, nullable, ref

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


def tidy(node: Any, parsed: bool = True) -> Any:
    """msgspec's schema, as a request schema: no titles or docstrings (they describe the
    decoder), no empty ``required``; with ``parsed``, quantities and times as raygate
    parses them (the webhook parses neither)."""
    if isinstance(node, list):
        return [tidy(item, parsed) for item in node]
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
            out[key] = {name: _time(name, tidy(schema, parsed)) if parsed
                        else tidy(schema, parsed) for name, schema in value.items()}
        else:
            out[key] = tidy(value, parsed)
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
    components = {f"kube.{name}": tidy(schema) for name, schema in kube_components.items()}
    for name, schema in volcano_components.items():
        if name in kube_components:  # the Pod inside a TaskInfo is kube's
            continue
        components[f"volcano.{name}"] = tidy(schema)
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
