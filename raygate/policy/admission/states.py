"""The states, actions and advice words of the admission status (the closed sets
its API speaks: their one definition, which the proto enums and openapi.json are tested
against), and how its times are told."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from raygate.policy.model import (
    Condition,
    PodView,
)


# StrEnums: the API's structs are filled from the policy's results by field name
# (raygate.contract.messages), and a str enum is its string there.
class PodState(StrEnum):
    """Why a pod is not running: a closed set, one per pod."""

    STARTING = "Starting"
    """Bound to a node and its containers are not ready yet; or just created and not
    judged by the scheduler yet."""
    WAITING_FOR_GANG_ADMISSION = "WaitingForGangAdmission"
    """Unbound while its gang (PodGroup, Kueue Workload, scheduling gate) is not admitted."""
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    """The scheduler found no room: more capacity (or the preemption under way) places it."""
    UNSCHEDULABLE = "Unschedulable"
    """The scheduler said no for reasons capacity cannot fix (affinity, selector, taints)."""
    PREEMPTED = "Preempted"
    """The scheduler is removing it for a higher-priority pod (DisruptionTarget,
    PreemptionByScheduler)."""
    EVICTED = "Evicted"
    """Removed by anything else that marks a DisruptionTarget: the Eviction API, the taint
    manager, the kubelet, PodGC."""
    STUCK = "Stuck"
    """Nothing explains the wait, and it has lasted longer than the configured limit."""
    NODE_PROVISIONING = "NodeProvisioning"
    """The scheduler found no node for it, and a node autoscaler is bringing one for it
    (Karpenter nominated a NodeClaim it launches, Cluster Autoscaler triggered a
    scale-up)."""
    NO_NODE_COMING = "NoNodeComing"
    """The scheduler found no node for it, and the node autoscaler said it will bring
    none (Karpenter: no NodePool fits; Cluster Autoscaler: no scale-up), or counts it on a
    node raygate refuses it (stranded)."""


class PodAction(StrEnum):
    KEEP = "keep"
    """Leave the pod alone: the scheduler (or the kubelet) has it in hand, and deleting
    and recreating it changes nothing."""
    REPLACE = "replace"
    """The pod will not run as it is: count it as lost; a fresh pod may do better."""


class ScaleUp(StrEnum):
    PROCEED = "proceed"
    HOLD = "hold"


GATE_RAYGATE = "raygate"
"""A scale gate's writer: raygate (a name under ``raygate.io/``), or ``GATE_OTHER``."""
GATE_OTHER = "other"


@dataclass(frozen=True, slots=True)
class ScaleGate:
    """A worker group's scale gate (KubeRay's ``scaleStrategy.scaleGate``): one raygate's
    policy wants, one on the RayCluster, or both (``raygate.policy.admission.gates``)."""

    name: str
    writer: str
    """``raygate`` (a name under ``raygate.io/``) or ``other``."""
    reason: str
    since: int | None
    """When its reason began (the earliest ``since`` of the pods behind it); None when
    unknown, and for another writer's gate."""
    wanted: bool
    """raygate's policy wants it now (never for another writer's)."""
    present: bool
    """On the RayCluster, as raygate's cache last saw it."""


A = TypeVar("A", PodAction, ScaleUp)


@dataclass(frozen=True, slots=True)
class Advice(Generic[A]):
    """What to do (about a pod, or a group's scale-up), and why in words."""

    action: A
    reason: str


def whole_seconds(epoch: float | None) -> int | None:
    """A time as the API tells it: whole seconds since the epoch (as Kubernetes writes
    times; an autoscaler's event may carry a fraction)."""
    return None if epoch is None else math.floor(epoch)


# States of a pod that is still a live member of its group, waiting to run (the group's
# ``pending`` count); Preempted and Evicted pods are on their way out.
PENDING_STATES = frozenset({
    PodState.STARTING, PodState.WAITING_FOR_GANG_ADMISSION, PodState.WAITING_FOR_CAPACITY,
    PodState.NODE_PROVISIONING, PodState.NO_NODE_COMING, PodState.UNSCHEDULABLE,
    PodState.STUCK,
})

def true_condition(pod: PodView, type_: str) -> Condition | None:
    cond = pod.condition(type_)
    return cond if cond is not None and cond.status == "True" else None


def is_running(pod: PodView) -> bool:
    """Bound, phase Running, ready (or no Ready condition reported), not going away."""
    if not pod.node_name or pod.phase != "Running" or pod.deleted is not None:
        return False
    if true_condition(pod, "DisruptionTarget") is not None:
        return False
    ready = pod.condition("Ready")
    return ready is None or ready.status == "True"
