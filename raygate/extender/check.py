"""``raygate check``: lint RayCluster manifests (files) with ``raygate.plugin.lint``'s rules and
print the findings as a table or JSON."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec

from raygate.extender.kube.client import Connection, KubeTransport
from raygate.extender.kube.transport import TransportError
from raygate.extender.state import convert
from raygate.extender.state.snapshot_files import SnapshotError, read_documents
from raygate.extender.wire import kube
from raygate.extender.wire.raycluster import RayClusterManifest
from raygate.plugin.classify import gpu_node_reason
from raygate.plugin.config import PolicyConfig
from raygate.plugin.lint import (
    ClusterFacts,
    Finding,
    GroupSpec,
    LintCluster,
    Severity,
    Toleration,
    lint,
)

__all__ = ["lint_cluster", "live_inputs", "load_manifests", "render", "run_check"]


def _resources(containers: Iterable[Any], path: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, container in enumerate(containers):
        if container.resources is None:
            continue
        # Requests, with limits filling in what requests leave out (as KubeRay sums a
        # template, CalculatePodResource).
        merged = dict(convert.resources(container.resources.limits,
                                        f"{path}[{i}].resources.limits"))
        merged.update(convert.resources(container.resources.requests,
                                        f"{path}[{i}].resources.requests"))
        for name, value in merged.items():
            total[name] = total.get(name, 0) + value
    return total


def lint_cluster(manifest: RayClusterManifest) -> LintCluster:
    spec = manifest.spec
    groups = []
    for i, g in enumerate(spec.worker_group_specs or ()):
        pod = g.template.spec
        path = f"$.spec.workerGroupSpecs[{i}].template.spec.containers"
        groups.append(GroupSpec(
            index=i, name=g.group_name, replicas=g.replicas, min_replicas=g.min_replicas,
            max_replicas=g.max_replicas, num_of_hosts=g.num_of_hosts,
            resources=_resources(pod.containers or (), path),
            tolerations=tuple(Toleration(t.key or "", t.operator or "Equal", t.effect or "")
                              for t in pod.tolerations or ()),
            scheduler_name=pod.scheduler_name or "",
        ))
    options = spec.autoscaler_options
    autoscaler = None
    if options is not None and options.resources is not None:
        autoscaler = dict(convert.resources(
            options.resources.requests or options.resources.limits,
            "$.spec.autoscalerOptions.resources"))
    return LintCluster(
        namespace=manifest.metadata.namespace,
        name=manifest.metadata.name,
        autoscaling=bool(spec.enable_in_tree_autoscaling),
        groups=tuple(groups),
        labels=manifest.metadata.labels or {},
        annotations=manifest.metadata.annotations or {},
        head_scheduler_name=spec.head_group_spec.template.spec.scheduler_name or "",
        autoscaler_requests=autoscaler,
    )


def load_manifests(paths: Sequence[str]) -> list[LintCluster]:
    """Every RayCluster (``ray.io/v1``) in the files; other kinds are skipped."""
    clusters = []
    for path in paths:
        for location, obj in read_documents(Path(path)):
            if not isinstance(obj, dict) or obj.get("kind") != "RayCluster":
                continue
            try:
                manifest = msgspec.convert(obj, RayClusterManifest, strict=False)
                clusters.append(lint_cluster(manifest))
            except (msgspec.ValidationError, convert.ConversionError) as exc:
                raise SnapshotError(f"{location}: {exc}") from None
    return clusters


class _Page(msgspec.Struct):
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


def _list_all(transport: KubeTransport, path: str) -> Iterator[msgspec.Raw]:
    """Every item of a collection, page by page (``limit`` + ``continue``)."""
    token = ""
    while True:
        query = [("limit", "500")] + ([("continue", token)] if token else [])
        page = msgspec.json.decode(transport.get(path, query), type=_Page)
        yield from page.items
        token = str(page.metadata.get("continue") or "")
        if not token:
            return


def live_inputs(connection: Connection, namespace: str | None,
                config: PolicyConfig) -> tuple[list[LintCluster], ClusterFacts]:
    """The RayClusters (of one namespace, or all) and what raygate sees of the cluster:
    GPU nodes, and whether Volcano's PodGroups and Kueue's Workloads are served."""
    transport = KubeTransport(connection)
    try:
        scope = f"/namespaces/{namespace}" if namespace else ""
        clusters = [lint_cluster(msgspec.json.decode(raw, type=RayClusterManifest))
                    for raw in _list_all(transport, f"/apis/ray.io/v1{scope}/rayclusters")]
        gpu_nodes = sum(
            1 for raw in _list_all(transport, "/api/v1/nodes")
            if gpu_node_reason(convert.node_view(msgspec.json.decode(raw, type=kube.Node)),
                               config) is not None)
        volcano = "podgroups" in (transport.discover("scheduling.volcano.sh/v1beta1") or ())
        kueue = any("workloads" in (transport.discover(f"kueue.x-k8s.io/{v}") or ())
                    for v in ("v1beta2", "v1beta1"))
    except (TransportError, msgspec.DecodeError, convert.ConversionError) as exc:
        raise SnapshotError(f"reading the cluster at {connection.description}: {exc}") from None
    finally:
        transport.close()
    return clusters, ClusterFacts(gpu_nodes, volcano, kueue)


class _JsonFinding(msgspec.Struct):
    id: str
    severity: str
    object: str
    path: str
    message: str
    fix: str


def render(findings: Sequence[Finding], output: str, out: TextIO) -> None:
    if output == "json":
        out.write(msgspec.json.encode([
            _JsonFinding(f.id, f.severity.value, f.object, f.path, f.message, f.fix)
            for f in findings]).decode() + "\n")
        return
    if not findings:
        out.write("no findings\n")
        return
    for f in findings:
        out.write(f"{f.id} {f.severity.value:<7} {f.object}  {f.path}\n"
                  f"    {f.message}\n    fix: {f.fix}\n")


def run_check(paths: Sequence[str], output: str, strict: bool, config: PolicyConfig, *,
              live: tuple[list[LintCluster], ClusterFacts] | None = None,
              out: TextIO | None = None) -> int:
    """Lint files, or with ``live`` the RayClusters read from a cluster with its facts.
    Exit status: 1 when an error (with ``strict``, also a warning) was found."""
    clusters, facts = live if live is not None else (load_manifests(paths), None)
    findings = lint(clusters, facts, config)
    render(findings, output, out or sys.stdout)
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    return 1 if any(f.severity in failing for f in findings) else 0
