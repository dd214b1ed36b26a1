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

from raygate.contract.command import CommandError
from raygate.server.cache import convert, devices, keys
from raygate.server.cache.indexes import PRIMARY
from raygate.server.cache.keys import ClusterObjects
from raygate.server.files import yaml_problem
from raygate.server.wire import DECODE_ERRORS, dra, kube

__all__ = ["ManifestLoader", "SnapshotError", "demo_text", "load_files", "load_text",
           "read_documents"]

_DRA = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")


class _Kind(NamedTuple):
    kind: str
    """The cache's name of the kind (``keys.KINDS``): its ``ClusterObjects`` field is
    ``indexes.PRIMARY[kind]``."""
    api_versions: tuple[str, ...]
    """The apiVersions raygate reads the kind at; core kinds have no group."""
    wire: type[msgspec.Struct]
    view: Callable[[Any], Any]
    keep: Callable[[Any], bool] | None = None
    """Of its objects, those raygate uses (None: all)."""


_KINDS = (
    _Kind(keys.DEVICECLASS, _DRA, dra.DeviceClass, devices.device_class_view),
    _Kind(keys.RESOURCESLICE, _DRA, dra.ResourceSlice, devices.resource_slice_view),
    _Kind(keys.NODE, ("v1",), kube.Node, convert.node_view),
    _Kind(keys.POD, ("v1",), kube.Pod, convert.PodViews(unbound_ray_constraints=True)),
    _Kind(keys.RAYCLUSTER, ("ray.io/v1",), kube.RayCluster, convert.raycluster_view),
    _Kind(keys.PODGROUP, ("scheduling.volcano.sh/v1beta1",), kube.PodGroup,
          convert.podgroup_view),
    _Kind(keys.GANGGROUP, ("scheduling.k8s.io/v1beta1",), kube.GangGroup,
          convert.gang_group_view),
    _Kind(keys.WORKLOAD, ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"), kube.Workload,
          convert.workload_view),
    _Kind(keys.EVENT, ("v1",), kube.Event, convert.event_view, convert.wanted_event),
    _Kind(keys.NODECLAIM, ("karpenter.sh/v1",), kube.NodeClaim, convert.nodeclaim_view),
    _Kind(keys.RESOURCECLAIM, _DRA, dra.ResourceClaim, devices.resource_claim_view),
    _Kind(keys.CLAIMTEMPLATE, _DRA, dra.ResourceClaimTemplate, devices.claim_template_view),
)
# By (apiVersion, kind) as a file writes them: two kinds are named PodGroup (Volcano's and
# Kubernetes' own, the cache's "PodGroup.scheduling.k8s.io"), told apart by their group.
_BY_TYPE = {(version, known.kind.split(".")[0]): known
            for known in _KINDS for version in known.api_versions}


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (the C one, several times faster on large dumps, when libyaml is
    there) with timestamps left as strings: Kubernetes times are RFC 3339 strings, and
    hand-written YAML often leaves them unquoted."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ManifestLoader = _Loader  # for other readers of manifests (raygate check)


class SnapshotError(CommandError, ValueError):
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
        self.views: dict[str, list[Any]] = {known.kind: [] for known in _KINDS}
        self.ignored: Counter[str] = Counter()

    def add(self, obj: Any, location: str) -> None:
        if not isinstance(obj, dict):
            raise SnapshotError(f"{location}: expected a Kubernetes object, got {obj!r:.80}")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if not isinstance(kind, str) or not isinstance(api_version, str):
            raise SnapshotError(f"{location}: missing `kind` or `apiVersion`")
        known = _BY_TYPE.get((api_version, kind))
        if known is None:
            self.ignored[f"{api_version}/{kind}"] += 1
            return
        meta = obj.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        try:
            wire = msgspec.convert(obj, type=known.wire, strict=False)
            if known.keep is None or known.keep(wire):
                self.views[known.kind].append(known.view(wire))
        except (msgspec.ValidationError, convert.ConversionError) as exc:
            raise SnapshotError(f"{location} ({kind} {name}): {exc}") from None

    def build(self) -> ClusterObjects:
        return ClusterObjects(**{PRIMARY[kind]: tuple(v) for kind, v in self.views.items()},
                              ignored=Counter(self.ignored))
