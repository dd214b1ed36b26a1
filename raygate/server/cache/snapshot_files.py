"""Cluster state from files as ``kubectl get ... -o yaml|json`` prints them.

A file holds one object, a ``kind: List`` with ``items``, or several YAML documents (JSON
is YAML). Nodes, Pods, RayClusters, PodGroups, Workloads, the pod Events node
autoscalers write and Karpenter's NodeClaims are used; other kinds are counted. A
malformed object refuses the whole load with the file, the item index and the field
path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import yaml

from raygate.plugin.model import (
    NodeClaimView,
    NodeView,
    PodEventView,
    PodGroupView,
    PodView,
    RayClusterView,
    WorkloadView,
)
from raygate.server.cache import convert
from raygate.server.cache.keys import ClusterObjects
from raygate.server.files import yaml_problem
from raygate.server.wire import DECODE_ERRORS, kube

__all__ = ["ManifestLoader", "SnapshotError", "demo_text", "load_files", "load_text",
           "read_documents"]

# apiVersion group of each kind raygate reads; core kinds have no group.
_KINDS: dict[str, tuple[tuple[str, ...], type[msgspec.Struct]]] = {
    "Node": (("v1",), kube.Node),
    "Pod": (("v1",), kube.Pod),
    "RayCluster": (("ray.io/v1",), kube.RayCluster),
    "PodGroup": (("scheduling.volcano.sh/v1beta1",), kube.PodGroup),
    "Workload": (("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"), kube.Workload),
    "Event": (("v1",), kube.Event),
    "NodeClaim": (("karpenter.sh/v1",), kube.NodeClaim),
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
        self.nodes: list[NodeView] = []
        self.pods: list[PodView] = []
        self.rayclusters: list[RayClusterView] = []
        self.podgroups: list[PodGroupView] = []
        self.workloads: list[WorkloadView] = []
        self.events: list[PodEventView] = []
        self.node_claims: list[NodeClaimView] = []
        self.ignored: Counter[str] = Counter()

    def add(self, obj: Any, location: str) -> None:
        if not isinstance(obj, dict):
            raise SnapshotError(f"{location}: expected a Kubernetes object, got {obj!r:.80}")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if not isinstance(kind, str) or not isinstance(api_version, str):
            raise SnapshotError(f"{location}: missing `kind` or `apiVersion`")
        known = _KINDS.get(kind)
        if known is None or api_version not in known[0]:
            self.ignored[f"{api_version}/{kind}"] += 1
            return
        meta = obj.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        where = f"{location} ({kind} {name})"
        try:
            wire = msgspec.convert(obj, type=known[1], strict=False)
            self._add(wire, where)
        except (msgspec.ValidationError, convert.ConversionError) as exc:
            raise SnapshotError(f"{where}: {exc}") from None

    def _add(self, wire: msgspec.Struct, where: str) -> None:
        if isinstance(wire, kube.Node):
            self.nodes.append(convert.node_view(wire))
        elif isinstance(wire, kube.Pod):
            self.pods.append(convert.pod_view(wire))
        elif isinstance(wire, kube.RayCluster):
            self.rayclusters.append(convert.raycluster_view(wire))
        elif isinstance(wire, kube.PodGroup):
            self.podgroups.append(convert.podgroup_view(wire))
        elif isinstance(wire, kube.Workload):
            self.workloads.append(convert.workload_view(wire))
        elif isinstance(wire, kube.Event):
            if convert.wanted_event(wire):
                self.events.append(convert.event_view(wire))
        elif isinstance(wire, kube.NodeClaim):
            self.node_claims.append(convert.nodeclaim_view(wire))
        else:  # pragma: no cover - _KINDS lists exactly the types above
            raise SnapshotError(f"{where}: unexpected type {type(wire).__name__}")

    def build(self) -> ClusterObjects:
        return ClusterObjects(
            nodes=tuple(self.nodes),
            pods=tuple(self.pods),
            rayclusters=tuple(self.rayclusters),
            podgroups=tuple(self.podgroups),
            workloads=tuple(self.workloads),
            events=tuple(self.events),
            node_claims=tuple(self.node_claims),
            ignored=Counter(self.ignored),
        )
