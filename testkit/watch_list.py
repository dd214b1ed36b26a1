"""The streaming list's bytes as kube-apiserver 1.37 writes them (KEP-3157), for the
API-server double (``testkit.apiserver``): whether a watch starts with the state or is
refused, and the BOOKMARK that ends its initial events."""

from __future__ import annotations

import msgspec

from testkit.resources import Collection, Obj

__all__ = ["NOT_OLDER_THAN", "bookmark_object", "initial_events"]

NOT_OLDER_THAN = "NotOlderThan"


def initial_events(query: dict[str, str], watch_list: bool) -> bool | bytes:
    """Whether a watch starts with the state (a streaming list), or the 422 reply that
    refuses it: k8s.io/apimachinery pkg/apis/meta/internalversion/validation/validation.go
    (``validateWatchOptions``) and defaults.go (``SetListOptionsDefaults``: with the
    WatchList gate on, a watch from "" or "0" that asks nothing else is one)."""
    send, match = query.get("sendInitialEvents"), query.get("resourceVersionMatch", "")
    causes: list[Obj] = []
    if send is not None:
        if match != NOT_OLDER_THAN:
            causes.append(_cause("FieldValueForbidden", "resourceVersionMatch", "Forbidden: "
                                 "sendInitialEvents requires setting resourceVersionMatch "
                                 f"to {NOT_OLDER_THAN}"))
        if not watch_list:
            causes.append(_cause("FieldValueForbidden", "sendInitialEvents", "Forbidden: "
                                 "sendInitialEvents is forbidden for watch unless the "
                                 "WatchList feature gate is enabled"))
    if match:
        if send is None:
            causes.append(_cause("FieldValueForbidden", "resourceVersionMatch", "Forbidden: "
                                 "resourceVersionMatch is forbidden for watch unless "
                                 "sendInitialEvents is provided"))
        if match != NOT_OLDER_THAN:
            causes.append(_cause("FieldValueNotSupported", "resourceVersionMatch",
                                 f'Unsupported value: "{match}": supported values: '
                                 f'"{NOT_OLDER_THAN}"'))
    if causes:
        return _invalid("ListOptions", causes)
    if send is None:
        return watch_list and query.get("resourceVersion", "") in ("", "0")
    return send.lower() in ("true", "1")


def bookmark_object(collection: Collection, rv: int, *, initial_events_end: bool) -> bytes:
    """The object of a BOOKMARK event as kube-apiserver writes it: an empty object of the
    kind (``newFunc()``) with only its resourceVersion set (cacher.go), annotated when it
    ends a streaming list's initial events (k8s.io/apiserver pkg/storage/util.go)."""
    version = b'"resourceVersion":"%d"' % rv
    annotated = b'"annotations":{"k8s.io/initial-events-end":"true"}' if initial_events_end \
        else b""
    shape = BOOKMARK_SHAPES.get(collection.kind)
    if shape is None:  # an Unstructured: a map, its keys sorted
        shape, parts = BOOKMARK_CUSTOM, (annotated, version)
    else:  # a struct: its fields in their order (ObjectMeta's annotations after it)
        parts = (version, annotated)
    return shape % {b"kind": collection.kind.encode(), b"api": collection.api_version.encode(),
                    b"meta": b",".join(part for part in parts if part)}


BOOKMARK_CUSTOM = b'{"apiVersion":"%(api)s","kind":"%(kind)s","metadata":{%(meta)s}}'
"""A custom resource's bookmark (an ``unstructured.Unstructured``: its keys sorted)."""
BOOKMARK_SHAPES = {
    "Pod": b'{"kind":"Pod","apiVersion":"v1","metadata":{%(meta)s},"spec":{"containers":null}'
           b',"status":{}}',
    "Event": b'{"kind":"Event","apiVersion":"v1","metadata":{%(meta)s},"involvedObject":{},'
             b'"source":{},"firstTimestamp":null,"lastTimestamp":null,"eventTime":null,'
             b'"reportingComponent":"","reportingInstance":""}',
    "Node": b'{"kind":"Node","apiVersion":"v1","metadata":{%(meta)s},"spec":{},"status":'
            b'{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"",'
            b'"systemUUID":"","bootID":"","kernelVersion":"","osImage":"",'
            b'"containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"",'
            b'"operatingSystem":"","architecture":""}}}',
}
"""Built-in kinds' bookmarks: their empty objects with every non-omitempty field, byte for
byte as kube-apiserver 1.37 writes them (read from one)."""


def _cause(reason: str, field: str, message: str) -> Obj:
    return {"reason": reason, "message": message, "field": field}


def _invalid(kind: str, causes: list[Obj]) -> bytes:
    """The 422 of ``errors.NewInvalid`` (k8s.io/apimachinery pkg/api/errors/errors.go)."""
    message = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    if len(causes) > 1:
        message = f"[{message}]"
    return msgspec.json.encode({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"{kind}.meta.k8s.io \"\" is invalid: {message}", "reason": "Invalid",
        "details": {"group": "meta.k8s.io", "kind": kind, "causes": causes},
        "code": 422}) + b"\n"
