"""A kind's initial state taken from a streaming list (KEP-3157, "watch-list").

kube-apiserver answers a WATCH with ``sendInitialEvents=true`` and
``resourceVersionMatch=NotOlderThan`` by an ADDED event for each object of the kind's
state, then one BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` at that state's
resourceVersion, then every change after it, on the same stream. Without a
resourceVersion the state is the latest, read consistently as a LIST without one reads
it: the watch cache first catches up with etcd's current revision
(k8s.io/apiserver pkg/storage/cacher/cacher.go, ``getWatchCacheResourceVersion`` and
``waitUntilWatchCacheFreshAndForceAllEvents``), and the bookmark comes after the last
initial event (pkg/storage/cacher/cache_watcher.go, ``processInterval``).
"""

from __future__ import annotations

from raygate.server.cache.keys import ObjectKey, View, object_key
from raygate.server.cache.snapshot import Snapshot
from raygate.server.kube.objects import KindObjects
from raygate.server.kube.transport import (
    ADDED,
    BOOKMARK,
    DELETED,
    ERROR,
    MODIFIED,
    ApiError,
    WatchLine,
    api_error,
)
from raygate.server.wire import kube

__all__ = ["InitialState", "StreamRefused", "refuses_streaming"]


class StreamRefused(Exception):
    """The API server does not mark the end of the initial events: it ended the stream
    without it, or sent another bookmark first (a watch that goes on without it): list
    in pages."""


def refuses_streaming(exc: ApiError) -> bool:
    """An error status that says "not this way": list in pages instead. kube-apiserver
    with its WatchList gate off answers 422 Invalid ("sendInitialEvents is forbidden for
    watch unless the WatchList feature gate is enabled": k8s.io/apimachinery
    pkg/apis/meta/internalversion/validation/validation.go). Not a refusal: 404 (a custom
    resource gone: followed as such), 410 and 429 (asked again), 5xx (a server in
    trouble, backed off); an answer a LIST would get too (401, 403) comes again there."""
    return 400 <= exc.code < 500 and exc.code not in (404, 410, 429)


class InitialState:
    """The objects of one kind's initial events, each with its version and view, until
    the bookmark that ends them says at which resourceVersion they add up to a state."""

    def __init__(self, objects: KindObjects, held: Snapshot) -> None:
        self.kind = objects.kind
        self.objects = objects
        self.held = held
        """The cache's state before: the views of objects unchanged since are kept."""
        self.items: dict[ObjectKey, tuple[str, View]] = {}
        self.resource_version = ""
        self.events = 0

    def take(self, line: WatchLine) -> bool:
        """One line of the stream; True once it ended the initial events."""
        type_ = line.type
        if type_ in (ADDED, MODIFIED, DELETED):
            self.events += 1
            if line.obj is None:
                self.objects.unreadable(line.meta, line.problem)
                meta = line.meta
                if meta is not None:
                    self.items.pop(object_key(self.kind, meta.namespace, meta.name, meta.uid),
                                   None)
                return False
            meta = line.obj.metadata
            key = object_key(self.kind, meta.namespace, meta.name, meta.uid)
            # Only ADDED events come before the bookmark from kube-apiserver (one per
            # object of a snapshot); a change is applied all the same if one ever comes.
            item = None if type_ == DELETED else self.objects.item(line.obj, self.held)
            if item is None:
                self.items.pop(key, None)
            else:
                self.items[key] = item
        elif type_ == BOOKMARK:
            if not line.initial_events_end:
                # The first bookmark a streaming list gets is the one that ends its initial
                # events (cache_watcher.go convertToWatchEvent annotates it): any other
                # says the server watches on without ever marking their end.
                raise StreamRefused("a bookmark came before the initial events ended")
            self.resource_version = line.obj.metadata.resource_version
            return True
        elif type_ == ERROR:
            status = line.status or kube.Status()
            raise api_error(status.code, status.reason, status.message)
        return False
