"""``raygate check``: RayCluster configurations that silently break gang preemption
(RG0xx); what is wrong with a manifest itself (RG1xx) is ``raygate.plugin.manifest``'s.

Each rule is a small pure function from a RayCluster (and, when live, what raygate sees of
the cluster) to findings with a stable ID, a severity, the field path and a one-line fix.
The background: how KubeRay sizes Volcano's PodGroup (``minMember``, ``minResources``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from raygate.plugin.config import PolicyConfig
from raygate.plugin.devices import claim_gpu_reason
from raygate.plugin.lint_model import (
    ClusterFacts,
    Finding,
    GroupSpec,
    HeadSpec,
    LintCluster,
    Severity,
    Toleration,
)
from raygate.plugin.quantity import parse_milli

__all__ = ["RULES", "lint"]

# KubeRay's autoscaler sidecar when autoscalerOptions.resources is unset (requests = limits).
DEFAULT_AUTOSCALER_CPU = parse_milli("500m")
DEFAULT_AUTOSCALER_MEMORY = parse_milli("512Mi")
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
# Findings an operator has looked at and accepts, e.g. "RG003" or "RG003,RG010".
IGNORE_ANNOTATION = "raygate.io/check-ignore"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue manages an autoscaled RayCluster only as an elastic job (docs/deploy.md).
KUEUE_ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
# Node labels only nodes with an accelerator carry (GKE sets them from the node pool's
# accelerator; NVIDIA's GPU feature discovery from the device), beside the configured
# ``gpu_node_labels``: a selector on one of these matches GPU (or TPU) nodes only.
GPU_ONLY_NODE_LABELS = ("cloud.google.com/gke-accelerator",
                        "cloud.google.com/gke-tpu-accelerator", "nvidia.com/gpu.product")
# KubeRay's CRD default for an unset maxReplicas (math.MaxInt32).
CRD_MAX_REPLICAS = 2147483647
_OFFLINE = ClusterFacts(0, False, False)  # offline: nothing known, so every claim counts

LintRule = Callable[[LintCluster, ClusterFacts | None, PolicyConfig], list[Finding]]


def _group_path(cluster: LintCluster, group: GroupSpec, leaf: str = "") -> str:
    path = f"{cluster.spec_path}.workerGroupSpecs[{group.index}]"
    return f"{path}.{leaf}" if leaf else path


def _label(group: GroupSpec) -> str:
    return f"worker group {group.name!r}" if group.name else f"worker group #{group.index}"


def _is_gpu(spec: HeadSpec | GroupSpec, cluster: LintCluster, facts: ClusterFacts | None,
            config: PolicyConfig) -> bool:
    """The template's pods are GPU pods (``classify.gpu_pod_reason``'s rule): a GPU resource
    or a GPU DeviceClass's, or a claim for a GPU or not known (so, offline, any claim)."""
    known = facts or _OFFLINE
    devices = known.gpu_devices
    claims = ((ref, known.claim_of(cluster.namespace, ref)) for ref in spec.claims)
    return (any(spec.resources.get(r, 0) > 0 for r in (*config.gpu_resources, *devices.resources))
            or claim_gpu_reason(claims, devices) is not None)


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


def _cpu_floor(cluster: LintCluster, facts: ClusterFacts | None,
               config: PolicyConfig) -> list[tuple[str, str, HeadSpec | GroupSpec]]:
    """(what, path of its pod spec, its template view) of the head, when CPU-only, and of
    each CPU-only worker group that holds floor pods: the pods raygate keeps off GPU nodes."""
    out: list[tuple[str, str, HeadSpec | GroupSpec]] = []
    if not _is_gpu(cluster.head, cluster, facts, config):
        out.append(("CPU-only head", f"{cluster.spec_path}.headGroupSpec.template.spec",
                    cluster.head))
    out.extend((f"CPU-only {_label(g)} with {_floor(cluster, g)} floor pods",
                _group_path(cluster, g, "template.spec"), g)
               for g in cluster.groups
               if not _is_gpu(g, cluster, facts, config) and _floor(cluster, g) > 0)
    return out


def rg008_floor_tolerates_gpu(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """The head or a CPU-only floor group tolerating GPU taints: raygate refuses it GPU
    nodes, a scheduler without raygate does not. A warning: nothing breaks while raygate
    filters, but the toleration says the opposite of what raygate will do."""
    return [
        Finding("RG008", Severity.WARNING, cluster.ref, f"{path}.tolerations",
                f"{what} tolerates GPU taints: raygate refuses GPU nodes to it, and wherever "
                "raygate's rule does not reach (no native placement, a GPU node without a "
                "GPU label) a scheduler or node autoscaler can put it on one; raygate can "
                "add a toleration, never remove one", "drop the GPU toleration")
        for what, path, spec in _cpu_floor(cluster, facts, config)
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
        if _is_gpu(g, cluster, facts, config) and _floor(cluster, g) > facts.gpu_nodes
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
    for what, path, spec in _cpu_floor(cluster, facts, config):
        label = _gpu_only_selector(spec.node_selector, config)
        if label is not None:
            out.append(Finding(
                "RG013", Severity.ERROR, cluster.ref, f"{path}.nodeSelector",
                f"{what} selects GPU nodes only ({label}): raygate refuses GPU nodes to it, "
                "so it can never be placed", "select CPU nodes for it, or give it a GPU"))
    return out


def rg014_no_gpu_node_labels(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """No GPU node label is configured, and the cluster has CPU-only floor pods: raygate's
    native rule names GPU nodes by label only (a node autoscaler decides before the node
    exists), so it cannot be written; only the extender keeps the floor off GPU nodes."""
    if config.gpu_node_labels or not _cpu_floor(cluster, facts, config):
        return []
    return [Finding(
        "RG014", Severity.WARNING, cluster.ref, "policy.gpuNodeLabels",
        "no GPU node label is configured: raygate can detect GPU nodes only by their "
        "allocatable GPUs, which a node autoscaler cannot see before it buys a node, so "
        "raygate writes no native rule for this cluster's CPU-only floor",
        "set policy.gpuNodeLabels to the labels your GPU nodes carry "
        "(nvidia.com/gpu.present, your NodePool's label)")]


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
    rg014_no_gpu_node_labels,
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
