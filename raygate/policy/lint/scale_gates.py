"""``raygate check``'s RG018: the scale gates a live RayCluster's worker groups carry
(``scaleStrategy.scaleGate``, kuberay#5094), raygate's and other controllers', each said as
information: a gate is a controller's judgement of the moment, not a fault of the spec, so
it never fails the check.

Why a raygate gate holds and since when is the admission status's (``admission.gates``),
which only a running raygate derives; ``raygate check`` reads the cluster's API server
alone, so each finding says where to ask. Another writer's gate is its writer's to lift.
"""

from __future__ import annotations

from raygate.contract.scale_gate import is_raygates
from raygate.policy.admission.gates import (
    CANNOT_FIT,
    NO_NODE_COMING,
    ONLY_GPU_ROOM,
    THRASH_GUARD,
)
from raygate.policy.config import PolicyConfig
from raygate.policy.lint.model import (
    ClusterFacts,
    Finding,
    GroupSpec,
    LintCluster,
    Severity,
    group_label,
    group_path,
)

__all__ = ["MEANINGS", "rg018_scale_gates"]

MEANINGS = {
    NO_NODE_COMING: "the node autoscaler (Karpenter, Cluster Autoscaler) said no node comes "
                    "for a pod of the group",
    ONLY_GPU_ROOM: "CPU-only pods of the group wait while only GPU nodes have room, which "
                   "raygate keeps for GPU work",
    THRASH_GUARD: "the group lost pods to scheduler preemption inside the thrash-guard "
                  "window and pods of it still pend",
    CANNOT_FIT: "an all-or-nothing scale-up is held: no node autoscaler runs and the whole "
                "batch does not fit the nodes there are",
}
"""What each of raygate's gates (``admission.gates.SCALE_GATE_RULES``) says, in words."""

_HONOURED = ("an autoscaler that honours scale gates (raygate-autoscaler) launches no "
             "worker there and moves the demand to the next group by priority")


def _finding(cluster: LintCluster, group: GroupSpec, index: int, name: str) -> Finding:
    path = group_path(cluster, group, f"scaleStrategy.scaleGate[{index}]")
    label = group_label(group)
    if not is_raygates(name):
        return Finding(
            "RG018", Severity.INFO, cluster.ref, path,
            f"{label} carries scale gate {name}, another controller's: {_HONOURED}",
            "its writer lifts it (raygate never touches it): ask that controller why "
            "(Kueue for kueue.k8s.io/ gates)")
    meaning = MEANINGS.get(name, "one this raygate does not know: raygate removes it")
    return Finding(
        "RG018", Severity.INFO, cluster.ref, path,
        f"{label} carries raygate's scale gate {name}: {meaning}; {_HONOURED}",
        f"raygate lifts it when its reason ends; why and since when: `raygate explain "
        f"{cluster.namespace}/POD` of a pending worker of the group, or the admission "
        f"status (/v1/namespaces/{cluster.namespace}/rayclusters/{cluster.name}/admission, "
        "its group's scaleGates)")


def rg018_scale_gates(
    cluster: LintCluster, facts: ClusterFacts | None, config: PolicyConfig
) -> list[Finding]:
    """Each scale gate on a worker group of a live RayCluster, in spec order. Offline,
    none: a manifest carries no controller's gate (and neither CRD raygate ships for files
    has the field)."""
    if facts is None:
        return []
    return [_finding(cluster, g, i, name) for g in cluster.groups
            for i, name in enumerate(g.scale_gates) if name]
