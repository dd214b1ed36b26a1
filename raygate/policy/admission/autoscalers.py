"""Is a node coming for a pending pod? What the node autoscalers wrote about it.

No upstream component answers this across node autoscalers; each says it in an Event on
the pod (core/v1, ``involvedObject`` the Pod), and raygate reads the latest of them:

* **Karpenter** (v1.15, ``pkg/controllers/provisioning/scheduling/events.go``, recorded as
  component ``karpenter``): ``Nominated``, "Pod should schedule on: nodeclaim/<name>" for
  a NodeClaim it launches, "…: nodeclaim/<name>, node/<name>" (or "node/<name>" alone)
  for a node it counts the pod on; ``FailedScheduling``, "Failed to schedule pod, <why>"
  when no NodePool, existing or in-flight node fits it (incompatible requirements, no
  instance type with enough resources, NodePool limits, the pod rejected outright). It
  writes each reason once per pod in a while (2 minutes for ``Nominated``, 5 for
  ``FailedScheduling``), repeating it as long as it holds.
* **Cluster Autoscaler** (``processors/status/eventing_scale_up_processor.go``):
  ``TriggeredScaleUp``, "pod triggered scale-up: [{<group> <current>-><new> (max: <max>)}]";
  ``NotTriggerScaleUp``, "pod didn't trigger scale-up: <reasons>".

kube-scheduler writes ``FailedScheduling`` too (its own component name): only
Karpenter's is read. Staleness: an event older than the pod's last turn to
``PodScheduled=False`` speaks of an earlier wait; one older than ``EVENT_TTL_SECONDS``
(kube-apiserver's default ``--event-ttl``) is expired; a ``Nominated`` NodeClaim that is
gone or being deleted (launch failed, registration timed out, consolidated) brings no
node, when raygate follows NodeClaims.

The stranded case: Karpenter nominated a node (its NodeClaim registered it) that
raygate's own placement refuses this pod. Karpenter counts the pod as placed there, so it
buys nothing else: no node is coming, though Karpenter said one was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.model import PodEventView, PodView
from raygate.policy.placement import decide, thrash_guard_until

__all__ = [
    "EVENT_TTL_SECONDS",
    "NodeOutlook",
    "NodeSignal",
    "node_signal",
    "nominated_targets",
    "signal_inputs",
    "wanted",
]

KARPENTER = "karpenter"
NOMINATED = "Nominated"
FAILED_SCHEDULING = "FailedScheduling"
TRIGGERED_SCALE_UP = "TriggeredScaleUp"
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
NOMINATED_PREFIX = "Pod should schedule on: "
REASONS = frozenset({NOMINATED, FAILED_SCHEDULING, TRIGGERED_SCALE_UP, NOT_TRIGGER_SCALE_UP})

EVENT_TTL_SECONDS = 3600.0
"""kube-apiserver's default ``--event-ttl``: an event not seen again for this long is
deleted, and raygate stops reading it then even if the deletion is late."""


class NodeOutlook(Enum):
    COMING = "coming"
    NONE_COMING = "none-coming"


@dataclass(frozen=True, slots=True)
class NodeSignal:
    outlook: NodeOutlook
    reason: str
    """In words, quoting the autoscaler."""
    until: float
    """When the event expires."""


def wanted(reason: str, component: str, message: str) -> bool:
    """Is this pod event one ``node_signal`` reads? (The rest are not kept.)"""
    if reason == NOMINATED:
        return message.startswith(NOMINATED_PREFIX)
    if reason == FAILED_SCHEDULING:
        return component == KARPENTER
    return reason in REASONS


def nominated_targets(message: str) -> tuple[str, str]:
    """(NodeClaim, node) a ``Nominated`` message names; "" for what it does not name."""
    claim = node = ""
    for part in message.removeprefix(NOMINATED_PREFIX).split(","):
        kind, _, name = part.strip().partition("/")
        if kind == "nodeclaim":
            claim = name
        elif kind == "node":
            node = name
    return claim, node


def node_signal(pod: PodView, view: ClusterView, config: PolicyConfig, now: float,
                unschedulable_since: float | None) -> NodeSignal | None:
    """What the latest node-autoscaler event about ``pod`` says, or None when there is
    none that still holds (see the module docstring)."""
    event = view.pod_event(pod.uid)
    if event is None or event.at is None:
        return None
    until = event.at + EVENT_TTL_SECONDS
    if now >= until or (unschedulable_since is not None and event.at < unschedulable_since):
        return None
    said = f"{event.message!r} ({event.reason}"
    if event.reason == NOMINATED:
        return _nominated(event, pod, view, config, now, until=until)
    if event.reason == FAILED_SCHEDULING:
        return NodeSignal(NodeOutlook.NONE_COMING,
                          f"Karpenter will not launch a node for it: {said})", until)
    if event.reason == TRIGGERED_SCALE_UP:
        return NodeSignal(NodeOutlook.COMING,
                          f"Cluster Autoscaler is adding a node for it: {said})", until)
    return NodeSignal(NodeOutlook.NONE_COMING,
                      f"Cluster Autoscaler will not add a node for it: {said})", until)


def _nominated(event: PodEventView, pod: PodView, view: ClusterView, config: PolicyConfig,
               now: float, *, until: float) -> NodeSignal | None:
    claim_name, node = nominated_targets(event.message)
    if claim_name:
        claim = view.node_claim(claim_name)
        if (claim is None and view.follows_node_claims()) or (claim is not None and claim.deleting):
            return None  # the claim is gone: it brings no node
        node = node or (claim.node_name if claim is not None else "")
    said = f"{event.message!r} ({event.reason})"
    is_gpu = view.is_gpu_node(node) if node else None
    if is_gpu is not None:
        decision = decide(pod, view, config, now)
        refusal = decision.refusal(is_gpu)
        if decision.clock_dependent:
            until = min(until, thrash_guard_until(pod, view, config) or until)
        if refusal is not None:
            return NodeSignal(NodeOutlook.NONE_COMING, (
                f"Karpenter counts it on node {node}, which raygate refuses it ({refusal}), "
                f"so Karpenter launches no other node: {said}"), until)
    where = f"node {node}" if node else f"NodeClaim {claim_name}"
    return NodeSignal(NodeOutlook.COMING, f"Karpenter is bringing {where} for it: {said}",
                      until)


def signal_inputs(pods: Iterable[PodView], view: ClusterView) -> tuple[object, ...]:
    """Everything ``node_signal`` reads for ``pods`` beside the pods themselves and the
    placement's inputs: their events, the NodeClaims those name, the class of the nodes
    they bring (for ``raygate.policy.admission.admission_inputs``)."""
    found: list[object] = []
    for pod in pods:
        event = view.pod_event(pod.uid)
        if event is None:
            continue
        claim_name, node = nominated_targets(event.message) if event.reason == NOMINATED else (
            "", "")
        claim = view.node_claim(claim_name) if claim_name else None
        node = node or (claim.node_name if claim is not None else "")
        found.append((event, claim, view.is_gpu_node(node) if node else None))
    return (view.follows_node_claims(), *found) if found else ()
