"""Running ``raygate check``: RayCluster manifests (files, or a live cluster's RayClusters) against
KubeRay's CRD schema and ``raygate.policy.lint.rules``'s rules, as a table or JSON with a summary.

Files: every document of every file, RayJobs' and RayServices' embedded RayCluster specs
too; everything wrong is reported, not the first thing per file. Exit status: ``report``'s
``EXIT_*``.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, NamedTuple, TextIO, TypeVar

import msgspec

from raygate.policy.config import PolicyConfig
from raygate.policy.lint.manifest import not_an_object, not_parsed, recognise
from raygate.policy.lint.model import (
    ClusterFacts,
    Finding,
    LintCluster,
    Severity,
    object_ref,
)
from raygate.policy.lint.rules import lint
from raygate.process.exits import line_for
from raygate.server.cache import convert
from raygate.server.cache.devices import (
    claim_template_view,
    device_class_view,
    resource_claim_view,
    resource_slice_view,
)
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.keys import ClusterObjects
from raygate.server.cache.snapshot_files import SnapshotError
from raygate.server.check.inputs import (
    DEFAULT_MAX_BYTES,
    HELM_CHART,
    Document,
    InputError,
    documents,
    expand,
)
from raygate.server.check.manifests import check_object, lint_cluster
from raygate.server.check.report import Located, Report, render
from raygate.server.check.schema import (
    DEFAULT_VERSION,
    has_field,
    raycluster_schema,
    version_of,
)
from raygate.server.kube.client import Connection, KubeTransport
from raygate.server.kube.transport import ApiError, TransportError
from raygate.server.wire import dra, kube
from raygate.server.wire.raycluster import RayClusterManifest

__all__ = ["Live", "check_files", "live_inputs", "run_check"]

_DRA = "resource.k8s.io/v1"
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_Wire = TypeVar("_Wire")
_View = TypeVar("_View")


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return object_ref(str(obj.get("kind") or "object"), str(meta.get("namespace") or ""),
                      str(meta.get("name") or ""), str(meta.get("generateName") or ""))


def _document_findings(doc: Document, config: PolicyConfig, kuberay: str,
                       report: Report) -> list[Finding]:
    """What is wrong with one document; a Ray object is counted in ``report.checked`` (its
    RayCluster kept), someone else's in ``report.skipped``."""
    if doc.error is not None:
        return [not_parsed(doc.error)]
    if not isinstance(doc.value, dict):
        return [not_an_object(doc.value)]
    other = _other_tools(doc.value)
    if other is not None:
        report.skipped[other] += 1
        return []
    ref = _ref(doc.value)
    kind, problems = recognise(doc.value.get("kind"), doc.value.get("apiVersion"), ref)
    if kind is None:
        if not problems:
            report.skipped[str(doc.value.get("kind"))] += 1
        return problems
    report.checked[kind] += 1
    try:
        found, cluster = check_object(doc.value, kind, ref, config, kuberay)
    except RecursionError:
        return [*problems, not_parsed("nested too deeply")]
    if cluster is not None:
        report.clusters.append(cluster)
    return [*problems, *found]


def _other_tools(value: dict[str, Any]) -> str | None:
    """What a document without ``kind`` or ``apiVersion`` is when another tool that sits
    beside manifests reads it (deploy/monitoring's rule files and dashboard): left alone as
    any object that is not KubeRay's, not refused as a broken Kubernetes object."""
    if "kind" in value or "apiVersion" in value:
        return None
    groups = value.get("groups")
    if isinstance(groups, list) and groups and all(
            isinstance(g, dict) and "rules" in g for g in groups):
        return "Prometheus rule file"
    if isinstance(value.get("panels"), list) and "schemaVersion" in value:
        return "Grafana dashboard"
    return None


def _check_file(path: str, config: PolicyConfig, report: Report, *, kuberay: str,
                max_bytes: int, stdin: BinaryIO) -> None:
    docs = documents(path, max_bytes, stdin)
    report.files += 1
    for doc in docs:
        report.findings += [Located(f, doc.file, doc.line)
                            for f in _document_findings(doc, config, kuberay, report)]


def _cluster_objects(transport: KubeTransport, scope: str) -> ClusterObjects:
    """The nodes, and what ``resource.k8s.io/v1`` holds when the API serves it (nothing
    when not): the DeviceClasses and ResourceSlices, and the ResourceClaims and templates
    of ``scope`` (one namespace's, or all)."""
    served = transport.discover(_DRA) or frozenset()

    def listed(plural: str, wire: type[_Wire], view: Callable[[_Wire], _View],
               where: str = "") -> tuple[_View, ...]:
        if plural not in served:
            return ()
        return tuple(view(msgspec.json.decode(raw, type=wire))
                     for raw in transport.list_raw(f"/apis/{_DRA}{where}/{plural}"))

    return ClusterObjects(
        nodes=tuple(convert.node_view(kube.NODE.decode(raw))
                    for raw in transport.list_raw("/api/v1/nodes")),
        deviceclasses=listed("deviceclasses", dra.DeviceClass, device_class_view),
        resourceslices=listed("resourceslices", dra.ResourceSlice, resource_slice_view),
        resourceclaims=listed("resourceclaims", dra.ResourceClaim, resource_claim_view, scope),
        resourceclaimtemplates=listed("resourceclaimtemplates", dra.ResourceClaimTemplate,
                                      claim_template_view, scope))


class Live(NamedTuple):
    """What ``raygate check --kubeconfig`` reads of a cluster."""

    clusters: list[LintCluster]
    facts: ClusterFacts
    schema: dict[str, Any] | None = None
    """The RayCluster schema the cluster serves (its CRD's ``v1`` ``openAPIV3Schema``);
    None when the CRD could not be read (no right to get CRDs)."""


def _served_schema(transport: KubeTransport) -> dict[str, Any] | None:
    try:
        crd = msgspec.json.decode(transport.get(f"{_CRDS}/rayclusters.ray.io", []))
    except ApiError:  # 404: no CRD (no RayCluster either); 403: not allowed to read CRDs
        return None
    versions = (crd.get("spec") or {}).get("versions") or ()
    served = [v for v in versions if isinstance(v, dict) and v.get("name") == "v1"]
    schema = (served[0].get("schema") or {}).get("openAPIV3Schema") if served else None
    return schema if isinstance(schema, dict) else None


def live_inputs(connection: Connection, namespace: str | None, config: PolicyConfig) -> Live:
    """The RayClusters (of one namespace, or all) and what raygate sees of the cluster:
    GPU nodes (DRA's too), whether Volcano's PodGroups and Kueue's Workloads are served,
    the GPU DeviceClasses, ResourceClaims and templates the groups' claims name, and the
    RayCluster schema the cluster serves."""
    transport = KubeTransport(connection)
    try:
        scope = f"/namespaces/{namespace}" if namespace else ""
        clusters = [lint_cluster(msgspec.json.decode(raw, type=RayClusterManifest))
                    for raw in transport.list_raw(f"/apis/ray.io/v1{scope}/rayclusters")]
        served = _served_schema(transport)
        objects = _cluster_objects(transport, scope)
        volcano = "podgroups" in (transport.discover("scheduling.volcano.sh/v1beta1") or ())
        kueue = any("workloads" in (transport.discover(f"kueue.x-k8s.io/{v}") or ())
                    for v in ("v1beta2", "v1beta1"))
    except (TransportError, msgspec.DecodeError, convert.ConversionError) as exc:
        raise SnapshotError(f"reading the cluster at {connection.description}: {exc}") from None
    finally:
        transport.close()
    # GPU nodes and GPU devices as raygate's own cache decides them.
    snap = build_snapshot(objects, config)
    return Live(clusters, ClusterFacts(
        len(snap.gpu_node_names), volcano, kueue, snap.gpu_devices(),
        {(c.namespace, c.name): c for c in objects.resourceclaims},
        {(t.namespace, t.name): t for t in objects.resourceclaimtemplates}), served)


def _parts(path: str) -> tuple[str | int, ...]:
    """``spec.workerGroupSpecs[0].priority`` as ``("spec", "workerGroupSpecs", 0, "priority")``."""
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", path))


def _live_report(live: Live, kuberay: str | None, config: PolicyConfig) -> Report:
    """The cluster's RayClusters linted with its facts, against the RayCluster schema it
    serves (or ``kuberay``'s, when given): a finding on a spec field that schema lacks
    (KubeRay 1.7's ``priority`` on a 1.6 cluster) asks for what the API server would
    prune, and is left out."""
    schema_ = live.schema if kuberay is None else raycluster_schema(kuberay)
    version = version_of(schema_) if kuberay is None and schema_ is not None else kuberay
    report = Report(live=True, kuberay=version, clusters=list(live.clusters),
                    checked=Counter({"RayCluster": len(live.clusters)}) if live.clusters
                    else Counter(), served=schema_ is not None)
    report.findings = [Located(f) for f in lint(live.clusters, live.facts, config)
                       if schema_ is None or not f.path.startswith("spec.")
                       or has_field(schema_, _parts(f.path))]
    return report


def check_files(paths: Sequence[str], config: PolicyConfig, *,
                kuberay: str = DEFAULT_VERSION, max_bytes: int = DEFAULT_MAX_BYTES,
                stdin: BinaryIO | None = None, errors: TextIO | None = None) -> Report:
    """Every file of ``paths`` (``-``: stdin; a folder: its manifests, recursively) checked
    against KubeRay ``kuberay``; one that cannot be read is said on ``errors`` (stderr) and
    noted in the report, and the others are still checked."""
    report = Report(kuberay=kuberay)
    charts: list[str] = []
    for path in expand(paths, charts):
        try:
            _check_file(path, config, report, kuberay=kuberay, max_bytes=max_bytes,
                        stdin=stdin or sys.stdin.buffer)
        except InputError as exc:
            report.unreadable.append(str(exc))
            print(line_for(exc), file=errors or sys.stderr)
    report.findings += [_helm_chart(folder) for folder in charts]
    return report


def _helm_chart(folder: str) -> Located:
    """One hint for a Helm chart met in a folder, in place of an error per template."""
    name = os.path.basename(os.path.normpath(folder))
    return Located(Finding(
        "RG106", Severity.INFO, f"Helm chart {name}", "",
        "a Helm chart: its templates become manifests only once helm renders them, so "
        "its files were not read", f"render it first: helm template {name} {folder} "
        "[-f VALUES] | raygate check -"), os.path.join(folder, HELM_CHART))


def run_check(paths: Sequence[str], output: str, strict: bool, config: PolicyConfig, *,
              kuberay: str | None = None, live: Live | None = None,
              max_bytes: int = DEFAULT_MAX_BYTES, stdin: BinaryIO | None = None,
              out: TextIO | None = None, errors: TextIO | None = None) -> int:
    """Check files against KubeRay ``kuberay`` (of ``schema.VERSIONS``; None: the
    current), or with ``live`` the RayClusters read from a cluster with its facts, against
    the schema it serves unless ``kuberay`` is given; print the findings and the summary;
    return the exit status."""
    if live is not None:
        report = _live_report(live, kuberay, config)
    else:
        report = check_files(paths, config, kuberay=kuberay or DEFAULT_VERSION,
                             max_bytes=max_bytes, stdin=stdin, errors=errors)
    render(report, output, strict, out or sys.stdout)
    return report.exit_code(strict)
