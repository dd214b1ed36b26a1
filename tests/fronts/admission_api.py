"""The admission-status HTTP API as its tests call it: a GET of one RayCluster's status,
and every reply checked against the OpenAPI document's schema for its route and status."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tools import openapi_document

OPENAPI = json.loads(openapi_document.DOCUMENT.read_text())
WAIT = 10.0
"""Seconds to wait for something that happens in milliseconds: generous, never a sleep."""


def path_of(namespace: str, name: str) -> str:
    return f"/v1/namespaces/{namespace}/rayclusters/{name}/admission"


def check(template: str, response: httpx.Response) -> Any:
    """The reply's JSON, after checking it against the OpenAPI document's schema for
    ``template`` and the reply's status."""
    operation = OPENAPI["paths"][template]["get"]
    spec = operation["responses"][str(response.status_code)]
    if response.status_code == 304:
        assert response.content == b""
        assert response.headers["etag"]
        return None
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    errors = openapi_document.schema_errors(spec["content"]["application/json"]["schema"], body)
    assert not errors, errors
    return body


GET = "/v1/namespaces/{namespace}/rayclusters/{name}/admission"
LIST = "/v1/admission"


def get(client: httpx.Client, namespace: str, name: str, **params: Any) -> httpx.Response:
    return client.get(path_of(namespace, name), params=params)
