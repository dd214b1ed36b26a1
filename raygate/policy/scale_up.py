"""The all-or-nothing scale-up: an opted-in RayCluster's surplus workers are released
together, or not yet.

Released one by one as they fit, a scale-up the cluster cannot hold whole becomes a row of
single pending pods: some run, the rest wait, and the Ray autoscaler, which asked for all of
them, times the waiting ones out and recreates them. A RayCluster annotated
``raygate.io/scale-up: all-or-nothing`` has raygate's placement gate hold its surplus
workers (the *batch*: every gated pod that would be released as surplus) and release them
in one pass:

- once the batch is complete: no new worker for ``policy.scaleUpSettleSeconds``;
- and either all of them fit the cluster as it is (``fit_count``), or a node autoscaler
  runs (``policy.nodeAutoscaler``): then at once, so that it sees the whole scale-up in one
  provisioning batch.

The head and the floor are never held: they are the gang, released as ever. GPU workers
carry no gate (raygate's webhook gates CPU-only pods), so they are never held.

The fit is an estimate from raygate's cache (``policy.room``), as kube-scheduler's
NodeResourcesFit, NodeAffinity and TaintToleration would judge it: each schedulable node's
allocatable minus the requests of the pods on it; the pod's node selector and required node
affinity; the node's ``NoSchedule``/``NoExecute`` taints against the pod's tolerations; GPU
nodes left out for a pod raygate keeps off them; and the RayCluster's head and floor pods
that are not bound yet placed first. Other schedulers' rules (pod affinity, topology
spread, volumes, ports) and other pods still pending are not in it.

Under Kueue's elastic slices (``kueue.x-k8s.io/elastic-job``), a pod still behind Kueue's
own scheduling gate (``KUEUE_GATE``) waits for Kueue's quota, not for room: it is neither
in the batch nor placed first. Kueue lifts its gate from every pod of a slice at once when
it admits the slice; the pods then join the batch, judged whole as any scale-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType

from raygate.policy.classify import RoleVerdict, pod_requests
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import NodeAutoscaler, PolicyConfig
from raygate.policy.model import PodView, RayClusterView, Role
from raygate.policy.native import GATE, release_role
from raygate.policy.placement import Placement, decide
from raygate.policy.room import allowed, free_on, schedulable, take

__all__ = [
    "ALL_OR_NOTHING",
    "ANNOTATION",
    "KEEPS_PODS_OFF",
    "KUEUE_GATE",
    "Batch",
    "fit_count",
    "gated_pods",
    "node_autoscaler",
    "release_plan",
    "scale_up_batch",
]

ANNOTATION = "raygate.io/scale-up"
"""On a RayCluster: how its scale-ups are released; ``ALL_OR_NOTHING`` or absent."""
ALL_OR_NOTHING = "all-or-nothing"
KEEPS_PODS_OFF = frozenset({"NoSchedule", "NoExecute"})
"""The taint effects that keep a pod that does not tolerate them off a node."""
KUEUE_GATE = "kueue.x-k8s.io/elastic-job"
"""Kueue's scheduling gate on an elastic RayCluster's pods (its webhook puts it in the head
and worker templates): lifted when the Workload slice that counts the pod is admitted."""
_NO_CLAIMS: Mapping[str, Role] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Batch:
    """One RayCluster's held scale-up."""

    pods: tuple[PodView, ...]
    """The gated pods that would be released as surplus, in release order."""
    fit: int
    """How many of them fit the cluster as it is, placed together in that order."""
    lacking: str
    """What the first pod that does not fit asks for ("" when all fit)."""
    node_autoscaler: str
    """Why raygate counts on a node autoscaler to bring their nodes ("" when it does not)."""

    @property
    def release(self) -> bool:
        """Released whole once complete: all fit, or a node autoscaler sees them all."""
        return bool(self.node_autoscaler) or self.fit == len(self.pods)

    @property
    def since(self) -> float | None:
        """When its first pod was created."""
        return min((p.created for p in self.pods if p.created is not None), default=None)

    @property
    def reason(self) -> str:
        size = len(self.pods)
        whole = f"a scale-up of {size} surplus worker{'s' if size != 1 else ''}"
        if self.node_autoscaler:
            return (f"{whole} released together once complete, so the node autoscaler sees "
                    f"it in one batch ({self.node_autoscaler})")
        if self.release:
            return f"{whole} released together: all fit the cluster as it is"
        return (f"{whole} held together until all fit: {self.fit} of {size} fit the "
                f"cluster as it is; the next asks for {self.lacking}")


def gated_pods(view: ClusterView, namespace: str, cluster: str) -> list[PodView]:
    """The live pods of the RayCluster that raygate's gate holds, in release order."""
    gated = [p for p in view.cluster_pods(namespace, cluster)
             if GATE in p.scheduling_gates and p.deleted is None and not p.terminal]
    gated.sort(key=lambda p: (p.created or 0.0, p.name))
    return gated


def release_plan(gated: Sequence[PodView], view: ClusterView,
                 claimed: Mapping[str, Role] = _NO_CLAIMS) -> list[tuple[PodView, RoleVerdict]]:
    """The role each of ``gated`` (in release order) would be released with, releasing
    them one after the other (``release_role``); ``claimed`` as there."""
    claims = dict(claimed)
    plan = []
    for pod in gated:
        verdict = release_role(pod, view, claims)
        claims[pod.uid] = verdict.role
        plan.append((pod, verdict))
    return plan


def node_autoscaler(view: ClusterView, config: PolicyConfig) -> str:
    """Why raygate counts on a node autoscaler to bring nodes ("" when it does not)."""
    if config.node_autoscaler is NodeAutoscaler.PRESENT:
        return "policy nodeAutoscaler: present"
    if config.node_autoscaler is NodeAutoscaler.AUTO and view.follows_node_claims():
        return "Karpenter's NodeClaims are served"
    return ""


def scale_up_batch(cluster: RayClusterView, view: ClusterView, config: PolicyConfig,
                   now: float, claimed: Mapping[str, Role] = _NO_CLAIMS) -> Batch | None:
    """The RayCluster's held scale-up, if it opted in and has one."""
    if not cluster.all_or_nothing:
        return None
    # Claimed: being released already; behind Kueue's gate: Kueue's quota wait.
    gated = [p for p in gated_pods(view, cluster.namespace, cluster.name)
             if p.uid not in claimed and KUEUE_GATE not in p.scheduling_gates]
    plan = release_plan(gated, view, claimed)
    held = [(pod, verdict) for pod, verdict in plan if verdict.role is Role.SURPLUS]
    if not held:
        return None
    autoscaler = node_autoscaler(view, config)
    if autoscaler:
        return Batch(tuple(pod for pod, _ in held), len(held), "", autoscaler)
    # The head and floor go first: those released and not bound yet, those about to be.
    first = [p for p in view.cluster_pods(cluster.namespace, cluster.name)
             if not p.node_name and not {GATE, KUEUE_GATE} & set(p.scheduling_gates)
             and p.deleted is None and not p.terminal]
    first += [pod for pod, verdict in plan if verdict.role is not Role.SURPLUS]
    fit, lacking = fit_count(
        [(pod, decide(pod, view, config, now, role=verdict).placement
          is Placement.AVOID_GPU) for pod, verdict in held], view, first)
    return Batch(tuple(pod for pod, _ in held), fit, lacking, "")


def fit_count(pods: Sequence[tuple[PodView, bool]], view: ClusterView,
              placed_first: Sequence[PodView] = ()) -> tuple[int, str]:
    """How many of ``pods`` (each with: kept off GPU nodes) fit the nodes together, first
    fit in order, CPU nodes first, once ``placed_first`` took their room (on any node);
    and what the first that does not fit asks for."""
    nodes = schedulable(view)
    free = {n.name: free_on(n, view) for n in nodes}
    for pod in placed_first:
        take(pod_requests(pod), nodes, free, partial(allowed, pod, False, view))
    for fit, (pod, avoid_gpu) in enumerate(pods):
        need = pod_requests(pod)
        if not take(need, nodes, free, partial(allowed, pod, avoid_gpu, view)):
            return fit, _asked(need)
    return len(pods), ""


def _asked(need: Mapping[str, int]) -> str:
    """The requests in words: cpu in cores, memory in GiB, the rest as counted."""
    def amount(resource: str, milli: int) -> str:
        if resource == "memory":
            return f"{milli / 1000 / 2**30:.3g}Gi"
        return f"{milli / 1000:g}"
    return ", ".join(f"{resource} {amount(resource, milli)}"
                     for resource, milli in sorted(need.items())
                     if milli > 0 and resource != "pods")
