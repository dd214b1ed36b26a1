"""The floor in its native form: the PodDisruptionBudgets a RayCluster should have.

Everything that evicts through the Eviction API (Karpenter's consolidation, Cluster
Autoscaler's scale-down, ``kubectl drain``, the descheduler) honours a
PodDisruptionBudget, and kube-scheduler's preemption weighs it (the per-pod path prefers
candidates with fewer violations; the workload-aware path reprieves violating victims
first). None of them calls raygate's extender. So each floor the extender protects is
also published as a budget:

- each worker group with a floor (``classify.group_floor``, the very number the
  extender's verbs keep) gets one, selecting KubeRay's labels of that group's workers,
  with ``minAvailable`` equal to the floor: the surplus above it may be evicted, the
  floor may not;
- the head gets one, ``minAvailable: 1``;
- a suspended cluster gets none (KubeRay deletes its pods anyway), nor does a group whose
  floor is 0.

Selectors never overlap: the Eviction API refuses to evict a pod that more than one
budget selects (``pkg/registry/core/pod/storage/eviction.go``), so the head's selects
``ray.io/node-type=head`` and each group's ``ray.io/node-type=worker`` and its
``ray.io/group``.

Names are deterministic, unique in the namespace and at most 63 characters: the cluster
and group names, then a short hash of both. The hash is always there: plain
concatenation is ambiguous (cluster ``a-b`` group ``c`` and cluster ``a`` group ``b-c``),
and two RayClusters in one namespace must never write the same budget.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from raygate.policy.classify import HEAD_GROUP, group_floor
from raygate.policy.model import LABEL_CLUSTER, LABEL_GROUP, LABEL_NODE_TYPE, RayClusterView

__all__ = [
    "LABEL_MANAGED_BY",
    "LABEL_RAYCLUSTER",
    "MANAGED_BY",
    "MAX_NAME",
    "Budget",
    "budget_name",
    "desired_budgets",
]

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "raygate"
LABEL_RAYCLUSTER = "raygate.io/raycluster"
"""On each budget: the RayCluster it keeps the floor of (cleanup lists by it)."""
MAX_NAME = 63
"""raygate's own bound (a DNS label): budget names read well in ``kubectl`` and fit
wherever a name becomes a label value."""
_HASH = 8
_INVALID = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True, slots=True)
class Budget:
    """One PodDisruptionBudget raygate wants: ``min_available`` of the pods
    ``selector`` matches, in ``namespace``, owned by the RayCluster ``cluster``."""

    namespace: str
    name: str
    cluster: str
    cluster_uid: str
    group: str
    """The worker group, or KubeRay's ``headgroup`` for the head's."""
    min_available: int
    selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def labels(self) -> Mapping[str, str]:
        return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_RAYCLUSTER: self.cluster}


def budget_name(cluster: str, group: str) -> str:
    """``<cluster>-<group>-<hash>`` (``head`` for the head), cut to ``MAX_NAME``
    characters before the hash; lower case, only what a DNS subdomain allows."""
    digest = hashlib.sha256(f"{cluster}\0{group}".encode()).hexdigest()[:_HASH]
    readable = "head" if group == HEAD_GROUP else group
    stem = _INVALID.sub("-", f"{cluster}-{readable}".lower())
    stem = stem[:MAX_NAME - _HASH - 1].strip("-.")
    return f"{stem}-{digest}" if stem else digest


def desired_budgets(cluster: RayClusterView) -> tuple[Budget, ...]:
    """The budgets ``cluster`` should have, the head's first, then its groups in spec
    order."""
    if cluster.suspended:
        return ()

    def budget(group: str, floor: int, selector: dict[str, str]) -> Budget:
        return Budget(cluster.namespace, budget_name(cluster.name, group), cluster.name,
                      cluster.uid, group, floor, MappingProxyType(selector))

    budgets = [budget(HEAD_GROUP, group_floor(cluster, HEAD_GROUP),
                      {LABEL_CLUSTER: cluster.name, LABEL_NODE_TYPE: "head"})]
    seen = {HEAD_GROUP}
    for spec in cluster.worker_groups:
        if spec.name in seen:  # a name twice (KubeRay refuses it): one budget
            continue
        seen.add(spec.name)
        floor = group_floor(cluster, spec.name)
        if floor > 0:
            budgets.append(budget(spec.name, floor, {
                LABEL_CLUSTER: cluster.name, LABEL_NODE_TYPE: "worker",
                LABEL_GROUP: spec.name}))
    return tuple(budgets)
