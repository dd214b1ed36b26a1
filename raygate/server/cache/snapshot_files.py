"""Cluster state from files as ``kubectl get ... -o yaml|json`` prints them.

A file holds one object, a ``kind: List`` with ``items``, or several YAML documents (JSON
is YAML). Nodes, Pods, RayClusters, PodGroups, Workloads, the pod Events node
autoscalers write, Karpenter's NodeClaims and the DRA objects (DeviceClasses,
ResourceSlices, ResourceClaims and their templates) are used; other kinds are counted. A
malformed object refuses the whole load with the file, the item index and the field
path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import yaml

from raygate.server.cache import convert, devices
from raygate.server.cache.keys import ClusterObjects
from raygate.server.files import yaml_problem
from raygate.server.wire import DECODE_ERRORS, dra, kube

__all__ = ["ManifestLoader", "SnapshotError", "demo_text", "load_files", "load_text",
           "read_documents"]

_DRA = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")


class _Kind(NamedTuple):
    api_versions: tuple[str, ...]
    """The apiVersions raygate reads the kind at; core kinds have no group."""
    wire: type[msgspec.Struct]
    view: Callable[[Any], Any]
    into: str
    """The ``ClusterObjects`` field its views go to."""
    keep: Callable[[Any], bool] | None = None
    """Of its objects, those raygate uses (None: all)."""


_KINDS: dict[str, _Kind] = {
    "DeviceClass": _Kind(_DRA, dra.DeviceClass, devices.device_class_view, "device_classes"),
    "ResourceSlice": _Kind(_DRA, dra.ResourceSlice, devices.resource_slice_view,
                           "resource_slices"),
    "Node": _Kind(("v1",), kube.Node, convert.node_view, "nodes"),
    "Pod": _Kind(("v1",), kube.Pod, convert.pod_view, "pods"),
    "RayCluster": _Kind(("ray.io/v1",), kube.RayCluster, convert.raycluster_view,
                        "rayclusters"),
    "PodGroup": _Kind(("scheduling.volcano.sh/v1beta1",), kube.PodGroup,
                      convert.podgroup_view, "podgroups"),
    "PodGroup.scheduling.k8s.io": _Kind(("scheduling.k8s.io/v1beta1",), kube.GangGroup,
                                        convert.gang_group_view, "gang_groups"),
    "Workload": _Kind(("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"), kube.Workload,
                      convert.workload_view, "workloads"),
    "Event": _Kind(("v1",), kube.Event, convert.event_view, "events", convert.wanted_event),
    "NodeClaim": _Kind(("karpenter.sh/v1",), kube.NodeClaim, convert.nodeclaim_view,
                       "node_claims"),
    "ResourceClaim": _Kind(_DRA, dra.ResourceClaim, devices.resource_claim_view,
                           "resource_claims"),
    "ResourceClaimTemplate": _Kind(_DRA, dra.ResourceClaimTemplate,
                                   devices.claim_template_view, "claim_templates"),
}


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (the C one, several times faster on large dumps, when libyaml is
    there) with timestamps left as strings: Kubernetes times are RFC 3339 strings, and
    hand-written YAML often leaves them unquoted."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ManifestLoader = _Loader  # for other readers of manifests (raygate check)


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; the message says where and why."""


def _items(documents: Iterable[Any], where: str) -> Iterator[tuple[str, Any]]:
    """(location, object) for every object, flattening ``kind: List``."""
    index = 0
    for doc in documents:
        if doc is None:
            continue
        # `kind: List` from kubectl, or a typed list (PodList, ...) from the API.
        if (isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List")
                and isinstance(doc.get("items"), list)):
            for item in doc["items"]:
                yield f"{where}: item {index}", item
                index += 1
        else:
            yield f"{where}: item {index}", doc
            index += 1


def _documents(text: str, where: str) -> list[Any]:
    if text.lstrip()[:1] in ("{", "["):
        # `kubectl get -o json`: msgspec parses JSON ~20x faster than a YAML loader.
        try:
            return [msgspec.json.decode(text)]
        except DECODE_ERRORS:
            pass  # not plain JSON after all (e.g. YAML flow style): try YAML
    try:
        return list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        raise SnapshotError(f"{where}: not valid YAML or JSON: {yaml_problem(exc)}") from None
    except RecursionError:
        raise SnapshotError(f"{where}: not valid YAML or JSON: nested too deeply") from None


def load_text(text: str, where: str, into: _Builder | None = None) -> ClusterObjects:
    builder = into or _Builder()
    for location, obj in _items(_documents(text, where), where):
        builder.add(obj, location)
    return builder.build()


def read_documents(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, object) for every object of one file, ``kind: List`` flattened."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{path}: not UTF-8 text: {exc}") from None
    yield from _items(_documents(text, str(path)), str(path))


def load_files(paths: Iterable[str | Path]) -> ClusterObjects:
    builder = _Builder()
    for path in paths:
        for location, obj in read_documents(Path(path)):
            builder.add(obj, location)
    return builder.build()


def demo_text() -> str:
    """The demo cluster shipped inside the package."""
    demo = resources.files("raygate.server").joinpath("demo/cluster.yaml")
    return demo.read_text(encoding="utf-8")


class _Builder:
    def __init__(self) -> None:
        self.views: dict[str, list[Any]] = {known.into: [] for known in _KINDS.values()}
        self.ignored: Counter[str] = Counter()

    def add(self, obj: Any, location: str) -> None:
        if not isinstance(obj, dict):
            raise SnapshotError(f"{location}: expected a Kubernetes object, got {obj!r:.80}")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if not isinstance(kind, str) or not isinstance(api_version, str):
            raise SnapshotError(f"{location}: missing `kind` or `apiVersion`")
        # Two kinds are named PodGroup: Volcano's, and Kubernetes' own (by its group).
        known = _KINDS.get(kind if not api_version.startswith("scheduling.k8s.io/")
                           else f"{kind}.scheduling.k8s.io")
        if known is None or api_version not in known.api_versions:
            self.ignored[f"{api_version}/{kind}"] += 1
            return
        meta = obj.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        try:
            wire = msgspec.convert(obj, type=known.wire, strict=False)
            if known.keep is None or known.keep(wire):
                self.views[known.into].append(known.view(wire))
        except (msgspec.ValidationError, convert.ConversionError) as exc:
            raise SnapshotError(f"{location} ({kind} {name}): {exc}") from None

    def build(self) -> ClusterObjects:
        return ClusterObjects(**{into: tuple(views) for into, views in self.views.items()},
                              ignored=Counter(self.ignored))
