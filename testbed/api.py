"""The one client of the testbed's kube-apiserver: the scenarios (``e2e/``), the testbed's
add-ons (``Testbed.api``) and the benchmarks (``bench/``) read, create, patch and watch
through it. Keep-alive connections (one per thread), objects as plain JSON, raw bytes
where a benchmark times the server or asks for protobuf, and a watch.

``bench.cache_scale`` loads 150,000 pods through it from 16 threads; its
``ensure`` skips field validation and reads back what a retried create finds there.
Requests that a dropped connection fails are retried; so are those a busy server
answers 429 or 5xx, unless ``retry_statuses`` says otherwise (``Testbed.api``: a scenario
sees every status the server answers). A watch is never retried here (its caller resumes
it).
"""

from __future__ import annotations

import contextlib
import http.client
import ssl
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import msgspec

__all__ = ["RETRY_STATUSES", "ApiError", "KubeApi"]

Obj = dict[str, Any]
ATTEMPTS = 8
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
Query = Iterable[tuple[str, str]] | None


class ApiError(Exception):
    """An error reply, or ``status`` 0: no answer (the server is away, the stream broke)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status


def _message(data: bytes) -> str:
    """A Status reply's message, else the start of the body."""
    with contextlib.suppress(msgspec.DecodeError, AttributeError, TypeError):
        message = msgspec.json.decode(data).get("message")
        if isinstance(message, str):
            return message
    return repr(data[:300])


class KubeApi:
    """kube-apiserver at ``server`` (``https://host:port``, or ``http://``), as the client
    certificate of ``context`` says (or a bearer ``token``)."""

    def __init__(self, server: str, context: ssl.SSLContext | None = None, *,
                 token: str = "", timeout: float = 60.0,
                 retry_statuses: frozenset[int] = RETRY_STATUSES) -> None:
        url = urlsplit(server)
        self.https = url.scheme == "https"
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if self.https else 80)
        self.context = context
        self.token = token
        self.timeout = timeout
        self.retry_statuses = retry_statuses
        self.local = threading.local()
        self._lock = threading.Lock()
        self._open: list[http.client.HTTPConnection] = []

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path, *, timeout: float = 60.0,
                        retry_statuses: frozenset[int] = RETRY_STATUSES) -> KubeApi:
        """As ``kubeconfig`` says (its server, CA, client certificate or token), read by the
        ``kubernetes`` client's loader, as raygate reads its own."""
        # Here, not above: only a scenario needs it (the server extra), not every bench.
        from raygate.server.kube.client import load_connection

        conf = load_connection(str(kubeconfig), None, {}).configuration
        context = ssl.create_default_context(cafile=conf.ssl_ca_cert)
        if conf.cert_file:
            context.load_cert_chain(conf.cert_file, conf.key_file)
        bearer = conf.auth_settings().get("BearerToken", {}).get("value") or ""
        token = str(bearer).removeprefix("Bearer ")
        return cls(conf.host, context, token=token, timeout=timeout,
                   retry_statuses=retry_statuses)

    def __del__(self) -> None:
        # A client dropped without ``close()`` closes its connections, as the kubernetes
        # client's ApiClient does: not the sockets' finalizers, with a ResourceWarning.
        with contextlib.suppress(Exception):
            self.close()

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                               timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = self._connect(self.timeout)
            with self._lock:
                self._open.append(conn)
        return conn

    def close(self) -> None:
        """Close every thread's keep-alive connection (a later request opens another)."""
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()

    def _headers(self, content_type: str, accept: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A connection of the caller's own (a stream it reads itself)."""
        return self._connect(timeout)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def call(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json", ok: Iterable[int] = (), *,
             accept: str = "application/json") -> bytes:
        """The reply's body of a 2xx (or an ``ok``) status; retries what a busy server
        or a dropped connection fails."""
        return self._call(method, path, body, self._headers(content_type, accept), ok)[0]

    def fetch(self, path: str, *, accept: str = "application/json", encoding: str = "",
              ) -> tuple[bytes, bool]:
        """A GET's body as it came, asking for ``encoding`` (``gzip``), and whether it
        came so encoded."""
        headers = self._headers("application/json", accept)
        if encoding:
            headers["Accept-Encoding"] = encoding
        data, encoded = self._call("GET", path, None, headers, ())
        return data, bool(encoding) and encoded == encoding

    def _call(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
              ok: Iterable[int]) -> tuple[bytes, str]:
        """The body and Content-Encoding of a 2xx (or an ``ok``) reply, with retries."""
        for attempt in range(ATTEMPTS):
            last = attempt == ATTEMPTS - 1
            conn = self._connection()
            try:
                conn.request(method, path, body, headers)
                reply = conn.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self.local.conn = None
                if last:
                    raise ApiError(0, f"{method} {path}: {exc}") from None
                time.sleep(0.1 * 2 ** attempt)
                continue
            if 200 <= reply.status < 300 or reply.status in ok:
                return data, reply.getheader("Content-Encoding") or ""
            if reply.status in self.retry_statuses and not last:
                time.sleep(0.1 * 2 ** attempt)
                continue
            raise ApiError(reply.status, f"{method} {path}: {_message(data)}")
        raise AssertionError("unreachable")

    # --- objects as JSON ------------------------------------------------------------------

    def request(self, method: str, path: str, body: Obj | list[Obj] | None = None,
                content_type: str = "application/json", query: Query = None) -> Obj:
        """The decoded reply of ``method`` on ``path`` (with ``query``) sending ``body``."""
        if query:
            path = f"{path}?{urlencode(list(query))}"
        data = self.call(method, path, None if body is None else msgspec.json.encode(body),
                         content_type)
        result: Obj = msgspec.json.decode(data)
        return result

    def get(self, path: str, **query: str) -> Obj:
        return self.request("GET", path, query=list(query.items()))

    def items(self, path: str, **query: str) -> list[Obj]:
        result: list[Obj] = self.get(path, **query)["items"]
        return result

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create(self, path: str, body: Obj) -> Obj:
        """POST ``body`` to the collection at ``path``; the object as created."""
        return self.request("POST", path, body)

    def ensure(self, collection: str, obj: Obj) -> Obj:
        """POST ``obj``; an object that exists already (a retried create) is read back.
        Without field validation (``fieldValidation=Ignore``, not the default Warn, which
        decodes every body a second time, strictly): the bodies are known good."""
        data = self.call("POST", f"{collection}?fieldValidation=Ignore",
                         msgspec.json.encode(obj), ok=(409,))
        created: Obj = msgspec.json.decode(data)
        if created.get("kind") == "Status":
            created = msgspec.json.decode(self.call(
                "GET", f"{collection}/{obj['metadata']['name']}"))
        return created

    def json_patch(self, path: str, patch: list[Obj]) -> Obj:
        return self.request("PATCH", path, patch, "application/json-patch+json")

    def put_status(self, path: str, obj: Obj, status: Obj) -> None:
        """Write ``status`` into ``obj`` as the API server returned it (a PUT of the status
        subresource: cheaper for the server than a patch, which it applies to the stored
        object's JSON)."""
        body = msgspec.json.encode({**obj, "status": status})
        self.call("PUT", f"{path}/status?fieldValidation=Ignore", body)

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
              ) -> Generator[tuple[str, Obj], None, None]:
        """(type, object) of each event from ``resource_version`` until the server ends
        the watch, on a connection of its own; an ERROR event (410 Gone, say) raises
        ``ApiError``, a broken stream ``ApiError`` with status 0."""
        query = urlencode({"watch": "true", "resourceVersion": resource_version,
                           "timeoutSeconds": str(timeout_seconds)})
        conn = self._connect(timeout_seconds + 30.0)
        try:
            conn.request("GET", f"{path}?{query}", None,
                         self._headers("application/json", "application/json"))
            reply = conn.getresponse()
            if reply.status != 200:
                raise ApiError(reply.status, f"watch {path}: {_message(reply.read())}")
            yield from _events(reply, path)
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(0, f"watch {path}: {exc}") from None
        finally:
            conn.close()


def _events(reply: http.client.HTTPResponse, path: str) -> Iterator[tuple[str, Obj]]:
    while line := reply.readline():
        if not line.strip():
            continue
        event = msgspec.json.decode(line)
        if event["type"] == "ERROR":
            status = event["object"]
            raise ApiError(int(status.get("code", 500)),
                           f"watch {path}: {status.get('message', '')}")
        yield event["type"], event["object"]
