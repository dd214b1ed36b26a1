"""``/healthz`` and ``/readyz``: is the process alive, is its cache loaded."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.sync import KindReport
from raygate.server.http.routes import JSON, Reply, Route

__all__ = ["health_routes"]


class _Health(msgspec.Struct):
    status: str
    source: str = ""
    objects: dict[str, int] = msgspec.field(default_factory=dict)
    # A cluster source only: per-kind list/watch state, and the CRDs not installed.
    kinds: dict[str, KindReport] | msgspec.UnsetType = msgspec.UNSET
    absent: list[str] | msgspec.UnsetType = msgspec.UNSET


def health_routes(
    cache: ClusterCache, shutting_down: Callable[[], bool] = lambda: False,
) -> dict[str, Route]:
    """``/healthz`` (the process is alive) and ``/readyz`` (the cache is loaded, and the
    server is not shutting down)."""

    def healthz(_: bytes) -> bytes:
        # Stays 200 while shutting down: the kubelet must not restart a draining pod.
        return b'{"status":"ok"}'

    def readyz(_: bytes) -> Reply:
        ready = cache.ready and not shutting_down()
        status = ("shutting-down" if shutting_down() else
                  "ready" if cache.ready else "not-ready")
        body = _Health(status=status, source=cache.source, objects=cache.snapshot.counts())
        if cache.sync is not None:
            body.kinds, body.absent = cache.sync.report(), cache.sync.absent()
        return (200 if ready else 503), msgspec.json.encode(body), JSON

    return {"/healthz": Route(b"GET", healthz), "/readyz": Route(b"GET", readyz)}
