"""A small, synchronous client of raygate's admission-status API, over HTTP or gRPC.

    from raygate.client import connect

    with connect("http://raygate.raygate-system:8888") as client:  # or "grpc://host:9090"
        status = client.get("ray", "demo")
        for pod in status.pods:
            print(pod.name, pod.state, pod.advice.action)
        for event in client.watch(namespace="ray"):  # ADDED..., SYNCED, then changes
            ...

Both transports return the same types (``raygate.extender.wire.admission_status``). Errors are
``raygate.extender.errors`` types: ``RayClusterNotFound`` (with ``synced``), ``BadRequest``,
``Unavailable`` when raygate cannot be reached, ``Unauthorized``/``Forbidden`` when
raygate checks callers and this one may not read, ``RaygateError`` for anything else. A
client is not thread-safe: use one per thread. Only the standard library and ``grpcio``
(for ``grpc://``) are needed.

Where raygate checks its callers (in-cluster, by default), a client sends a bearer
token: ``token=token_file(path)`` reads it from a file on every call, as a pod's service
account token must be read (the kubelet rotates it).
"""

from __future__ import annotations

import abc
import contextlib
import http.client
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import NoReturn, Protocol, Self
from urllib.parse import quote, urlencode, urlsplit

import grpc
import msgspec

from raygate.extender.errors import (
    GRPC_SYNCED_KEY,
    BadRequest,
    Forbidden,
    RayClusterNotFound,
    RaygateError,
    Unauthorized,
    Unavailable,
)
from raygate.extender.proto.raygate.v1 import admission_pb2 as pb
from raygate.extender.proto.raygate.v1 import admission_pb2_grpc
from raygate.extender.wire import admission_status as wire
from raygate.extender.wire.admission_status import AdmissionStatus, AdmissionStatusList, WatchEvent

__all__ = [
    "SERVICE_ACCOUNT_TOKEN",
    "AdmissionClient",
    "GrpcAdmissionClient",
    "HttpAdmissionClient",
    "Token",
    "Watch",
    "connect",
    "token_file",
]

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""Where Kubernetes mounts a pod's service account token."""

Token = Callable[[], str | None]
"""Gives the bearer token to send with a call (None: send none)."""


def token_file(path: str) -> Token:
    """The token in ``path``, read again on every call: a projected service account token
    is rotated by the kubelet (and a missing file sends no token, the server says 401)."""

    def read() -> str | None:
        try:
            with open(path, encoding="utf-8") as file:
                return file.read().strip() or None
        except OSError:
            return None

    return read


class AdmissionClient(Protocol):
    def get(self, namespace: str, name: str) -> AdmissionStatus:
        """The status of one RayCluster; ``RayClusterNotFound`` if raygate does not know it."""
        ...

    def list(self, namespace: str | None = None) -> AdmissionStatusList:
        """Every RayCluster's status, or one namespace's."""
        ...

    def watch(self, namespace: str | None = None, name: str | None = None) -> Watch:
        """ADDED per existing cluster, SYNCED, then ADDED/MODIFIED/DELETED per change, for
        one cluster (both set), a namespace, or everything. Runs until ``Watch.close()``
        (from any thread) or until raygate goes away (``Unavailable``)."""
        ...

    def close(self) -> None:
        ...

    def __enter__(self) -> Self:
        ...

    def __exit__(self, *exc: object) -> None:
        ...


def connect(url: str, timeout: float = 10.0, token: Token | None = None,
            ) -> HttpAdmissionClient | GrpcAdmissionClient:
    """A client for ``http://host:port`` (raygate's HTTP port) or ``grpc://host:port``."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        return HttpAdmissionClient(url, timeout=timeout, token=token)
    if parts.scheme == "grpc":
        return GrpcAdmissionClient(parts.netloc, timeout=timeout, token=token)
    raise ValueError(f"expected an http://, https:// or grpc:// URL, got {url!r}")


class Watch(Iterator[WatchEvent]):
    """The events of a watch; ``close()`` ends it from any thread (the iterating thread
    then sees the iteration end)."""

    def __init__(self, events: Iterator[WatchEvent], cancel: Callable[[], None]) -> None:
        self._events = events
        self._cancel = cancel
        self.closed = False

    def __next__(self) -> WatchEvent:
        return next(self._events)

    def close(self) -> None:
        self.closed = True
        self._cancel()
        close = getattr(self._events, "close", None)
        if close is not None:
            with contextlib.suppress(ValueError):  # running in another thread: cancelled
                close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Closing(abc.ABC):
    """Context-manager support for the clients: ``with connect(url) as client``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection or channel."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


Statuses = list[AdmissionStatus]  # (inside the classes, `list` is a method)

_decode_status = msgspec.json.Decoder(AdmissionStatus).decode
_decode_list = msgspec.json.Decoder(AdmissionStatusList).decode


class _Error(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""
    synced: bool | None = None


class _ErrorReply(msgspec.Struct):
    error: _Error = msgspec.field(default_factory=_Error)


def _diff(sent: dict[tuple[str, str], AdmissionStatus], items: list[AdmissionStatus],
          ) -> tuple[list[WatchEvent], dict[tuple[str, str], AdmissionStatus]]:
    now = {(s.metadata.namespace, s.metadata.name): s for s in items}
    events = [WatchEvent("ADDED" if key not in sent else "MODIFIED", status)
              for key, status in now.items()
              if key not in sent or sent[key].metadata.version != status.metadata.version]
    events += [WatchEvent("DELETED", status) for key, status in sent.items() if key not in now]
    return events, now


class HttpAdmissionClient(_Closing):
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
                    raise Unavailable(f"raygate at {self._connection.host}: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._connection.close()
                raise Unavailable(f"raygate at {self._connection.host}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _raise(status: int, body: bytes, namespace: str = "", name: str = "") -> NoReturn:
        try:
            error = msgspec.json.decode(body, type=_ErrorReply).error
        except (msgspec.DecodeError, msgspec.ValidationError):
            error = _Error(status, "", body[:200].decode("utf-8", "replace"))
        if status == 404 and error.synced is not None:
            raise RayClusterNotFound(namespace, name, error.synced)
        if status == 400:
            raise BadRequest(error.message)
        if status == 401:
            raise Unauthorized(error.message)
        if status == 403:
            raise Forbidden(error.message)
        if status == 503:
            raise Unavailable(error.message)
        raise RaygateError(f"HTTP {status}: {error.message or error.reason}")

    @staticmethod
    def _path(namespace: str, name: str) -> str:
        return (f"/v1/namespaces/{quote(namespace, safe='')}/rayclusters/"
                f"{quote(name, safe='')}/admission")

    def get(self, namespace: str, name: str) -> AdmissionStatus:
        status, body = self._get(self._path(namespace, name), {})
        if status != 200:
            self._raise(status, body, namespace, name)
        return _decode_status(body)

    def list(self, namespace: str | None = None) -> AdmissionStatusList:
        status, body = self._get("/v1/admission", {"namespace": namespace} if namespace else {})
        if status != 200:
            self._raise(status, body)
        return _decode_list(body)

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
                    return "", []  # absent: "" waits for it to appear
            if status != 200:
                self._raise(status, body, namespace, name)
            one = _decode_status(body)
            return one.metadata.version, [one]
        if namespace is not None:
            query["namespace"] = namespace
        status, body = self._get("/v1/admission", query, wait)
        if status != 200:
            self._raise(status, body)
        listing = _decode_list(body)
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
            events, sent = _diff({}, items)
            yield from events
            yield WatchEvent("SYNCED", None)
            while not stopped.is_set():
                version, items = self._poll(namespace, name, version)
                events, sent = _diff(sent, items)
                yield from events
        except Unavailable:
            if not stopped.is_set():
                raise


class GrpcAdmissionClient(_Closing):
    """The gRPC API (``raygate.v1.Admission``) over one channel; ``watch`` streams."""

    def __init__(self, target: str, timeout: float = 10.0,
                 channel: grpc.Channel | None = None, token: Token | None = None) -> None:
        self._channel = channel or grpc.insecure_channel(target)
        self._stub = admission_pb2_grpc.AdmissionStub(self._channel)
        self.target = target
        self.timeout = timeout
        self.token = token

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        bearer = self.token() if self.token is not None else None
        return (("authorization", f"Bearer {bearer}"),) if bearer else ()

    def close(self) -> None:
        self._channel.close()

    def _error(self, error: grpc.RpcError, namespace: str = "", name: str = "",
               ) -> RaygateError:
        code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = (error.details() if isinstance(error, grpc.Call) else "") or str(code)
        if code is grpc.StatusCode.NOT_FOUND and isinstance(error, grpc.Call):
            trailer = dict(error.trailing_metadata() or ())
            return RayClusterNotFound(namespace, name, trailer.get(GRPC_SYNCED_KEY) == "true")
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            return BadRequest(details)
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return Unauthorized(details)
        if code is grpc.StatusCode.PERMISSION_DENIED:
            return Forbidden(details)
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return Unavailable(f"raygate at {self.target}: {details}")
        return RaygateError(f"gRPC {code.name}: {details}")

    def get(self, namespace: str, name: str) -> AdmissionStatus:
        try:
            reply = self._stub.Get(pb.GetRequest(namespace=namespace, name=name),
                                   timeout=self.timeout, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise self._error(exc, namespace, name) from exc
        return wire.from_proto(reply)

    def list(self, namespace: str | None = None) -> AdmissionStatusList:
        try:
            reply = self._stub.List(pb.ListRequest(namespace=namespace or ""),
                                    timeout=self.timeout, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        return wire.list_from_proto(reply)

    def watch(self, namespace: str | None = None, name: str | None = None) -> Watch:
        if name is not None and namespace is None:
            raise ValueError("a name needs its namespace")
        stream = self._stub.Watch(pb.WatchRequest(namespace=namespace or "", name=name or ""),
                                  metadata=self._metadata())

        def cancel() -> None:
            stream.cancel()

        return Watch(self._events(stream, namespace or "", name or ""), cancel)

    def _events(self, stream: Iterator[pb.WatchEvent], namespace: str, name: str,
                ) -> Iterator[WatchEvent]:
        try:
            for event in stream:
                kind = pb.WatchEvent.Type.Name(event.type)
                yield WatchEvent(kind, wire.from_proto(event.status)
                                 if event.HasField("status") else None)
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.Call) and exc.code() is grpc.StatusCode.CANCELLED:
                return  # Watch.close()
            raise self._error(exc, namespace, name) from exc



def main(argv: list[str] | None = None) -> int:
    """``python -m raygate.client URL get NS NAME | list [NS] | watch [NS [NAME]]``: the
    API from a shell, one JSON document per line (the HTTP API's shapes, either transport)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m raygate.client", description=main.__doc__)
    parser.add_argument("url", help="http://HOST:PORT or grpc://HOST:PORT")
    parser.add_argument("verb", choices=["get", "list", "watch"])
    parser.add_argument("args", nargs="*", metavar="NAMESPACE [NAME]")
    options = parser.parse_args(argv)
    if len(options.args) > 2 or (options.verb == "get" and len(options.args) != 2):
        parser.error("get takes NAMESPACE NAME; list and watch take [NAMESPACE [NAME]]")
    namespace, name = [*options.args, None, None][:2]
    encode = msgspec.json.encode
    try:
        with connect(options.url) as client:
            if options.verb == "get":
                sys.stdout.buffer.write(encode(client.get(str(namespace), str(name))) + b"\n")
            elif options.verb == "list":
                sys.stdout.buffer.write(encode(client.list(namespace)) + b"\n")
            else:
                with client.watch(namespace, name) as events:
                    for event in events:
                        sys.stdout.buffer.write(encode(event) + b"\n")
                        sys.stdout.flush()
    except RaygateError as exc:
        print(f"raygate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
