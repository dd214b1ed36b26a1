"""Room on the nodes, estimated from raygate's cache as kube-scheduler's NodeResourcesFit,
NodeAffinity and TaintToleration would judge it: each schedulable node's allocatable minus
the requests of the pods bound there (terminating ones included), and whether a pod may go
there (its node selector, required node affinity and tolerations: ``PodView.constraints``,
kept while it is gated or unbound). Other schedulers' rules (pod affinity, topology spread,
volumes, ports) are not in it.

Two readers: an all-or-nothing scale-up's fit (``scale_up.fit_count``), and ``GpuRoom``:
whether only GPU nodes have room for a waiting CPU-only pod that raygate keeps off them
(the scale gate ``raygate.io/only-gpu-room``), decided the same way whether raygate's rule
is in the pod (native placement) or asked by kube-scheduler at each attempt (the scheduler
extender).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from raygate.policy.classify import LABEL_RULE, pod_requests
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.constraints import NodeConstraints
from raygate.policy.model import NodeView, PodView
from raygate.policy.native import rule_requirements
from raygate.policy.placement import AVOIDS_GPU, Rule, decide

__all__ = ["GpuRoom", "allowed", "fits", "free_on", "kept_off_by", "schedulable", "take"]

_RULES = {rule.value: rule for rule in Rule}


def schedulable(view: ClusterView) -> list[NodeView]:
    """The nodes that take new pods (not cordoned): CPU nodes first, then by name."""
    return sorted((n for n in view.nodes() if not n.unschedulable),
                  key=lambda n: (bool(view.is_gpu_node(n.name)), n.name))


def free_on(node: NodeView, view: ClusterView) -> dict[str, int]:
    """The node's allocatable less the requests of the pods bound to it."""
    free = dict(node.allocatable)
    for resource, amount in view.requested_on(node.name).items():
        free[resource] = free.get(resource, 0) - amount
    return free


def fits(need: Mapping[str, int], room: Mapping[str, int]) -> bool:
    return all(room.get(r, 0) >= a for r, a in need.items() if a > 0)


def allowed(pod: PodView, avoid_gpu: bool, view: ClusterView, node: NodeView) -> bool:
    """Whether ``pod`` (kept off GPU nodes: ``avoid_gpu``) may go to ``node``."""
    if avoid_gpu and view.is_gpu_node(node.name):
        return False
    return pod.constraints is None or pod.constraints.admits(node.name, node.labels,
                                                              node.taints)


def take(need: Mapping[str, int], nodes: Sequence[NodeView],
         free: dict[str, dict[str, int]], may: Callable[[NodeView], bool]) -> bool:
    """Place ``need`` on the first of ``nodes`` it ``may`` use with room: its room taken
    from ``free``; False when none has."""
    for node in nodes:
        room = free[node.name]
        if may(node) and fits(need, room):
            for resource, amount in need.items():
                room[resource] = room.get(resource, 0) - amount
            return True
    return False


def kept_off_by(pod: PodView, view: ClusterView, config: PolicyConfig,
                now: float) -> Rule | None:
    """The rule of raygate's that keeps ``pod`` off GPU nodes now, or None. Where raygate
    wrote its rule into the pod (native placement: ``LABEL_RULE`` beside the required node
    affinity, for the pod's life), that rule; else raygate's decision, which the scheduler
    extender asks at each attempt. Never the thrash guard while it is on: that is its own
    gate's reason (a native pod's thrash-guard rule outlives the guard, and counts after)."""
    decision = decide(pod, view, config, now)
    if decision.rule is Rule.THRASH_GUARD:
        return None
    written = pod.labels.get(LABEL_RULE)
    if written is None:
        return decision.rule if decision.refuses_gpu_nodes else None
    rule = _RULES.get(written)  # None: released failed open, or a value raygate never wrote
    return rule if rule in AVOIDS_GPU and config.gpu_node_labels else None


def _shape(constraints: NodeConstraints | None) -> object:
    if constraints is None:
        return None
    return (tuple(sorted(constraints.selector.items())), constraints.terms,
            constraints.tolerations)


class _Answers:
    """One view's answers, by pod shape (requests and constraints: the pods of one worker
    group ask the same): the GPU node with room, or "". A view (a cache snapshot) never
    changes, so its answers hold for every status derived from it, of any RayCluster."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.nodes = schedulable(view)
        self.by_shape: dict[object, str] = {}

    def only_gpu_node(self, need: Mapping[str, int],
                      constraints: NodeConstraints | None) -> str:
        """The first GPU node ``constraints`` admit with room for ``need`` when no other
        node they admit has room; "" otherwise."""
        view = self.view
        for node in self.nodes:
            if constraints is not None and not constraints.admits(node.name, node.labels,
                                                                   node.taints):
                continue
            used = view.requested_on(node.name)
            if all(node.allocatable.get(r, 0) - used.get(r, 0) >= a
                   for r, a in need.items() if a > 0):
                # CPU nodes come first: a GPU node with room means no other node has.
                return node.name if view.is_gpu_node(node.name) else ""
        return ""


_LATEST: dict[str, _Answers] = {}
"""Under "view", the answers of the latest view asked: every RayCluster's status, and each
look again while a pod waits, reads one scan of the nodes per cache snapshot and pod
shape (a scan of 5,000 nodes is ~25 ms)."""


class GpuRoom:
    """Whether only GPU nodes have room for a waiting CPU-only pod raygate keeps off them,
    in one view: one per admission status derivation. The nodes are scanned once per view
    and pod shape; CPU nodes first, so a pod that has room on one costs no look at the
    GPU nodes."""

    def __init__(self, view: ClusterView, config: PolicyConfig, now: float) -> None:
        self.view, self.config, self.now = view, config, now
        self._written = rule_requirements(config)
        self.read = False
        """Whether the nodes were looked at: the answers may change with them alone."""

    def why(self, pod: PodView) -> str:
        """Why only GPU nodes have room for ``pod`` while raygate's rule keeps it off them,
        or "" (bound or nominated, not kept off, a node it may use has room, or no GPU
        node it would take but for raygate's rule has)."""
        if pod.node_name or pod.nominated_node_name:
            return ""
        rule = kept_off_by(pod, self.view, self.config, self.now)
        if rule is None:
            return ""
        need = pod_requests(pod)
        constraints = (None if pod.constraints is None
                       else pod.constraints.without(self._written))
        key = (tuple(sorted(need.items())), _shape(constraints))
        answers = self._answers()
        node = answers.by_shape.get(key)
        if node is None:
            node = answers.by_shape[key] = answers.only_gpu_node(need, constraints)
        return (f"only GPU nodes have room for it ({node} has; no other node it may use "
                f"has), and raygate's rule {rule.value} keeps it off them") if node else ""

    def _answers(self) -> _Answers:
        self.read = True
        answers = _LATEST.get("view")  # one read: another thread may replace it meanwhile
        if answers is None or answers.view is not self.view:
            answers = _LATEST["view"] = _Answers(self.view)
        return answers
