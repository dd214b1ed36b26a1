"""``raygate check``: RayCluster configurations that silently break gang preemption
(RG0xx); what is wrong with a manifest itself (RG1xx) is ``raygate.policy.lint.manifest``'s.

Each rule is a small pure function from a RayCluster (and, when live, what raygate sees of
the cluster) to findings with a stable ID, a severity, the field path and a one-line fix.
The background: how KubeRay sizes a gang (Volcano's PodGroup ``minMember`` and
``minResources``, Kubernetes' own PodGroup ``minCount``). The rules about GPU nodes are
``raygate.policy.lint.gpu``'s, the one about scale gates (RG018)
``raygate.policy.lint.scale_gates``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from raygate.policy.admission.gang import KUEUE_QUEUE_LABEL
from raygate.policy.config import PolicyConfig
from raygate.policy.lint.gpu import (
    is_gpu_template,
    rg008_floor_tolerates_gpu,
    rg009_gpu_floor_above_gpu_nodes,
    rg013_floor_selects_gpu_nodes,
    rg014_no_gpu_node_labels,
    tolerates_gpu,
)
from raygate.policy.lint.model import (
    ClusterFacts,
    Finding,
    GroupSpec,
    LintCluster,
    Severity,
    group_label,
    group_path,
)
from raygate.policy.lint.scale_gates import rg018_scale_gates
from raygate.policy.quantity import parse_milli
from raygate.policy.scale_up import ALL_OR_NOTHING
from raygate.policy.scale_up import ANNOTATION as SCALE_UP_ANNOTATION

__all__ = ["RULES", "lint"]

# KubeRay's autoscaler sidecar when autoscalerOptions.resources is unset (requests = limits).
DEFAULT_AUTOSCALER_CPU = parse_milli("500m")
DEFAULT_AUTOSCALER_MEMORY = parse_milli("512Mi")
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
# Findings an operator has looked at and accepts, e.g. "RG003" or "RG003,RG010".
IGNORE_ANNOTATION = "raygate.io/check-ignore"
# Kueue manages an autoscaled RayCluster only as an elastic job (docs/deploy.md).
KUEUE_ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
# KubeRay 1.7's gang on Kubernetes' own PodGroups (its batch scheduler kubernetes-was,
# operator feature gate KubernetesWAS): a RayCluster opts in with this label.
KUBERNETES_GANG_LABEL = "ray.io/gang-scheduling-enabled"
# KubeRay's CRD default for an unset maxReplicas (math.MaxInt32).
CRD_MAX_REPLICAS = 2147483647

LintRule = Callable[[LintCluster, ClusterFacts | None, PolicyConfig], list[Finding]]


def _max_text(value: int | None) -> str:
    return f"unset ({CRD_MAX_REPLICAS}, the CRD's default)" if value is None else str(value)


def _grows(cluster: LintCluster, group: GroupSpec) -> bool:
    """The group can have surplus workers: autoscaled, with ``maxReplicas`` (unset: the
    CRD's default) above ``minReplicas``."""
    return cluster.autoscaling and (group.max_replicas is None
                                    or group.max_replicas > (group.min_replicas or 0))


def _growing_cpu_groups(cluster: LintCluster, facts: ClusterFacts | None,
                        config: PolicyConfig) -> list[GroupSpec]:
    """The CPU-only groups that can have surplus workers."""
    return [g for g in cluster.groups
            if _grows(cluster, g) and not is_gpu_template(g, cluster, facts, config)]


def rg001_floor_from_replicas(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """A cluster meant for Volcano, autoscaling off, and a group with ``replicas`` above
    its ``minReplicas``: KubeRay sizes the PodGroup's minMember from ``replicas`` then, so
    every worker is floor and the gang waits for all of them; ``minReplicas`` reads like a
    smaller floor but is only the lower bound of a count nobody changes. Only a warning:
    that may be just what was meant. Not said when ``minReplicas == replicas`` (the floor
    is the same either way) nor without a gang scheduler (nothing sizes a gang). KubeRay
    1.7's Kubernetes gang (``KUBERNETES_GANG_LABEL``) sizes ``minCount`` the same way, but
    gangs no autoscaled cluster (RG015): there the fix is ``minReplicas`` alone."""
    kubernetes = _kubernetes_gang(cluster)
    if cluster.autoscaling or not (kubernetes or _meant_for_volcano(cluster, facts)):
        return []
    gang = "Kubernetes gang (its PodGroup's minCount)" if kubernetes else "Volcano gang"
    autoscale = (f"set {cluster.spec_path}.enableInTreeAutoscaling: true for a floor of "
                 "minReplicas, or " if not kubernetes else "")
    return [
        Finding(
            "RG001", Severity.WARNING, cluster.ref,
            f"{cluster.spec_path}.enableInTreeAutoscaling",
            f"{group_label(g)} has minReplicas {g.min_replicas} below replicas {g.replicas} with "
            f"in-tree autoscaling off: KubeRay sizes the {gang} from replicas, so all "
            f"{g.replicas} are floor and none is surplus (maxReplicas {_max_text(g.max_replicas)})",
            f"{autoscale}minReplicas: {g.replicas}")
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
        if _grows(cluster, g) and (g.num_of_hosts or 1) > 1:
            out.append(Finding(
                "RG002", Severity.WARNING, cluster.ref, group_path(cluster, g, "numOfHosts"),
                f"{group_label(g)} is autoscaled with numOfHosts {g.num_of_hosts}: preempting one "
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
        Finding("RG004", Severity.ERROR, cluster.ref, group_path(cluster, g, "minReplicas"),
                f"{group_label(g)} has minReplicas {g.min_replicas} > maxReplicas {g.max_replicas}",
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
                "RG005", Severity.WARNING, cluster.ref, group_path(cluster, g, "replicas"),
                f"{group_label(g)} has replicas {g.replicas} outside [{low}, "
                f"{CRD_MAX_REPLICAS if high is None else high}]; KubeRay "
                "clamps it, so the manifest does not say what runs",
                "set replicas within [minReplicas, maxReplicas]"))
    return out


def rg006_missing_group_name(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    return [
        Finding("RG006", Severity.ERROR, cluster.ref, group_path(cluster, g, "groupName"),
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
                "RG007", Severity.ERROR, cluster.ref, group_path(cluster, g, "groupName"),
                f"groupName {g.name!r} {why}: pods of both groups share one ray.io/group "
                "label and one floor", "rename the group"))
        seen.setdefault(g.name, g.index)
    return out


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
                    "RG011", Severity.ERROR, cluster.ref, group_path(cluster, g, leaf),
                    f"{group_label(g)} has {leaf} {value}: the API server accepts it (the CRD "
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


def _kubernetes_gang(cluster: LintCluster) -> bool:
    return cluster.labels.get(KUBERNETES_GANG_LABEL) == "true"


def rg015_kubernetes_gang_autoscaled(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """Asked for KubeRay 1.7's Kubernetes gang with in-tree autoscaling on: KubeRay skips
    autoscaled clusters (it makes a fixed-size gang only), so no Workload and no PodGroup
    are made and nothing gangs the pods. A warning: the cluster runs, without a gang."""
    if not (_kubernetes_gang(cluster) and cluster.autoscaling):
        return []
    return [Finding(
        "RG015", Severity.WARNING, cluster.ref, f"{cluster.spec_path}.enableInTreeAutoscaling",
        f"labelled {KUBERNETES_GANG_LABEL}: \"true\" with in-tree autoscaling on: KubeRay's "
        "kubernetes-was gang scheduler skips autoscaled clusters, so no Workload or PodGroup "
        "is made and nothing gangs its pods",
        "turn autoscaling off for a fixed-size gang, or gang an autoscaled cluster with "
        "Volcano or Kueue")]


def rg016_cpu_group_first(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """The seed's shape: an autoscaled CPU-only group kept to CPU nodes beside one that
    tolerates GPU taints (its workers may land on GPU nodes). The Ray autoscaler (v2, Ray
    >= 2.56) scales the group of higher ``priority`` (KubeRay >= 1.7) first, among groups
    that fit a demand equally well: so the CPU group should have the higher one. Only
    information: it breaks ties, and raygate keeps the floor off GPU nodes either way."""
    cpu = _growing_cpu_groups(cluster, facts, config)
    may_gpu = [g for g in cpu if tolerates_gpu(g.tolerations, config)]
    if not may_gpu:
        return []
    top = max(g.priority or 0 for g in may_gpu)
    others = ", ".join(group_label(g) for g in may_gpu)
    return [Finding(
        "RG016", Severity.INFO, cluster.ref, group_path(cluster, g, "priority"),
        f"{group_label(g)} keeps to CPU nodes and {others} may use GPU nodes, at priority "
        f"{g.priority or 0} against {top}: the Ray autoscaler may scale the GPU-tolerating "
        "group first", f"set priority: {top + 1} (KubeRay >= 1.7, Ray >= 2.56; it breaks "
        "ties between groups that fit a demand equally well)")
        for g in cpu if g not in may_gpu and (g.priority or 0) <= top]


def rg017_scale_up_holds_nothing(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """``raygate.io/scale-up`` that raygate cannot act on: a value it does not know, or a
    cluster with no surplus worker to hold (raygate holds CPU-only workers past the floor;
    GPU workers carry no gate, and without autoscaling the floor is ``replicas``). A
    warning: the operator asked for all-or-nothing scale-ups and gets one-by-one."""
    value = cluster.annotations.get(SCALE_UP_ANNOTATION)
    if value is None:
        return []
    if value != ALL_OR_NOTHING:
        return [Finding(
            "RG017", Severity.WARNING, cluster.ref, "metadata.annotations",
            f"{SCALE_UP_ANNOTATION}: {value!r} is not a value raygate knows: it ignores the "
            "annotation, and scale-ups are released as their workers fit",
            f"write {SCALE_UP_ANNOTATION}: {ALL_OR_NOTHING}, or remove the annotation")]
    if _growing_cpu_groups(cluster, facts, config):
        return []
    why = ("in-tree autoscaling is off, so every worker is floor (replicas)"
           if not cluster.autoscaling else "no CPU-only worker group may grow past "
           "minReplicas (GPU workers carry no placement gate)")
    return [Finding(
        "RG017", Severity.WARNING, cluster.ref, "metadata.annotations",
        f"{SCALE_UP_ANNOTATION}: {ALL_OR_NOTHING} holds a scale-up's CPU-only surplus "
        f"workers, and this cluster has none: {why}",
        "remove the annotation, or give a CPU-only group maxReplicas above minReplicas")]


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
    rg015_kubernetes_gang_autoscaled,
    rg016_cpu_group_first,
    rg017_scale_up_holds_nothing,
    rg018_scale_gates,
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
