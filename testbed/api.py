"""A small JSON client of the testbed's kube-apiserver, as the admin: what scenarios need
(read, create, patch, watch), objects as plain JSON, no client models."""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

__all__ = ["Api", "ApiError"]

Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server
        self.context = context

    def _open(self, method: str, path: str, body: Obj | list[Obj] | None = None,
              content_type: str = "application/json", timeout: float = 30.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method,
                                         headers={"Content-Type": content_type,
                                                  "Accept": "application/json"})
        try:
            return urllib.request.urlopen(request, context=self.context, timeout=timeout)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(exc.code, f"{method} {path}: {detail}") from None

    def request(self, method: str, path: str, body: Obj | list[Obj] | None = None,
                content_type: str = "application/json") -> Obj:
        with self._open(method, path, body, content_type) as reply:
            result: Obj = json.loads(reply.read())
            return result

    def get(self, path: str, **query: str) -> Obj:
        return self.request("GET", f"{path}?{urlencode(query)}" if query else path)

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
        query = urlencode({"watch": "true", "resourceVersion": resource_version,
                           "timeoutSeconds": str(timeout_seconds),
                           "allowWatchBookmarks": "false"})
        with self._open("GET", f"{path}?{query}", timeout=timeout_seconds + 30) as reply:
            for line in reply:
                event = json.loads(line)
                if event["type"] == "ERROR":
                    status = event["object"]
                    raise ApiError(int(status.get("code", 500)), status.get("message", ""))
                yield event["type"], event["object"]
