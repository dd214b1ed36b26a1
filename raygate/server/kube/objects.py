"""One kind's wire objects as the cache takes them: kept or dropped, converted to views
(or left out, logged, when they cannot be read), a re-listed object's view kept."""

from __future__ import annotations

import logging
from typing import Any

from raygate.process.logs import about
from raygate.server.cache import convert
from raygate.server.cache.keys import POD, RAYCLUSTER, View, object_key
from raygate.server.cache.snapshot import Snapshot
from raygate.server.cache.sync import KindSync
from raygate.server.kube.resources import Resource
from raygate.server.kube.transport import DELETED, Sink
from raygate.server.wire import kube

__all__ = ["KindObjects"]

log = logging.getLogger("raygate.kube")


class KindObjects:
    """The objects of ``resource``; problems counted in ``status``."""

    def __init__(self, resource: Resource, sink: Sink, status: KindSync) -> None:
        self.resource = resource
        self.kind = resource.kind
        self.sink = sink
        self.status = status

    def view(self, obj: Any) -> View | None:
        try:
            view: View = self.resource.view(obj)
        except convert.ConversionError as exc:
            meta = obj.metadata
            self.status.errors += 1
            self.status.last_error = f"{meta.namespace}/{meta.name}: {exc}"
            log.warning("%s %s/%s: cannot read it (%s); leaving it out", self.kind,
                        meta.namespace, meta.name, exc, extra=about(
                            namespace=meta.namespace,
                            pod=meta.name if self.kind == POD else "",
                            raycluster=meta.name if self.kind == RAYCLUSTER else ""))
            return None
        return view

    def kept(self, obj: Any) -> bool:
        keep = self.resource.keep
        return keep is None or keep(obj)

    def item(self, obj: Any, held: Snapshot) -> tuple[str, View] | None:
        """(version, view) of a listed object; None for one the cache leaves out."""
        if not self.kept(obj):
            return None
        meta = obj.metadata
        version = meta.resource_version
        entry = held.version_of(self.kind, object_key(self.kind, meta.namespace, meta.name,
                                                      meta.uid))
        # An object's resourceVersion changes on every write of it: the same version is
        # the same object, so a re-list keeps the view the cache already has.
        if entry is not None and version and entry[0] == version:
            return version, entry[1]
        view = self.view(obj)
        return None if view is None else (version, view)

    def unreadable(self, meta: kube.ObjectMeta | None, problem: str,
                   removed: bool = False) -> None:
        self.status.errors += 1
        self.status.last_error = problem
        name = f"{meta.namespace}/{meta.name}" if meta is not None else "an object"
        log.warning("%s %s: cannot read it (%s); leaving it out", self.kind, name, problem)
        if removed and meta is not None and (meta.name or meta.uid):
            key = object_key(self.kind, meta.namespace, meta.name, meta.uid)
            self.sink.change(self.kind, DELETED, key, meta.resource_version, None)
