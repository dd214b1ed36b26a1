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
    "HeadSpec",
    "LintCluster",
    "Severity",
    "closest",
    "did_you_mean",
    "field_path",
    "lint",
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
# names: RayJobSpec.RayClusterSpec is `rayClusterSpec`, RayServiceSpec's `rayClusterConfig`,
# RayCronJobSpec.JobTemplate a RayJobSpec).
RAY_KINDS: Mapping[str, tuple[str, ...]] = {
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
    "RayService": ("spec", "rayClusterConfig"),
    "RayCronJob": ("spec", "jobTemplate", "rayClusterSpec"),
}
RAY_API_VERSION = "ray.io/v1"
# Kueue manages an autoscaled RayCluster only as an elastic job (docs/deploy.md).
KUEUE_ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
# Node labels only nodes with an accelerator carry (GKE sets them from the node pool's
# accelerator; NVIDIA's GPU feature discovery from the device), beside the configured
# ``gpu_node_labels``: a selector on one of these matches GPU (or TPU) nodes only.
GPU_ONLY_NODE_LABELS = ("cloud.google.com/gke-accelerator",
                        "cloud.google.com/gke-tpu-accelerator", "nvidia.com/gpu.product")
# KubeRay's CRD default for an unset maxReplicas (math.MaxInt32).
CRD_MAX_REPLICAS = 2147483647


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
    node_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeadSpec:
    """The head group's pod template, as far as the rules read it."""

    resources: Mapping[str, int] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)


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
    head: HeadSpec = field(default_factory=HeadSpec)
    generate_name: str = ""

    @property
    def ref(self) -> str:
        return object_ref(self.kind, self.namespace, self.name, self.generate_name)


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


def _is_gpu(resources: Mapping[str, int], config: PolicyConfig) -> bool:
    return any(resources.get(r, 0) > 0 for r in config.gpu_resources)


def _floor(cluster: LintCluster, group: GroupSpec) -> int:
    hosts = group.num_of_hosts or 1
    if cluster.autoscaling:
        return (group.min_replicas or 0) * hosts
    return (group.replicas or 0) * hosts


def _max_text(value: int | None) -> str:
    return f"unset ({CRD_MAX_REPLICAS}, the CRD's default)" if value is None else str(value)


def rg001_floor_from_replicas(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """A cluster meant for Volcano, autoscaling off, and a group with ``replicas`` above
    its ``minReplicas``: KubeRay sizes the PodGroup's minMember from ``replicas`` then, so
    every worker is floor and the gang waits for all of them; ``minReplicas`` reads like a
    smaller floor but is only the lower bound of a count nobody changes. Only a warning:
    that may be just what was meant. Not said when ``minReplicas == replicas`` (the floor
    is the same either way) nor without a gang scheduler (nothing sizes a gang)."""
    if cluster.autoscaling or not _meant_for_volcano(cluster, facts):
        return []
    return [
        Finding(
            "RG001", Severity.WARNING, cluster.ref,
            f"{cluster.spec_path}.enableInTreeAutoscaling",
            f"{_label(g)} has minReplicas {g.min_replicas} below replicas {g.replicas} with "
            "in-tree autoscaling off: KubeRay sizes the Volcano gang from replicas, so all "
            f"{g.replicas} are floor and none is surplus (maxReplicas {_max_text(g.max_replicas)})",
            f"set {cluster.spec_path}.enableInTreeAutoscaling: true for a floor of "
            f"minReplicas, or minReplicas: {g.replicas}")
        for g in cluster.groups
        if g.min_replicas is not None and g.replicas is not None
        and 0 <= g.min_replicas < g.replicas
    ]


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
                "RG005", Severity.WARNING, cluster.ref, _group_path(cluster, g, "replicas"),
                f"{_label(g)} has replicas {g.replicas} outside [{low}, "
                f"{CRD_MAX_REPLICAS if high is None else high}]; KubeRay "
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


def _tolerates_gpu(tolerations: Sequence[Toleration], config: PolicyConfig) -> bool:
    for t in tolerations:
        if t.operator == "Exists" and not t.key:
            return True  # tolerates every taint
        if t.key in config.gpu_resources and t.effect in ("", "NoSchedule", "NoExecute"):
            return True
    return False


def _cpu_floor(cluster: LintCluster,
               config: PolicyConfig) -> list[tuple[str, str, HeadSpec | GroupSpec]]:
    """(what, path of its pod spec, its template view) of the head, when CPU-only, and of
    each CPU-only worker group that holds floor pods: the pods raygate keeps off GPU nodes."""
    out: list[tuple[str, str, HeadSpec | GroupSpec]] = []
    if not _is_gpu(cluster.head.resources, config):
        out.append(("CPU-only head", f"{cluster.spec_path}.headGroupSpec.template.spec",
                    cluster.head))
    out.extend((f"CPU-only {_label(g)} with {_floor(cluster, g)} floor pods",
                _group_path(cluster, g, "template.spec"), g)
               for g in cluster.groups
               if not _is_gpu(g.resources, config) and _floor(cluster, g) > 0)
    return out


def rg008_floor_tolerates_gpu(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """The head or a CPU-only floor group tolerating GPU taints: raygate refuses it GPU
    nodes, a scheduler without raygate does not. A warning: nothing breaks while raygate
    filters, but the toleration says the opposite of what raygate will do."""
    return [
        Finding("RG008", Severity.WARNING, cluster.ref, f"{path}.tolerations",
                f"{what} tolerates GPU taints: raygate refuses GPU nodes to it, and without "
                "raygate's filter it can take one", "drop the GPU toleration")
        for what, path, spec in _cpu_floor(cluster, config)
        if _tolerates_gpu(spec.tolerations, config)
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
        if _is_gpu(g.resources, config) and _floor(cluster, g) > facts.gpu_nodes
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


def rg012_kueue_autoscaling_not_elastic(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """An autoscaled RayCluster queued in Kueue without the elastic-job annotation: Kueue's
    webhook refuses it (a Kueue-managed RayCluster may autoscale only as an elastic job,
    with the ElasticJobsViaWorkloadSlices feature gate on). An error: it is not admitted."""
    if (cluster.kind != "RayCluster" or not cluster.autoscaling
            or KUEUE_QUEUE_LABEL not in cluster.labels
            or cluster.annotations.get(KUEUE_ELASTIC_ANNOTATION) == "true"):
        return []
    return [Finding(
        "RG012", Severity.ERROR, cluster.ref, "metadata.annotations",
        f"queued in Kueue ({KUEUE_QUEUE_LABEL}) with in-tree autoscaling on but without "
        f"{KUEUE_ELASTIC_ANNOTATION}: \"true\": Kueue's webhook refuses the RayCluster",
        f"add the annotation {KUEUE_ELASTIC_ANNOTATION}: \"true\" (and turn on Kueue's "
        "ElasticJobsViaWorkloadSlices feature gate), or turn autoscaling off")]


def _gpu_only_selector(selector: Mapping[str, str], config: PolicyConfig) -> str | None:
    for key, value in selector.items():
        if key in GPU_ONLY_NODE_LABELS or config.gpu_node_labels.get(key) == value:
            return f"{key}: {value}"
    return None


def rg013_floor_selects_gpu_nodes(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """The head or a CPU-only floor group whose nodeSelector only GPU nodes match: raygate
    refuses it every GPU node, so it can never be placed. An error: the pods stay
    Pending."""
    out = []
    for what, path, spec in _cpu_floor(cluster, config):
        label = _gpu_only_selector(spec.node_selector, config)
        if label is not None:
            out.append(Finding(
                "RG013", Severity.ERROR, cluster.ref, f"{path}.nodeSelector",
                f"{what} selects GPU nodes only ({label}): raygate refuses GPU nodes to it, "
                "so it can never be placed", "select CPU nodes for it, or give it a GPU"))
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
    rg012_kueue_autoscaling_not_elastic,
    rg013_floor_selects_gpu_nodes,
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


def object_ref(kind: str, namespace: str, name: str, generate_name: str = "") -> str:
    """``RayJob ray/train``; an object named by the API server from its ``generateName``
    shows that prefix: ``RayJob ray/train-<generated>``."""
    name = name or (f"{generate_name}<generated>" if generate_name else "")
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
    under another group. Another group's kind is someone else's object, whatever its name
    (a ``v1`` Service, a ``batch/v1`` CronJob, Cluster API's Cluster): only a ``ray.io``
    kind, or one that starts with "Ray", is read as a misspelled Ray kind."""
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
    match = closest(kind, RAY_KINDS)
    if group == "ray.io" or (match and kind.lower().startswith("ray")):
        return None, [Finding(
            "RG103", Severity.ERROR, ref, "kind",
            f"unknown kind {kind!r}{did_you_mean(kind, RAY_KINDS)}: KubeRay serves "
            f"{', '.join(RAY_KINDS)}", f"use kind: {match or 'RayCluster'}")]
    return None, []  # someone else's object: a Service, a ConfigMap, a Deployment, ...


def schema_violation(ref: str, kind: str, path: Sequence[str | int], message: str) -> Finding:
    """A field KubeRay's CRD refuses (or the API server would drop as unknown)."""
    explain = ".".join([kind.lower(), *(p for p in path if isinstance(p, str))])
    if message.startswith("unknown field"):
        explain = explain.rpartition(".")[0]
    return Finding("RG105", Severity.ERROR, ref, field_path(path), message,
                   f"see `kubectl explain {explain}` (KubeRay's CRD)")
