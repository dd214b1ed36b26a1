"""``raygate check``: RayCluster configurations that silently break gang preemption
(RG0xx), and what is wrong with a manifest itself (RG1xx).

Each rule is a small pure function from a RayCluster (and, when live, what raygate sees of
the cluster) to findings with a stable ID, a severity, the field path and a one-line fix.
The background: how KubeRay sizes Volcano's PodGroup (``minMember``, ``minResources``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from raygate.plugin.config import PolicyConfig
from raygate.plugin.quantity import parse_milli

__all__ = [
    "RAY_KINDS",
    "RULES",
    "ClusterFacts",
    "Finding",
    "GroupSpec",
    "LintCluster",
    "Severity",
    "closest",
    "did_you_mean",
    "field_path",
    "lint",
    "no_ray_objects",
    "not_an_object",
    "not_parsed",
    "object_ref",
    "recognise",
    "schema_violation",
]

# KubeRay's autoscaler sidecar when autoscalerOptions.resources is unset (requests = limits).
DEFAULT_AUTOSCALER_CPU = parse_milli("500m")
DEFAULT_AUTOSCALER_MEMORY = parse_milli("512Mi")
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
# Findings an operator has looked at and accepts, e.g. "RG003" or "RG003,RG010".
IGNORE_ANNOTATION = "raygate.io/check-ignore"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


# Where each kind KubeRay serves keeps the RayCluster spec it runs (its Go types' JSON
# names: RayJobSpec.RayClusterSpec is `rayClusterSpec`, RayServiceSpec's `rayClusterConfig`).
RAY_KINDS: Mapping[str, tuple[str, ...]] = {
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
    "RayService": ("spec", "rayClusterConfig"),
}
RAY_API_VERSION = "ray.io/v1"
# Served by KubeRay too, but embedding no RayCluster spec raygate checks.
OTHER_RAY_KINDS = ("RayCronJob",)


class Severity(Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    effect: str = ""


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A worker group as written in the manifest (``None``: the field is absent)."""

    index: int
    name: str | None
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    num_of_hosts: int | None = None
    resources: Mapping[str, int] = field(default_factory=dict)
    """Requests or limits of the template's containers, summed (milli-units)."""
    tolerations: tuple[Toleration, ...] = ()
    scheduler_name: str = ""


@dataclass(frozen=True, slots=True)
class LintCluster:
    namespace: str
    name: str
    autoscaling: bool
    groups: tuple[GroupSpec, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    head_scheduler_name: str = ""
    autoscaler_requests: Mapping[str, int] | None = None
    """``autoscalerOptions.resources.requests``, None when unset (KubeRay's default)."""
    kind: str = "RayCluster"
    """The object written: a RayCluster, or a RayJob or RayService embedding its spec
    (KubeRay copies their labels and annotations to the RayCluster it creates)."""
    spec_path: str = "spec"
    """Where the RayCluster's spec is in that object (``RAY_KINDS``)."""

    @property
    def ref(self) -> str:
        return object_ref(self.kind, self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What raygate sees of the live cluster; None offline."""

    gpu_nodes: int
    volcano_installed: bool
    kueue_installed: bool


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    severity: Severity
    object: str
    path: str
    message: str
    fix: str


LintRule = Callable[[LintCluster, ClusterFacts | None, PolicyConfig], list[Finding]]


def _group_path(cluster: LintCluster, group: GroupSpec, leaf: str = "") -> str:
    path = f"{cluster.spec_path}.workerGroupSpecs[{group.index}]"
    return f"{path}.{leaf}" if leaf else path


def _label(group: GroupSpec) -> str:
    return f"worker group {group.name!r}" if group.name else f"worker group #{group.index}"


def _is_gpu_group(group: GroupSpec, config: PolicyConfig) -> bool:
    return any(group.resources.get(r, 0) > 0 for r in config.gpu_resources)


def _floor(cluster: LintCluster, group: GroupSpec) -> int:
    hosts = group.num_of_hosts or 1
    if cluster.autoscaling:
        return (group.min_replicas or 0) * hosts
    return (group.replicas or 0) * hosts


def rg001_floor_from_replicas(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """Autoscaling off while a group is meant to scale: KubeRay sizes the floor from
    ``replicas``, so nothing is surplus and nothing can be preempted."""
    if cluster.autoscaling:
        return []
    out = []
    for g in cluster.groups:
        replicas, low, high = g.replicas, g.min_replicas or 0, g.max_replicas
        if (replicas is not None and low < replicas) or (high is not None and high > low):
            out.append(Finding(
                "RG001", Severity.ERROR, cluster.ref,
                f"{cluster.spec_path}.enableInTreeAutoscaling",
                f"{_label(g)} has minReplicas {low}, replicas {replicas}, maxReplicas {high} "
                "but in-tree autoscaling is off: KubeRay sizes the gang floor from replicas, "
                "so no worker is surplus and none can be preempted",
                f"set {cluster.spec_path}.enableInTreeAutoscaling: true, or minReplicas = "
                "replicas = maxReplicas"))
    return out


def rg002_multi_host_overflow(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """A multi-host replica in an autoscaled group: losing one host (one preemption)
    deletes the whole replica group."""
    out = []
    for g in cluster.groups:
        autoscaled = cluster.autoscaling and (g.max_replicas is None
                                              or g.max_replicas > (g.min_replicas or 0))
        if autoscaled and (g.num_of_hosts or 1) > 1:
            out.append(Finding(
                "RG002", Severity.WARNING, cluster.ref, _group_path(cluster, g, "numOfHosts"),
                f"{_label(g)} is autoscaled with numOfHosts {g.num_of_hosts}: preempting one "
                "host deletes the whole multi-host replica",
                "keep overflow groups single-host, or protect them with a higher priority"))
    return out


def rg003_autoscaler_not_in_min_resources(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """The autoscaler sidecar is not counted in the Volcano PodGroup's minResources."""
    if not cluster.autoscaling or not _meant_for_volcano(cluster, facts):
        return []
    requests = cluster.autoscaler_requests
    cpu = DEFAULT_AUTOSCALER_CPU if requests is None else requests.get("cpu", 0)
    memory = DEFAULT_AUTOSCALER_MEMORY if requests is None else requests.get("memory", 0)
    if cpu == 0 and memory == 0:
        return []
    return [Finding(
        "RG003", Severity.WARNING, cluster.ref,
        f"{cluster.spec_path}.autoscalerOptions.resources",
        f"KubeRay's Volcano PodGroup minResources omits the autoscaler sidecar "
        f"({cpu}m CPU, {memory // 1000 // 2**20}Mi memory): in a queue whose capability "
        "is close to minResources the gang is admitted but the head does not fit",
        "leave that much headroom in the queue's capability (or raise its deserved share)")]


def rg004_min_above_max(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    return [
        Finding("RG004", Severity.ERROR, cluster.ref, _group_path(cluster, g, "minReplicas"),
                f"{_label(g)} has minReplicas {g.min_replicas} > maxReplicas {g.max_replicas}",
                "make minReplicas <= maxReplicas")
        for g in cluster.groups
        if g.max_replicas is not None and (g.min_replicas or 0) > g.max_replicas
    ]


def rg005_replicas_out_of_range(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    out = []
    for g in cluster.groups:
        low, high = g.min_replicas or 0, g.max_replicas
        if g.replicas is None or g.replicas < 0 or (high is not None and low > high):
            continue  # RG011 or RG004 already says it
        if g.replicas < low or (high is not None and g.replicas > high):
            out.append(Finding(
                "RG005", Severity.ERROR, cluster.ref, _group_path(cluster, g, "replicas"),
                f"{_label(g)} has replicas {g.replicas} outside [{low}, {high}]; KubeRay "
                "clamps it, so the manifest does not say what runs",
                "set replicas within [minReplicas, maxReplicas]"))
    return out


def rg006_missing_group_name(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    return [
        Finding("RG006", Severity.ERROR, cluster.ref, _group_path(cluster, g, "groupName"),
                f"worker group #{g.index} has no groupName (it becomes the ray.io/group label)",
                "give every worker group a unique groupName")
        for g in cluster.groups if not g.name
    ]


def rg007_duplicate_group_name(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    seen: dict[str, int] = {}
    out = []
    for g in cluster.groups:
        if not g.name:
            continue
        if g.name in seen or g.name == "headgroup":
            first = seen.get(g.name)
            why = ("is reserved for the head" if g.name == "headgroup"
                   else f"is also used by workerGroupSpecs[{first}]")
            out.append(Finding(
                "RG007", Severity.ERROR, cluster.ref, _group_path(cluster, g, "groupName"),
                f"groupName {g.name!r} {why}: pods of both groups share one ray.io/group "
                "label and one floor", "rename the group"))
        seen.setdefault(g.name, g.index)
    return out


def _tolerates_gpu(group: GroupSpec, config: PolicyConfig) -> bool:
    for t in group.tolerations:
        if t.operator == "Exists" and not t.key:
            return True  # tolerates every taint
        if t.key in config.gpu_resources and t.effect in ("", "NoSchedule", "NoExecute"):
            return True
    return False


def rg008_floor_tolerates_gpu(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    return [
        Finding("RG008", Severity.WARNING, cluster.ref,
                _group_path(cluster, g, "template.spec.tolerations"),
                f"CPU-only {_label(g)} holds {_floor(cluster, g)} floor pods and tolerates GPU "
                "taints: without raygate's filter its floor workers can take GPU nodes",
                "drop the GPU toleration from CPU-only floor groups")
        for g in cluster.groups
        if not _is_gpu_group(g, config) and _floor(cluster, g) > 0 and _tolerates_gpu(g, config)
    ]


def rg009_gpu_floor_above_gpu_nodes(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    if facts is None:
        return []
    return [
        Finding("RG009", Severity.WARNING, cluster.ref, _group_path(cluster, g, "minReplicas"),
                f"GPU {_label(g)} needs {_floor(cluster, g)} floor pods but raygate sees "
                f"{facts.gpu_nodes} GPU nodes: the gang can never be admitted whole",
                "lower minReplicas, or add GPU nodes")
        for g in cluster.groups
        if _is_gpu_group(g, config) and _floor(cluster, g) > facts.gpu_nodes
    ]


def _uses_volcano_scheduler(cluster: LintCluster) -> bool:
    return "volcano" in {cluster.head_scheduler_name, *(g.scheduler_name for g in cluster.groups)}


def _meant_for_volcano(cluster: LintCluster, facts: ClusterFacts | None) -> bool:
    return (_uses_volcano_scheduler(cluster) or VOLCANO_QUEUE_LABEL in cluster.labels
            or (facts is not None and facts.volcano_installed and not facts.kueue_installed))


def rg010_missing_queue(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    out = []
    volcano = _uses_volcano_scheduler(cluster) or (facts is not None and facts.volcano_installed)
    if volcano and VOLCANO_QUEUE_LABEL not in cluster.labels:
        out.append(Finding(
            "RG010", Severity.INFO, cluster.ref, "metadata.labels",
            f"no {VOLCANO_QUEUE_LABEL} label: KubeRay's PodGroup goes to Volcano's default queue",
            f"add the label {VOLCANO_QUEUE_LABEL}: <queue>"))
    kueue_hints = any(k.startswith("kueue.x-k8s.io/") for k in (*cluster.labels,
                                                                 *cluster.annotations))
    kueue = kueue_hints or (facts is not None and facts.kueue_installed)
    if kueue and KUEUE_QUEUE_LABEL not in cluster.labels:
        out.append(Finding(
            "RG010", Severity.INFO, cluster.ref, "metadata.labels",
            f"no {KUEUE_QUEUE_LABEL} label: Kueue manages this RayCluster only if its "
            "namespace has a LocalQueue named default (Kueue adds the label then) or Kueue "
            "runs with manageJobsWithoutQueueName",
            f"add the label {KUEUE_QUEUE_LABEL}: <local queue>"))
    return out


def rg011_negative_count(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """A negative count: KubeRay's CRD has no ``minimum`` for them, so the API server takes
    the manifest, and then the operator refuses to reconcile it (``ValidateRayClusterSpec``:
    "has negative minReplicas") or, for ``replicas``, silently uses ``minReplicas``."""
    out = []
    for g in cluster.groups:
        for leaf, value in (("replicas", g.replicas), ("minReplicas", g.min_replicas),
                            ("maxReplicas", g.max_replicas), ("numOfHosts", g.num_of_hosts)):
            if value is not None and value < 0:
                out.append(Finding(
                    "RG011", Severity.ERROR, cluster.ref, _group_path(cluster, g, leaf),
                    f"{_label(g)} has {leaf} {value}: the API server accepts it (the CRD "
                    "sets no minimum) but KubeRay does not run it as written",
                    f"set {leaf} to 0 or more"))
    return out


RULES: Sequence[LintRule] = (
    rg001_floor_from_replicas,
    rg002_multi_host_overflow,
    rg003_autoscaler_not_in_min_resources,
    rg004_min_above_max,
    rg005_replicas_out_of_range,
    rg006_missing_group_name,
    rg007_duplicate_group_name,
    rg008_floor_tolerates_gpu,
    rg009_gpu_floor_above_gpu_nodes,
    rg010_missing_queue,
    rg011_negative_count,
)


def lint(
    clusters: Sequence[LintCluster], facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """Every finding of every rule, in cluster order then rule order, less those the
    cluster's ``raygate.io/check-ignore`` annotation accepts."""
    out: list[Finding] = []
    for cluster in clusters:
        ignored = {i.strip() for i in cluster.annotations.get(IGNORE_ANNOTATION, "").split(",")}
        out.extend(f for rule in RULES for f in rule(cluster, facts, config)
                   if f.id not in ignored)
    return out


# The manifest itself (RG1xx): what `kubectl apply` or KubeRay would refuse, and inputs with
# nothing to check. The reading and the schema are the caller's; the words are here.

def closest(word: str, choices: Collection[str]) -> str | None:
    """The one of ``choices`` ``word`` is most likely a typo of (case aside), if any."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), by_lower, n=1, cutoff=0.8)
    return by_lower[close[0]] if close else None


def did_you_mean(word: str, choices: Collection[str]) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``choices``, or ''."""
    match = closest(word, choices)
    return f" (did you mean {match!r}?)" if match else ""


def object_ref(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}".rstrip()


def field_path(parts: Sequence[str | int]) -> str:
    """``spec.workerGroupSpecs[0].minReplicas`` from its keys and indexes."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def not_parsed(message: str) -> Finding:
    return Finding("RG101", Severity.ERROR, "", "", f"not valid YAML or JSON: {message}",
                   "fix the syntax (the documents before and after it are checked)")


def _shortened(text: str, length: int = 60) -> str:
    return text if len(text) <= length else f"{text[:length - 1]}…"


def not_an_object(value: object) -> Finding:
    what = {str: "string", list: "list", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__)
    return Finding("RG102", Severity.ERROR, "", "",
                   f"a {what}, not a Kubernetes object: {_shortened(repr(value))}",
                   "give each document an apiVersion, a kind, metadata and a spec")


def recognise(kind: object, api_version: object, ref: str) -> tuple[str | None, list[Finding]]:
    """Which of ``RAY_KINDS`` a document is (None: not one to check), and what is wrong
    with its kind or apiVersion: a misspelled kind, an unknown ``ray.io`` kind, a Ray kind
    under another group."""
    if not isinstance(kind, str) or not kind or not isinstance(api_version, str):
        return None, [Finding("RG102", Severity.ERROR, ref, "kind" if not kind else "apiVersion",
                              "no kind or apiVersion: not a Kubernetes object",
                              f"set apiVersion: {RAY_API_VERSION} and kind: RayCluster")]
    group = api_version.partition("/")[0] if "/" in api_version else ""
    if kind in RAY_KINDS:
        if api_version == RAY_API_VERSION:
            return kind, []
        if group == "ray.io":
            return kind, [Finding(
                "RG103", Severity.WARNING, ref, "apiVersion",
                f"{api_version} is not KubeRay's current version; checked as {RAY_API_VERSION}",
                f"use apiVersion: {RAY_API_VERSION}")]
        return None, [Finding(
            "RG103", Severity.ERROR, ref, "apiVersion",
            f"{kind} is served as {RAY_API_VERSION}, not {api_version}: the API server has no "
            f"{kind} there", f"use apiVersion: {RAY_API_VERSION}")]
    if kind in OTHER_RAY_KINDS and group == "ray.io":
        return None, [Finding("RG103", Severity.INFO, ref, "kind",
                              f"{kind} is not checked (it embeds no RayCluster spec raygate reads)",
                              "check the RayJob it creates instead")]
    served = [*RAY_KINDS, *OTHER_RAY_KINDS]
    match = closest(kind, served)
    if group == "ray.io" or match:
        return None, [Finding(
            "RG103", Severity.ERROR, ref, "kind",
            f"unknown kind {kind!r}{did_you_mean(kind, served)}: KubeRay serves "
            f"{', '.join(served)}", f"use kind: {match or 'RayCluster'}")]
    return None, []  # someone else's object: a ConfigMap, a Deployment, ...


def no_ray_objects(others: Mapping[str, int]) -> Finding:
    seen = ", ".join(f"{n} {kind}" for kind, n in sorted(others.items()))
    return Finding("RG104", Severity.WARNING, "", "",
                   f"no RayCluster, RayJob or RayService found ({seen or 'no objects'})",
                   "give the files that hold the RayClusters (a typo in `kind` shows as RG103)")


def schema_violation(ref: str, kind: str, path: Sequence[str | int], message: str) -> Finding:
    """A field KubeRay's CRD refuses (or the API server would drop as unknown)."""
    explain = ".".join([kind.lower(), *(p for p in path if isinstance(p, str))])
    if message.startswith("unknown field"):
        explain = explain.rpartition(".")[0]
    return Finding("RG105", Severity.ERROR, ref, field_path(path), message,
                   f"see `kubectl explain {explain}` (KubeRay's CRD)")
