"""Victim choice for a preemption: protect the gang floor, prefer overflow workers.

A plain function, as Volcano's gang plugin writes it: the preemptor and the scheduler's
candidates in, the victims raygate agrees to and a record of what it changed out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from raygate.policy.classify import group_floor, group_roles, pod_requests
from raygate.policy.cluster_view import ClusterView
from raygate.policy.model import ANNOTATION_PREEMPTABLE, GroupKey, NodeView, PodView, Role
from raygate.policy.placement import Decision

__all__ = [
    "Candidate",
    "NodeOutcome",
    "VolcanoVote",
    "protection",
    "select_victims",
    "volcano_victims",
]


@dataclass(frozen=True, slots=True)
class Candidate:
    """The scheduler's proposal for one node. ``victims`` holds the pods raygate could
    resolve; ``unknown_uids`` the UIDs its cache has not seen (yet)."""

    node_name: str
    victims: tuple[PodView, ...]
    unknown_uids: tuple[str, ...] = ()
    num_pdb_violations: int = 0


def candidate_of_uids(node_name: str, uids: Sequence[str], num_pdb_violations: int,
                      view: ClusterView) -> Candidate:
    """The scheduler's proposal by UID (``nodeCacheCapable``), resolved against the view.
    A pod the view places on another node is a stale view — the scheduler's own snapshot
    says it is on this one — so it counts as unknown, like a UID the view lacks."""
    known: list[PodView] = []
    unknown: list[str] = []
    for uid in uids:
        pod = view.pod(uid)
        if pod is not None and pod.node_name == node_name:
            known.append(pod)
        else:
            unknown.append(uid)
    return Candidate(node_name, tuple(known), tuple(unknown), num_pdb_violations)


@dataclass(slots=True)
class NodeOutcome:
    node_name: str
    victims: list[str] = field(default_factory=list)
    """UIDs in decreasing priority; empty when the node is dropped."""
    num_pdb_violations: int = 0
    removed: list[tuple[str, str]] = field(default_factory=list)
    """(pod ``ns/name``, why it is protected)."""
    substituted: list[str] = field(default_factory=list)
    """Pods added in place of protected ones, ``ns/name``."""
    dropped: str = ""
    """Why the node was dropped; empty when it is kept."""
    refused: bool = False
    """Dropped because filter refuses the node to the preemptor: evicting there frees
    room the preemptor may not use."""
    all_surplus: bool = False


class _Roles:
    """Floor/surplus roles per group, computed once per call."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view
        self._memo: dict[GroupKey, Mapping[str, Role]] = {}

    def of(self, pod: PodView) -> Role | None:
        """None: not a Ray pod. Unknown RayCluster: FLOOR (the safe side)."""
        if not pod.is_ray:
            return None
        if pod.ray_node_type == "head":
            return Role.HEAD
        if pod.deleted is not None or pod.terminal:
            return Role.SURPLUS  # already leaving: no longer part of the floor
        key = pod.group_key
        roles = self._memo.get(key)
        if roles is None:
            cluster = self._view.raycluster(key.namespace, key.cluster)
            if cluster is None:
                roles = {}
            else:
                pods = self._view.group_pods(key)
                gpu = {p.node_name: bool(self._view.is_gpu_node(p.node_name))
                       for p in pods if p.node_name}
                roles = group_roles(pods, group_floor(cluster, key.group), gpu)
            self._memo[key] = roles
        return roles.get(pod.uid, Role.FLOOR)


def protection(pod: PodView, role: Role | None) -> str:
    """Why ``pod`` must not be a victim, or "" when it may go."""
    opted_out = pod.opted_out_of_preemption
    if opted_out:
        value = (pod.annotations if opted_out == "annotation" else pod.labels)[
            ANNOTATION_PREEMPTABLE]
        return f'{opted_out} {ANNOTATION_PREEMPTABLE}: "{value}"'
    if role is Role.HEAD:
        return "Ray head"
    if role is Role.FLOOR:
        return f"holds the gang floor of group {pod.group_key}"
    return ""


def _importance(pod: PodView) -> tuple[int, float]:
    # kube-scheduler's MoreImportantPod: higher priority first, then the earlier start.
    return (-pod.priority, pod.created or 0.0)


def _fits(need: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(free.get(resource, 0) >= amount for resource, amount in need.items() if amount > 0)


def select_victims(
    preemptor: PodView,
    candidates: Sequence[Candidate],
    view: ClusterView,
    decision: Decision,
) -> list[NodeOutcome]:
    """Decide, per candidate node, which victims raygate agrees to.

    ``decision`` is the preemptor's placement, as filter decides it. A node filter would
    refuse the preemptor is dropped whatever its victims: kube-scheduler's dry run runs
    only its own plugins, so a GPU node full with a GPU pod is a candidate for a CPU-only
    floor worker, and agreeing would evict the GPU pod for room the next cycle's filter
    refuses. A node raygate has never seen is dropped too for such a preemptor (``_refused``).

    Protected pods (floor, head, ``volcano.sh/preemptable: "false"``) are removed. If the
    preemptor then no longer fits on the node — allocatable minus the requests of every
    pod the cache has there, terminating ones included, plus what the remaining victims
    free — other surplus Ray pods of lower priority on the same node are added, lowest
    priority first; failing that, the node is dropped. Finally, when some node's victims
    are all Ray surplus workers, nodes whose victims include anything else are dropped.
    Victim lists come out in decreasing priority, as kube-scheduler's SelectCandidate
    reads ``Pods[0]`` as the most important victim.
    """
    roles = _Roles(view)
    need = pod_requests(preemptor)
    outcomes = [_refused(c, view, decision) or _one_node(preemptor, need, c, view, roles)
                for c in candidates]
    if any(o.all_surplus for o in outcomes if not o.dropped):
        for outcome in outcomes:
            if not outcome.dropped and not outcome.all_surplus:
                outcome.dropped = "another candidate needs only Ray surplus workers as victims"
                outcome.victims = []
    return outcomes


def _refused_node(node_name: str, view: ClusterView, decision: Decision) -> str:
    """Why no pod may be evicted from ``node_name`` for a pod placed by ``decision``, or
    "": filter refuses it the node. A node raygate has not seen yet passes filter (fail
    open: the scheduler knows it), but not here when the pod is kept off GPU nodes: raygate
    cannot tell it is not one, and an eviction cannot be taken back. The pod tries again
    once raygate knows the node."""
    is_gpu = view.is_gpu_node(node_name)
    if is_gpu is None and decision.refuses_gpu_nodes:
        return ("node unknown to raygate, and the preemptor may not use GPU nodes: no "
                "eviction it cannot vouch for")
    refusal = decision.refusal(bool(is_gpu))
    return "" if refusal is None else f"filter refuses this node to the preemptor ({refusal})"


def _refused(candidate: Candidate, view: ClusterView, decision: Decision) -> NodeOutcome | None:
    """The node dropped, when ``_refused_node`` says so; else None."""
    why = _refused_node(candidate.node_name, view, decision)
    if not why:
        return None
    # Counted as refused by filter's rule only for a known GPU node.
    return NodeOutcome(candidate.node_name, dropped=why,
                       refused=bool(view.is_gpu_node(candidate.node_name)))


def _one_node(
    preemptor: PodView, need: Mapping[str, int], candidate: Candidate,
    view: ClusterView, roles: _Roles,
) -> NodeOutcome:
    outcome = NodeOutcome(candidate.node_name, num_pdb_violations=candidate.num_pdb_violations)
    kept: list[PodView] = []
    for pod in candidate.victims:
        why = protection(pod, roles.of(pod))
        if why:
            outcome.removed.append((pod.ref, why))
        else:
            kept.append(pod)
    node = view.node(candidate.node_name)
    if node is None:
        # Fail open: raygate cannot size an unknown node. Pass the scheduler's choice
        # through unless a protected pod had to be taken out, which would leave the
        # preemptor's room unproven.
        if outcome.removed:
            outcome.dropped = "node unknown to raygate and protected victims were removed"
            return outcome
        outcome.victims = [p.uid for p in sorted(kept, key=_importance)]
        outcome.victims.extend(candidate.unknown_uids)
        outcome.all_surplus = _all_surplus(kept, roles) and not candidate.unknown_uids
        return outcome

    if outcome.removed and not _make_room(preemptor, need, node, kept=kept, outcome=outcome,
                                          view=view, roles=roles):
        outcome.dropped = "no room for the preemptor without evicting protected pods"
        outcome.substituted = []
        return outcome

    if not kept and not candidate.unknown_uids:
        outcome.dropped = "every proposed victim is protected"
        return outcome
    kept.sort(key=_importance)
    outcome.victims = [p.uid for p in kept] + list(candidate.unknown_uids)
    outcome.all_surplus = _all_surplus(kept, roles) and not candidate.unknown_uids
    return outcome


def _make_room(preemptor: PodView, need: Mapping[str, int], node: NodeView, *,
               kept: list[PodView], outcome: NodeOutcome, view: ClusterView,
               roles: _Roles) -> bool:
    """Once protected victims are taken out, whether the preemptor fits when the ``kept``
    ones go; if not, other surplus pods of lower priority on the node are added to
    ``kept`` (and to ``outcome.substituted``), lowest priority first, until it does.
    False when even that is not enough."""
    free = dict(node.allocatable)
    on_node = view.pods_on_node(node.name)
    for pod in on_node:
        if not pod.terminal:  # terminating pods still hold their resources
            for resource, amount in pod_requests(pod).items():
                free[resource] = free.get(resource, 0) - amount
    chosen = {p.uid for p in kept}
    # UIDs the cache has not seen are not in ``on_node``: they free nothing we know of.
    for pod in kept:
        for resource, amount in pod_requests(pod).items():
            free[resource] = free.get(resource, 0) + amount
    if _fits(need, free):
        return True
    spare = [
        p for p in on_node
        if p.uid not in chosen and not p.terminal and p.deleted is None
        and p.priority < preemptor.priority and p.uid != preemptor.uid
        and roles.of(p) is Role.SURPLUS and not protection(p, Role.SURPLUS)
    ]
    spare.sort(key=lambda p: (p.priority, -(p.created or 0.0), p.name))
    for pod in spare:
        if _fits(need, free):
            break
        kept.append(pod)
        outcome.substituted.append(pod.ref)
        for resource, amount in pod_requests(pod).items():
            free[resource] = free.get(resource, 0) + amount
    return _fits(need, free)


def _all_surplus(pods: Sequence[PodView], roles: _Roles) -> bool:
    return bool(pods) and all(roles.of(p) is Role.SURPLUS for p in pods)


@dataclass(slots=True)
class VolcanoVote:
    """raygate's answer to Volcano's ``preemptable``/``reclaimable``."""

    vote: int
    """1 permit (with ``keep`` as the victims), 0 abstain."""
    keep: list[int] = field(default_factory=list)
    """Indices of the evictees that may go, in the order to return them."""
    removed: list[tuple[str, str]] = field(default_factory=list)


PERMIT, ABSTAIN = 1, 0  # util.Permit / util.Abstain in Volcano


def volcano_victims(
    evictor: PodView | None, evictees: Sequence[PodView], view: ClusterView,
    decision: Decision | None = None,
) -> VolcanoVote:
    """Which of Volcano's candidate evictees may go.

    Abstains when neither the evictor nor any evictee concerns raygate (no Ray pod, no
    ``volcano.sh/preemptable: "false"``). Otherwise permits the evictees that are not
    protected (floor, head, preemptable=false), surplus workers on GPU nodes first, then
    the rest in Volcano's order. When all are protected the permit carries an empty list,
    which vetoes eviction in raygate's tier — the floor holds.

    ``decision`` is the evictor's placement: an evictee on a node the predicate refuses
    the evictor is removed too. Volcano's preempt and reclaim already run the predicate on
    each candidate node before they ask (``PredicateForPreemptAction``), so with raygate's
    predicate on this only repeats it; with the predicate off, or masked by another
    plugin that fails the node first, it keeps the two verbs from disagreeing.
    """
    roles = _Roles(view)
    concerned = (evictor is not None and evictor.is_ray) or any(
        p.is_ray or p.opted_out_of_preemption for p in evictees)
    if not concerned:
        return VolcanoVote(ABSTAIN, list(range(len(evictees))))
    vote = VolcanoVote(PERMIT)
    gpu_surplus: list[int] = []
    rest: list[int] = []
    for i, pod in enumerate(evictees):
        role = roles.of(pod)
        why = protection(pod, role)
        if not why and decision is not None:
            why = _refused_node(pod.node_name, view, decision)
        if why:
            vote.removed.append((pod.ref, why))
        elif role is Role.SURPLUS and view.is_gpu_node(pod.node_name):
            gpu_surplus.append(i)
        else:
            rest.append(i)
    vote.keep = gpu_surplus + rest
    return vote
