"""One Ray object (a RayCluster, or a RayJob or RayService embedding a RayCluster spec)
checked whole: KubeRay's CRD schema, then ``raygate.policy.lint.rules``'s rules on the RayCluster
it makes. A field the schema refuses is left out of what the rules see (and a rule finding
on the same field is dropped), so one bad value neither hides the rest nor is said twice.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from raygate.contract.scale_gate import gate_key
from raygate.policy.config import PolicyConfig
from raygate.policy.lint.manifest import RAY_KINDS, field_path, schema_violation
from raygate.policy.lint.model import (
    Finding,
    GroupSpec,
    HeadSpec,
    LintCluster,
    Severity,
    Toleration,
)
from raygate.policy.lint.rules import lint
from raygate.server.cache import convert
from raygate.server.cache.convert_gated import required_terms
from raygate.server.check import schema
from raygate.server.wire.raycluster import PodSpec, RayClusterManifest

__all__ = ["check_object", "lint_cluster"]


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


def _tolerations(pod: PodSpec) -> tuple[Toleration, ...]:
    return tuple(Toleration(t.key or "", t.operator or "Equal", t.effect or "")
                 for t in pod.tolerations or ())


def _scale_gates(strategy: dict[str, Any] | None) -> tuple[str, ...]:
    entries = (strategy or {}).get("scaleGate")
    return tuple(gate_key(e)[1] for e in entries) if isinstance(entries, list) else ()


def lint_cluster(manifest: RayClusterManifest, kind: str = "RayCluster",
                 spec_path: str = "spec") -> LintCluster:
    """What the rules read of a RayCluster; ``kind`` and ``spec_path`` say where its spec
    was written (a RayJob's ``spec.rayClusterSpec``, ...)."""
    spec = manifest.spec
    groups = []
    for i, g in enumerate(spec.worker_group_specs or ()):
        pod = g.template.spec
        path = f"{spec_path}.workerGroupSpecs[{i}].template.spec.containers"
        groups.append(GroupSpec(
            index=i, name=g.group_name, replicas=g.replicas, min_replicas=g.min_replicas,
            max_replicas=g.max_replicas, num_of_hosts=g.num_of_hosts,
            resources=_resources(pod.containers or (), path),
            tolerations=_tolerations(pod),
            scheduler_name=pod.scheduler_name or "",
            node_selector=pod.node_selector or {},
            claims=convert.pod_claims(pod.resource_claims),
            priority=g.priority,
            node_affinity=required_terms(pod.affinity),
            scale_gates=_scale_gates(g.scale_strategy),
        ))
    options = spec.autoscaler_options
    autoscaler = None
    if options is not None and options.resources is not None:
        autoscaler = dict(convert.resources(
            options.resources.requests or options.resources.limits,
            f"{spec_path}.autoscalerOptions.resources"))
    head = spec.head_group_spec.template.spec
    return LintCluster(
        namespace=manifest.metadata.namespace,
        name=manifest.metadata.name,
        generate_name=manifest.metadata.generate_name,
        autoscaling=bool(spec.enable_in_tree_autoscaling),
        groups=tuple(groups),
        labels=manifest.metadata.labels or {},
        annotations=manifest.metadata.annotations or {},
        head_scheduler_name=spec.head_group_spec.template.spec.scheduler_name or "",
        autoscaler_requests=autoscaler,
        kind=kind,
        spec_path=spec_path,
        head=HeadSpec(
            resources=_resources(head.containers or (),
                                 f"{spec_path}.headGroupSpec.template.spec.containers"),
            tolerations=_tolerations(head), node_selector=head.node_selector or {},
            claims=convert.pod_claims(head.resource_claims),
            node_affinity=required_terms(head.affinity)),
    )


def _without(value: Any, paths: Iterable[Sequence[str | int]]) -> Any:
    """A copy of ``value`` less what is at ``paths`` (those that exist)."""
    out = copy.deepcopy(value)
    for path in paths:
        if not path:
            return {}
        target = out
        for part in path[:-1]:
            try:
                target = target[part]
            except (KeyError, IndexError, TypeError):
                break
        else:
            if isinstance(target, dict):
                target.pop(path[-1], None)
            elif isinstance(target, list) and isinstance(path[-1], int) and path[-1] < len(
                    target):
                target[path[-1]] = {}  # not removed: later items keep their index
    return out


def _not_converted(ref: str, spec_path: str, exc: Exception) -> Finding:
    # msgspec says "Expected `int`, got `str` - at `$.spec.workerGroupSpecs[0].replicas`";
    # its `$.spec` is the RayCluster's spec, wherever the object keeps it.
    message, _, where = str(exc).partition(" - at `$.")
    where = where.rstrip("`")
    if where.startswith("spec"):
        where = spec_path + where.removeprefix("spec")
    return Finding("RG105", Severity.ERROR, ref, where, message,
                   "give the field the type KubeRay's CRD defines")


def check_object(obj: Mapping[str, Any], kind: str, ref: str, config: PolicyConfig,
                 version: str = schema.DEFAULT_VERSION
                 ) -> tuple[list[Finding], LintCluster | None]:
    """Every finding on one Ray object against KubeRay ``version``'s CRD, and the
    RayCluster the rules saw (None when it embeds none: a RayJob that runs on an existing
    cluster via ``clusterSelector``)."""
    violations = schema.violations(obj, kind, version)
    findings = [schema_violation(ref, kind, v.path, v.message) for v in violations]
    at = RAY_KINDS[kind]
    spec: Any = obj
    for key in at:
        spec = spec.get(key) if isinstance(spec, dict) else None
    if not isinstance(spec, dict):
        return findings, None
    def refused(prefix: tuple[str, ...]) -> list[tuple[str | int, ...]]:
        return [v.path[len(prefix):] for v in violations if v.path[:len(prefix)] == prefix]

    manifest = {"metadata": _without(obj.get("metadata") or {}, refused(("metadata",))),
                "spec": _without(spec, refused(at))}
    spec_path = field_path(at)
    try:
        cluster = lint_cluster(msgspec.convert(manifest, RayClusterManifest, strict=False),
                               kind, spec_path)
    except (msgspec.ValidationError, convert.ConversionError) as exc:
        return [*findings, _not_converted(ref, spec_path, exc)], None
    said = {f.path for f in findings}
    findings.extend(f for f in lint([cluster], None, config) if f.path not in said)
    return findings, cluster
