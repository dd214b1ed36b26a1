"""What both transports of the admission-status client share: the client protocol, the
Watch, tokens, closing."""

from __future__ import annotations

import abc
import contextlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

from raygate.contract.admission_status import (
    AdmissionStatus,
    AdmissionStatusList,
    WatchEvent,
    changes,
)
from raygate.contract.explain import ExplainReply

__all__ = ["ENV_TOKEN_FILE", "SERVICE_ACCOUNT_TOKEN", "AdmissionClient", "Closing", "Statuses",
           "TlsSettings", "Token", "Watch", "diff", "token_file"]

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""Where Kubernetes mounts a pod's service account token."""
ENV_TOKEN_FILE = "RAYGATE_TOKEN_FILE"
"""The token file of raygate's clients that are not told one otherwise (raygate-autoscaler,
``raygate explain --server``, ``raygate admission``); set and empty: none."""

Token = Callable[[], str | None]
"""Gives the bearer token to send with a call (None: send none)."""


def token_file(path: str) -> Token:
    """The token in ``path``, read again on every call: a projected service account token
    is rotated by the kubelet (and a missing file sends no token, the server says 401).
    A pipe (``--token-file <(kubectl create token ...)``) can be read only once: what it
    gave is kept."""
    kept: list[str | None] = []

    def read() -> str | None:
        if kept:
            return kept[0]
        try:
            with open(path, encoding="utf-8") as file:
                token = file.read().strip() or None
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    kept.append(token)
                return token
        except OSError:
            return None

    return read


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """For ``https://`` and ``grpcs://`` URLs only."""

    ca_file: str | None = None
    """PEM bundle of the CAs that sign raygate's certificate. Default: the system's trust
    store."""
    cert_file: str | None = None
    """PEM client certificate (chain), when the endpoint asks for mutual TLS; needs
    ``key_file``."""
    key_file: str | None = None
    """PEM private key of ``cert_file``."""
    server_name: str | None = None
    """The name raygate's certificate is checked against when it is not the URL's host
    (gRPC only: ``grpc.ssl_target_name_override``)."""


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

    def explain(self, namespace: str, name: str, node_names: Sequence[str] | None = None,
                ) -> ExplainReply:
        """Why raygate would place the pod where it would, against ``node_names`` (None:
        every node): ``raygate explain --server``. ``NotFound`` for a pod it does not
        know."""
        ...

    def close(self) -> None:
        ...

    def __enter__(self) -> Self:
        ...

    def __exit__(self, *exc: object) -> None:
        ...




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


class Closing(abc.ABC):
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


def diff(sent: dict[tuple[str, str], AdmissionStatus], items: list[AdmissionStatus],
          ) -> tuple[list[WatchEvent], dict[tuple[str, str], AdmissionStatus]]:
    now = {(s.metadata.namespace, s.metadata.name): s for s in items}
    return [WatchEvent(kind, status) for kind, status in
            changes(sent, now, lambda s: s.metadata.version)], now


