"""The words every part of the document uses: a schema, a reference to a component, a
nullable value, a map, a JSON body, raygate's error."""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]
"""A JSON Schema (or an OpenAPI object), as the document holds it."""


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def strings_to(value: Schema) -> Schema:
    return {"type": "object", "additionalProperties": value}


def json_body(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERROR = ref("Error")
