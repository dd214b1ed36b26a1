"""``bench.cache_scale``'s last step, raygate stopped: its initial state of nodes and pods
taken again each way kube-apiserver offers it, one way after the other, the API server's
side (what a client waits for on the socket) timed apart from this side's (inflate,
decode and convert: raygate's own code, ``raygate.server.kube.decode`` and the views of
``raygate.server.kube.resources``, one thread; in raygate both sides overlap):

- LIST pages (``limit`` 500, as raygate asks), as JSON; as gzip-compressed JSON
  (``Accept-Encoding: gzip``: kube-apiserver compresses a reply over 128 KiB at level 1,
  its APIResponseCompression gate, beta and on since 1.16:
  k8s.io/apiserver pkg/endpoints/handlers/responsewriters/writers.go and compression.go);
  and as protobuf, what client-go's own components ask (read, not decoded);
- the streaming list (a WATCH with ``sendInitialEvents=true``) to the bookmark that ends
  its initial events, as JSON, and as gzip: compressed only for a streaming list, each
  flush a gzip member of its own (the WatchListCompression gate, beta and on in 1.37:
  k8s.io/apiserver pkg/endpoints/handlers/watch.go, ``perFlushGzipWriter``).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raygate.server.cache.keys import NODE, POD
from raygate.server.kube.decode import Decoders, decode_line, decode_page, next_continue
from raygate.server.kube.resources import RESOURCES, Resource
from testbed.api import ApiError, KubeApi

__all__ = ["LISTED_ALONE", "PROTOBUF", "ListAlone", "Way", "list_alone"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
"""What client-go's own components (kube-scheduler, the controllers) ask nodes and pods in."""
LISTED_ALONE: tuple[Resource, ...] = tuple(r for r in RESOURCES if r.kind in (NODE, POD))
"""Nodes and pods: all but 600 of the objects. Picked by kind, not by place: the kinds
that make a GPU node (DRA's DeviceClasses and ResourceSlices) are followed first, and
``RESOURCES[:2]`` became those two empty lists when they were added (2 pages, 0 MiB)."""
STREAM_QUERY = ("watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                "&allowWatchBookmarks=true&timeoutSeconds=900")
END = b"k8s.io/initial-events-end"


@dataclass
class Way:
    """One way to take the state: its requests, objects, MiB on the wire, seconds waiting
    for the API server, seconds of this side's work (inflate, decode, convert; 0 for
    protobuf, read only)."""

    requests: int = 0
    items: int = 0
    mib: float = 0.0
    server_s: float = 0.0
    client_s: float = 0.0


@dataclass
class ListAlone:
    pages: Way = field(default_factory=Way)
    pages_gzip: Way = field(default_factory=Way)
    pages_protobuf: Way = field(default_factory=Way)
    stream: Way = field(default_factory=Way)
    stream_gzip: Way = field(default_factory=Way)


def list_alone(api: KubeApi, page_size: int) -> ListAlone:
    """Each way in turn, nodes then pods; each LIST page the three ways one after the
    other (a continue token is good until the next compaction)."""
    alone = ListAlone()
    for resource in LISTED_ALONE:
        decoders, view = Decoders(resource.wire), resource.view
        path = resource.served(resource.versions[0]).path
        token = ""
        while True:
            query = f"{path}?limit={page_size}" + (f"&continue={token}" if token else "")
            data = _page(api, query, alone.pages, decoders, view)
            _page(api, query, alone.pages_gzip, decoders, view, encoding="gzip")
            _page(api, query, alone.pages_protobuf, None, view, accept=PROTOBUF)
            token = next_continue(data)
            if not token:
                break
        _stream(api, path, alone.stream, decoders, view)
        _stream(api, path, alone.stream_gzip, decoders, view, gzip=True)
    return alone


def _page(api: KubeApi, query: str, way: Way, decoders: Decoders | None,
          view: Callable[[Any], Any], *, accept: str = "application/json",
          encoding: str = "") -> bytes:
    """One page ``way``; its bytes (inflated)."""
    started = time.perf_counter()
    data, compressed = api.fetch(query, accept=accept, encoding=encoding)
    fetched = time.perf_counter()
    way.server_s += fetched - started
    way.requests += 1
    way.mib += len(data) / 2**20
    if compressed:
        data = zlib.decompress(data, 31)
    if decoders is not None:
        page = decode_page(data, decoders)
        for item in page.items:
            view(item)
        way.items += len(page.items)
    way.client_s += time.perf_counter() - fetched
    return data


class _Inflater:
    """Concatenated gzip members (one per flush of a compressed watch) to their bytes."""

    def __init__(self) -> None:
        self._member = zlib.decompressobj(31)

    def __call__(self, data: bytes) -> bytes:
        out = []
        while data:
            out.append(self._member.decompress(data))
            if not self._member.eof:
                break
            data = self._member.unused_data
            self._member = zlib.decompressobj(31)
        return b"".join(out)


def _stream(api: KubeApi, path: str, way: Way, decoders: Decoders,
            view: Callable[[Any], Any], *, gzip: bool = False) -> None:
    """The streaming list to its initial-events-end bookmark."""
    conn = api.connect(960.0)
    headers = {"Accept": "application/json", **api.auth_headers()}
    if gzip:
        headers["Accept-Encoding"] = "gzip"
    try:
        started = time.perf_counter()
        conn.request("GET", f"{path}?{STREAM_QUERY}", None, headers)
        reply = conn.getresponse()
        if reply.status != 200:
            raise ApiError(reply.status, f"streaming list {path}: {reply.read()[:300]!r}")
        if gzip and reply.getheader("Content-Encoding") != "gzip":
            raise RuntimeError(f"streaming list {path}: asked for gzip, not compressed")
        way.server_s += time.perf_counter() - started
        way.requests += 1
        _read_stream(reply, way, decoders, view, _Inflater() if gzip else None)
    finally:
        conn.close()


def _read_stream(reply: Any, way: Way, decoders: Decoders, view: Callable[[Any], Any],
                 inflate: _Inflater | None) -> None:
    pending = b""
    while True:
        started = time.perf_counter()
        chunk = reply.read1(1 << 20)
        read = time.perf_counter()
        way.server_s += read - started
        if not chunk:
            raise RuntimeError("the streaming list ended before its initial events")
        way.mib += len(chunk) / 2**20
        pending += inflate(chunk) if inflate is not None else chunk
        *lines, pending = pending.split(b"\n")
        ended = False
        for line in lines:
            event = decode_line(line, decoders)
            if event.initial_events_end:
                ended = True
                break
            if event.obj is not None:
                view(event.obj)
                way.items += 1
        way.client_s += time.perf_counter() - read
        if ended:
            return
