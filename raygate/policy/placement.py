"""Placement: which nodes a pod may use and how much raygate likes each.

The decision is made once per request (``decide``) and is the same for every node of a
class, so the per-node work is a set lookup: ``filter_names`` and ``score`` are called
in the hot loop, and the extender precomputes what it can per node when the cache changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from itertools import filterfalse

from raygate.policy.classify import RoleVerdict, gpu_pod_reason, pod_role
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import GpuNodesForSurplus, PolicyConfig
from raygate.policy.model import PodView, Role

__all__ = [
    "AVOIDS_GPU",
    "GPU_REFUSAL",
    "MAX_SCORE",
    "Decision",
    "Placement",
    "Rule",
    "decide",
    "filter_names",
    "score",
    "thrash_guard_until",
]

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority
GPU_REFUSAL = ": GPU node refused to a "
"""In every message of a GPU node refused (``raygate: <rule>: GPU node refused to a ...``):
kube-scheduler repeats it in the pod's ``PodScheduled`` message."""
MIN_SCORE = 0


class Placement(Enum):
    UNMANAGED = "unmanaged"  # not raygate's business: pass every node, no score
    PREFER_CPU = "prefer-cpu"  # GPU nodes pass but score low
    AVOID_GPU = "avoid-gpu"  # GPU nodes fail, unresolvably


class Rule(Enum):
    """The rule behind a decision; its value names it in reasons, logs and metrics."""

    NOT_RAY = "not-a-ray-pod"
    GPU_POD = "gpu-pod"
    HEAD_AVOIDS_GPU = "head-avoids-gpu"
    FLOOR_AVOIDS_GPU = "floor-avoids-gpu"
    THRASH_GUARD = "thrash-guard"
    POLICY_NEVER = "policy-never"
    SURPLUS_PREFERS_CPU = "surplus-prefers-cpu"
    POLICY_ALWAYS = "policy-always"


AVOIDS_GPU = frozenset({Rule.HEAD_AVOIDS_GPU, Rule.FLOOR_AVOIDS_GPU, Rule.THRASH_GUARD,
                        Rule.POLICY_NEVER})
"""The rules whose decision refuses GPU nodes (``AVOID_GPU``; a native required term)."""


@dataclass(frozen=True, slots=True)
class Decision:
    placement: Placement
    rule: Rule
    role: Role | None
    reason: str
    """In words, for logs and ``explain``."""
    gpu_node_message: str = ""
    """The message a rejected GPU node gets: names raygate and the rule."""
    cluster_unknown: bool = False
    """A Ray pod whose RayCluster the cluster view lacks (decided as floor: fail safe)."""
    clock_dependent: bool = False
    """The clock took part (the group has a thrash guard, running or over): the same pod
    and cluster view may be decided otherwise at another moment. Every other decision is
    a function of the pod, the view and the config alone."""

    @property
    def refuses_gpu_nodes(self) -> bool:
        return self.placement is Placement.AVOID_GPU

    def refusal(self, node_is_gpu: bool) -> str | None:
        """Why filter fails a node of this class, or None when it passes: filter's one
        rule, for every protocol (``filter_names`` applies it to many names at once)."""
        return self.gpu_node_message if node_is_gpu and self.refuses_gpu_nodes else None


def thrash_guard_until(pod: PodView, view: ClusterView, config: PolicyConfig) -> float | None:
    """When the thrash guard of ``pod``'s group ends: the last scheduler preemption of one
    of its pods on a GPU node plus the window; None when it never lost one."""
    if config.thrash_guard_seconds <= 0:
        return None
    times = [r.at for r in view.preemptions(pod.group_key) if r.on_gpu_node]
    if not times:
        return None
    return max(times) + config.thrash_guard_seconds


def decide(pod: PodView, view: ClusterView, config: PolicyConfig, now: float,
           role: RoleVerdict | None = None) -> Decision:
    """How raygate treats ``pod`` on GPU nodes, with the rule and the reason; ``role``
    when the caller knows it (a gated pod's release role), else ``pod_role``'s."""
    if not pod.is_ray:
        return Decision(Placement.UNMANAGED, Rule.NOT_RAY, None, "not a Ray pod")
    gpu = gpu_pod_reason(pod, view, config)
    if gpu is not None:
        return Decision(Placement.UNMANAGED, Rule.GPU_POD, None, gpu)
    role = pod_role(pod, view) if role is None else role
    mode = config.gpu_nodes_for_surplus
    if mode is GpuNodesForSurplus.ALWAYS:
        return _prefer(Rule.POLICY_ALWAYS, role, f"{role.reason}; policy lets every "
                       "CPU-only Ray pod use GPU nodes (scored low)")
    if role.role is Role.HEAD:
        return _avoid(Rule.HEAD_AVOIDS_GPU, role, "CPU-only Ray head; " + role.reason)
    if role.role is Role.FLOOR:
        return _avoid(Rule.FLOOR_AVOIDS_GPU, role, "CPU-only floor worker; " + role.reason)
    if mode is GpuNodesForSurplus.NEVER:
        return _avoid(Rule.POLICY_NEVER, role,
                      f"CPU-only surplus worker; {role.reason}; policy keeps it off GPU nodes")
    until = thrash_guard_until(pod, view, config)
    if until is None:
        return _prefer(Rule.SURPLUS_PREFERS_CPU, role, "CPU-only surplus worker; " + role.reason)
    # The window is half-open, [preempted at, preempted at + window): at exactly
    # ``until`` the guard is over. A preemption stamped in the future (clock skew between
    # the API server and raygate) keeps the guard on.
    if now < until:
        ago = now - (until - config.thrash_guard_seconds)
        when = f"{ago:.0f}s ago" if ago >= 0 else f"{-ago:.0f}s in the future (clock skew)"
        return _avoid(
            Rule.THRASH_GUARD,
            role,
            f"CPU-only surplus worker; group {pod.group_key.group} lost a pod to scheduler "
            f"preemption on a GPU node {when}; the guard lasts "
            f"{config.thrash_guard_seconds:.0f}s",
            clock_dependent=True,
        )
    return _prefer(Rule.SURPLUS_PREFERS_CPU, role, "CPU-only surplus worker; " + role.reason,
                   clock_dependent=True)


def _avoid(rule: Rule, role: RoleVerdict, reason: str, clock_dependent: bool = False
           ) -> Decision:
    return Decision(
        Placement.AVOID_GPU, rule, role.role, reason,
        gpu_node_message=f"raygate: {rule.value}{GPU_REFUSAL}{reason}",
        cluster_unknown=role.cluster_unknown, clock_dependent=clock_dependent,
    )


def _prefer(rule: Rule, role: RoleVerdict, reason: str, clock_dependent: bool = False
            ) -> Decision:
    return Decision(Placement.PREFER_CPU, rule, role.role, reason,
                    cluster_unknown=role.cluster_unknown, clock_dependent=clock_dependent)


def score(node_is_gpu: bool) -> int:
    """kube-scheduler's 0..10 score of a node of a known class for a managed (CPU-only Ray)
    pod; the Volcano plugin scales it. Unmanaged pods and unknown nodes get no entry."""
    return MIN_SCORE if node_is_gpu else MAX_SCORE


def volcano_score(node_is_gpu: bool, config: PolicyConfig) -> float:
    """Volcano's score of a node for a managed pod: raygate's 0..10 scaled by
    ``volcanoScoreScale``, since Volcano adds plugin scores as they come (floats, not
    weighted like kube-scheduler's extenders)."""
    return float(score(node_is_gpu) * config.volcano_score_scale)


def filter_names(
    decision: Decision, names: list[str], gpu_nodes: frozenset[str]
) -> tuple[list[str], dict[str, str]]:
    """Split ``names`` into those that pass, in input order (``names`` itself when none is
    refused), and the GPU nodes refused with their message, also in input order. Nodes the
    cache has never seen are not in ``gpu_nodes``: they pass (fail open — kube-scheduler
    knows them, raygate does not yet). On the hot path: C-level filters, no per-node Python
    bytecode, and two passes over the names, not three (at 5,000 names the fresh strings do
    not fit the CPU's cache and every pass reloads them: ~15 % of the request)."""
    if not decision.refuses_gpu_nodes:
        return names, {}
    failed = dict.fromkeys(filter(gpu_nodes.__contains__, names), decision.gpu_node_message)
    if not failed:
        return names, failed
    return list(filterfalse(failed.__contains__, names)), failed
