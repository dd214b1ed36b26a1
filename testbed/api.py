"""The testbed's kube-apiserver as scenarios use it: read, create, patch, watch, objects as
plain JSON. Connection, TLS and credentials are the ``kubernetes`` client's (through
``raygate.server.kube.client.load_connection``, as raygate itself connects); replies
are read raw, never as the client's model objects."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s

from raygate.server.kube.client import load_connection

__all__ = ["Api", "ApiError"]

Obj = dict[str, Any]


class ApiError(Exception):
    """An error reply, or ``status`` 0: no answer (the server is away, the stream broke)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    def __init__(self, kubeconfig: Path) -> None:
        self.client = k8s.ApiClient(load_connection(str(kubeconfig), None, {}).configuration)

    def _call(self, method: str, path: str, *, body: Obj | list[Obj] | None = None,
              query: list[tuple[str, str]] | None = None,
              content_type: str = "application/json", timeout: float = 30.0) -> Any:
        """The raw urllib3 response of a 2xx reply; anything else raises ``ApiError``."""
        method, url, headers, serialized, _ = self.client.param_serialize(
            method, path, query_params=query or [], body=body,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            auth_settings=["BearerToken"])
        try:
            response = self.client.call_api(method, url, header_params=headers,
                                            body=serialized,
                                            _request_timeout=(10.0, timeout)).response
        except (urllib3.exceptions.HTTPError, k8s.ApiException, OSError) as exc:
            raise ApiError(0, f"{method} {path}: {exc}") from None
        if not 200 <= response.status < 300:
            detail = response.data.decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(response.status, f"{method} {path}: {detail}")
        return response

    def request(self, method: str, path: str, body: Obj | list[Obj] | None = None,
                content_type: str = "application/json",
                query: list[tuple[str, str]] | None = None) -> Obj:
        result: Obj = json.loads(self._call(method, path, body=body, query=query,
                                            content_type=content_type).data)
        return result

    def get(self, path: str, **query: str) -> Obj:
        return self.request("GET", path, query=list(query.items()))

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body)

    def json_patch(self, path: str, patch: list[Obj]) -> Obj:
        return self.request("PATCH", path, patch, "application/json-patch+json")

    def items(self, path: str, **query: str) -> list[Obj]:
        result: list[Obj] = self.get(path, **query)["items"]
        return result

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
              ) -> Iterator[tuple[str, Obj]]:
        """(type, object) of each event from ``resource_version`` until the server ends
        the watch; an ERROR event (410 Gone, say) raises ``ApiError``."""
        query = [("watch", "true"), ("resourceVersion", resource_version),
                 ("timeoutSeconds", str(timeout_seconds))]
        response = self._call("GET", path, query=query, timeout=timeout_seconds + 30)
        try:
            for line in response:
                event = json.loads(line)
                if event["type"] == "ERROR":
                    status = event["object"]
                    raise ApiError(int(status.get("code", 500)), status.get("message", ""))
                yield event["type"], event["object"]
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"watch {path}: {exc}") from None
        finally:
            response.release_conn()
