"""``raygate check``: lint RayCluster manifests (files) with ``plugin.lint``'s rules and
print the findings as a table or JSON."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec

from extender import convert
from extender.snapshot_files import SnapshotError, read_documents
from extender.wire.raycluster import RayClusterManifest
from plugin.config import PolicyConfig
from plugin.lint import ClusterFacts, Finding, GroupSpec, LintCluster, Severity, Toleration, lint

__all__ = ["lint_cluster", "load_manifests", "render", "run_check"]


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
              facts: ClusterFacts | None = None, out: TextIO | None = None) -> int:
    """Exit status: 1 when an error (with ``strict``, also a warning) was found."""
    findings = lint(load_manifests(paths), facts, config)
    render(findings, output, out or sys.stdout)
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    return 1 if any(f.severity in failing for f in findings) else 0
