"""``raygate check``'s rules about GPU nodes (RG008, RG009, RG013, RG014): what the head
and CPU-only floor groups say of GPU nodes (tolerations, nodeSelector, required node
affinity) against what raygate does with them. A template
is a GPU one by ``classify.gpu_pod_reason``'s rule (``is_gpu_template``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from raygate.policy.config import PolicyConfig
from raygate.policy.constraints import NodeRequirement
from raygate.policy.devices import claim_gpu_reason
from raygate.policy.lint.model import (
    ClusterFacts,
    Finding,
    GroupSpec,
    HeadSpec,
    LintCluster,
    Severity,
    Toleration,
    floor_pods,
    group_label,
    group_path,
)

__all__ = ["GPU_ONLY_NODE_LABELS", "cpu_floor", "is_gpu_template",
           "rg008_floor_tolerates_gpu", "rg009_gpu_floor_above_gpu_nodes",
           "rg013_floor_selects_gpu_nodes", "rg014_no_gpu_node_labels", "tolerates_gpu"]

# Node labels only nodes with an accelerator carry (GKE sets them from the node pool's
# accelerator; NVIDIA's GPU feature discovery from the device), beside the configured
# ``gpu_node_labels``: a selector on one of these matches GPU (or TPU) nodes only.
GPU_ONLY_NODE_LABELS = ("cloud.google.com/gke-accelerator",
                        "cloud.google.com/gke-tpu-accelerator", "nvidia.com/gpu.product")
_OFFLINE = ClusterFacts(0, False, False)  # offline: nothing known, so every claim counts


def is_gpu_template(spec: HeadSpec | GroupSpec, cluster: LintCluster,
                    facts: ClusterFacts | None, config: PolicyConfig) -> bool:
    """The template's pods are GPU pods (``classify.gpu_pod_reason``'s rule): a GPU resource
    or a GPU DeviceClass's, or a claim for a GPU or not known (so, offline, any claim)."""
    known, ns = facts or _OFFLINE, cluster.namespace
    devices = known.gpu_devices
    return (any(spec.resources.get(r, 0) > 0 for r in (*config.gpu_resources, *devices.resources))
            or claim_gpu_reason(spec.claims, lambda name: known.claims.get((ns, name)),
                                lambda name: known.claim_templates.get((ns, name)),
                                devices) is not None)


def tolerates_gpu(tolerations: Sequence[Toleration], config: PolicyConfig) -> bool:
    for t in tolerations:
        if t.operator == "Exists" and not t.key:
            return True  # tolerates every taint
        if t.key in config.gpu_resources and t.effect in ("", "NoSchedule", "NoExecute"):
            return True
    return False


def cpu_floor(cluster: LintCluster, facts: ClusterFacts | None,
              config: PolicyConfig) -> list[tuple[str, str, HeadSpec | GroupSpec]]:
    """(what, path of its pod spec, its template view) of the head, when CPU-only, and of
    each CPU-only worker group that holds floor pods: the pods raygate keeps off GPU nodes."""
    out: list[tuple[str, str, HeadSpec | GroupSpec]] = []
    if not is_gpu_template(cluster.head, cluster, facts, config):
        out.append(("CPU-only head", f"{cluster.spec_path}.headGroupSpec.template.spec",
                    cluster.head))
    out.extend((f"CPU-only {group_label(g)} with {floor_pods(cluster, g)} floor pods",
                group_path(cluster, g, "template.spec"), g)
               for g in cluster.groups
               if not is_gpu_template(g, cluster, facts, config) and floor_pods(cluster, g) > 0)
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
        for what, path, spec in cpu_floor(cluster, facts, config)
        if tolerates_gpu(spec.tolerations, config)
    ]


def rg009_gpu_floor_above_gpu_nodes(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    if facts is None:
        return []
    return [
        Finding("RG009", Severity.WARNING, cluster.ref, group_path(cluster, g, "minReplicas"),
                f"GPU {group_label(g)} needs {floor_pods(cluster, g)} floor pods but raygate sees "
                f"{facts.gpu_nodes} GPU nodes: the gang can never be admitted whole",
                "lower minReplicas, or add GPU nodes")
        for g in cluster.groups
        if is_gpu_template(g, cluster, facts, config) and floor_pods(cluster, g) > facts.gpu_nodes
    ]


def _gpu_only_selector(selector: Mapping[str, str], config: PolicyConfig) -> str | None:
    for key, value in selector.items():
        if key in GPU_ONLY_NODE_LABELS or config.gpu_node_labels.get(key) == value:
            return f"{key}: {value}"
    return None


def _gpu_only_requirement(term: Sequence[NodeRequirement], config: PolicyConfig) -> str | None:
    """A requirement of ``term`` that only GPU nodes meet: a GPU-only label present or
    among the values, or the configured GPU label at its value alone."""
    for r in term:
        if r.key in GPU_ONLY_NODE_LABELS and r.operator in ("In", "Exists"):
            return f"{r.key} {r.operator} {list(r.values)}" if r.values else f"{r.key} Exists"
        wanted = config.gpu_node_labels.get(r.key)
        if wanted is not None and r.operator == "In" and set(r.values) == {wanted}:
            return f"{r.key} In {list(r.values)}"
    return None


def _gpu_only_affinity(terms: Sequence[Sequence[NodeRequirement]] | None,
                       config: PolicyConfig) -> str | None:
    """What makes a required node affinity admit GPU nodes only: every term (they are
    ORed) holds a GPU-only requirement. None when some term lets a CPU node in."""
    found = [_gpu_only_requirement(term, config) for term in terms or ()]
    if not found or None in found:
        return None
    return " or ".join(dict.fromkeys(str(f) for f in found))


def rg013_floor_selects_gpu_nodes(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """The head or a CPU-only floor group whose nodeSelector, or required node affinity,
    only GPU nodes match: raygate refuses it every GPU node, so it can never be placed. An
    error: the pods stay Pending."""
    out = []
    for what, path, spec in cpu_floor(cluster, facts, config):
        for where, found in (
                ("nodeSelector", _gpu_only_selector(spec.node_selector, config)),
                ("affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                 _gpu_only_affinity(spec.node_affinity, config))):
            if found is not None:
                out.append(Finding(
                    "RG013", Severity.ERROR, cluster.ref, f"{path}.{where}",
                    f"{what} {'selects' if where == 'nodeSelector' else 'requires'} GPU nodes "
                    f"only ({found}): raygate refuses GPU nodes to it, so it can never be "
                    "placed", "select CPU nodes for it, or give it a GPU"))
    return out


def rg014_no_gpu_node_labels(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """No GPU node label is configured, and the cluster has CPU-only floor pods: raygate's
    native rule names GPU nodes by label only (a node autoscaler decides before the node
    exists), so it cannot be written; only the extender keeps the floor off GPU nodes."""
    if config.gpu_node_labels or not cpu_floor(cluster, facts, config):
        return []
    return [Finding(
        "RG014", Severity.WARNING, cluster.ref, "policy.gpuNodeLabels",
        "no GPU node label is configured: raygate can detect GPU nodes only by their "
        "allocatable GPUs, which a node autoscaler cannot see before it buys a node, so "
        "raygate writes no native rule for this cluster's CPU-only floor",
        "set policy.gpuNodeLabels to the labels your GPU nodes carry "
        "(nvidia.com/gpu.present, your NodePool's label)")]
