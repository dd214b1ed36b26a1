"""The client of raygate's HTTP API: the admission status (GET, long-poll, a Watch made of
long-polls) and explain."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from typing import NoReturn
from urllib.parse import quote, urlencode, urlsplit

import msgspec

from raygate.client.base import Closing, Statuses, Token, Watch, diff
from raygate.contract.admission_status import AdmissionStatus, AdmissionStatusList, WatchEvent
from raygate.contract.errors import (
    HTTP_ERRORS,
    ErrorBody,
    ErrorReply,
    RayClusterNotFound,
    RaygateError,
    Unavailable,
)
from raygate.contract.explain import ExplainReply

decode_status = msgspec.json.Decoder(AdmissionStatus).decode


decode_list = msgspec.json.Decoder(AdmissionStatusList).decode


decode_explanation = msgspec.json.Decoder(ExplainReply).decode


class HttpAdmissionClient(Closing):
    """The HTTP API, one keep-alive connection; ``watch`` long-polls."""

    def __init__(self, base_url: str, timeout: float = 10.0, poll_seconds: float = 30.0,
                 ssl_context: ssl.SSLContext | None = None, token: Token | None = None,
                 ) -> None:
        """``ssl_context``: for ``https://`` (a CA bundle, a client certificate); the
        system's default context when None. ``token``: a bearer token for each call."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL, got {base_url!r}")
        self._connection: http.client.HTTPConnection = (
            http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                        context=ssl_context)
            if parts.scheme == "https" else
            http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout))
        self._prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.poll_seconds = poll_seconds
        self.token = token

    def close(self) -> None:
        self._connection.close()

    def _get(self, path: str, query: dict[str, str], wait: float = 0.0,
             ) -> tuple[int, bytes]:
        url = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        # A long-poll holds the reply for up to `wait` seconds: the socket waits longer.
        self._connection.timeout = self.timeout + wait
        for attempt in (1, 2):
            try:
                if self._connection.sock is not None:
                    self._connection.sock.settimeout(self.timeout + wait)
                headers = {"Accept": "application/json"}
                bearer = self.token() if self.token is not None else None
                if bearer:
                    headers["Authorization"] = f"Bearer {bearer}"
                self._connection.request("GET", url, headers=headers)
                response = self._connection.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as exc:
                # The server closed an idle keep-alive connection: reconnect once.
                self._connection.close()
                if attempt == 2:
                    raise self._unreachable(exc) from exc
            except (OSError, http.client.HTTPException) as exc:
                self._connection.close()
                raise self._unreachable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _unreachable(self, error: Exception) -> Unavailable:
        return Unavailable(f"cannot reach raygate at {self._connection.host}:"
                           f"{self._connection.port}: {error}")

    @staticmethod
    def _raise(status: int, body: bytes, namespace: str = "", name: str = "") -> NoReturn:
        try:
            error = msgspec.json.decode(body, type=ErrorReply).error
        except (msgspec.DecodeError, msgspec.ValidationError):
            error = ErrorBody(status, "", body[:200].decode("utf-8", "replace"))
        if status == RayClusterNotFound.status and error.synced is not None:
            raise RayClusterNotFound(namespace, name, error.synced)
        kind = HTTP_ERRORS.get(status)
        if kind is None:
            raise RaygateError(f"HTTP {status}: {error.message or error.reason}")
        raise kind(error.message)

    @staticmethod
    def _path(namespace: str, name: str) -> str:
        return (f"/v1/namespaces/{quote(namespace, safe='')}/rayclusters/"
                f"{quote(name, safe='')}/admission")

    def get(self, namespace: str, name: str) -> AdmissionStatus:
        status, body = self._get(self._path(namespace, name), {})
        if status != 200:
            self._raise(status, body, namespace, name)
        return decode_status(body)

    def list(self, namespace: str | None = None) -> AdmissionStatusList:
        status, body = self._get("/v1/admission", {"namespace": namespace} if namespace else {})
        if status != 200:
            self._raise(status, body)
        return decode_list(body)

    def explain(self, namespace: str, name: str, node_names: Sequence[str] | None = None,
                ) -> ExplainReply:
        path = (f"/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
                "/explain")
        status, body = self._get(path, {"nodes": ",".join(node_names)} if node_names else {})
        if status != 200:
            self._raise(status, body)
        return decode_explanation(body)

    def _poll(self, namespace: str | None, name: str | None, version: str | None,
              ) -> tuple[str, Statuses]:
        """(version, statuses) once the version differs from ``version`` (None: now)."""
        query: dict[str, str] = {}
        wait = 0.0
        if version is not None:
            query = {"waitForChange": version, "timeoutSeconds": f"{self.poll_seconds:g}"}
            wait = self.poll_seconds
        if namespace is not None and name is not None:
            status, body = self._get(self._path(namespace, name), query, wait)
            if status == 404:
                try:
                    self._raise(status, body, namespace, name)
                except RayClusterNotFound:
                    # Absent (raygate answers that at once): wait on the namespace's
                    # listing for it to appear. Its version passed back here next time
                    # differs from any cluster's, so that poll answers at once too.
                    listed, items = self._poll(namespace, None, version)
                    return listed, [s for s in items if s.metadata.name == name]
            if status != 200:
                self._raise(status, body, namespace, name)
            one = decode_status(body)
            return one.metadata.version, [one]
        if namespace is not None:
            query["namespace"] = namespace
        status, body = self._get("/v1/admission", query, wait)
        if status != 200:
            self._raise(status, body)
        listing = decode_list(body)
        return listing.metadata.version, listing.items

    def watch(self, namespace: str | None = None, name: str | None = None) -> Watch:
        if name is not None and namespace is None:
            raise ValueError("a name needs its namespace")
        stopped = threading.Event()

        def cancel() -> None:  # from any thread: a long-poll blocked in recv() returns
            stopped.set()
            sock = self._connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        return Watch(self._watch(namespace, name, stopped), cancel)

    def _watch(self, namespace: str | None, name: str | None, stopped: threading.Event,
               ) -> Iterator[WatchEvent]:
        try:
            version, items = self._poll(namespace, name, None)
            events, sent = diff({}, items)
            yield from events
            yield WatchEvent("SYNCED", None)
            while not stopped.is_set():
                version, items = self._poll(namespace, name, version)
                events, sent = diff(sent, items)
                yield from events
        except Unavailable:
            if not stopped.is_set():
                raise
