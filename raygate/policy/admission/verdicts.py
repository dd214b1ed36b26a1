"""What the scheduler said of a pending pod: its ``PodScheduled=False`` condition read
as a verdict (capacity, constraints, the gang, gates)."""

from __future__ import annotations

import re
from enum import Enum

from raygate.policy.model import Condition


class SchedulerVerdict(Enum):
    """The scheduler's ``PodScheduled=False`` condition, read for admission."""

    NONE = "none"  # no PodScheduled=False condition, or SchedulerError: no verdict
    CAPACITY = "capacity"  # no room; more capacity would place the pod
    CONSTRAINTS = "constraints"  # no node the pod may use, whatever the capacity
    GANG = "gang"  # Volcano: placed or placeable, waiting for the rest of the gang
    GATED = "gated"  # scheduling gates hold it (Kueue's quota gate, ...); not yet judged
    OTHER = "other"  # Unschedulable for a reason raygate does not recognise


# Substrings of PodScheduled messages, in priority order.
# kube-scheduler writes "0/N nodes are available: <count> <reason>, ...", Volcano "0/N
# nodes are unavailable: ..." with the same per-plugin reasons. A message that names any
# insufficient resource is CAPACITY even when other nodes failed for other reasons: more
# capacity of the right kind would place the pod.
MESSAGE_MARKERS: tuple[tuple[str, SchedulerVerdict], ...] = (
    ("Insufficient ", SchedulerVerdict.CAPACITY),  # NodeResourcesFit, and Volcano's own
    ("Too many pods", SchedulerVerdict.CAPACITY),  # NodeResourcesFit: the node's pod count
    ("didn't have free ports", SchedulerVerdict.CAPACITY),  # NodePorts: another node would do
    # Volcano, pipelined: room is being made by an eviction (reason Unschedulable).
    ("once resource is released", SchedulerVerdict.CAPACITY),
    ("NotEnoughResources", SchedulerVerdict.CAPACITY),  # Volcano gang condition text, quoted
    # DynamicResources: no node has free devices for the pod's claims (DRA GPUs taken).
    ("cannot allocate all claims", SchedulerVerdict.CAPACITY),
    # ... its claim is allocated on another node, or asks for a class that does not exist.
    ("resourceclaim not available on the node", SchedulerVerdict.CONSTRAINTS),
    ("does not exist", SchedulerVerdict.CONSTRAINTS),
    ("didn't match Pod's node affinity/selector", SchedulerVerdict.CONSTRAINTS),
    # TaintToleration: "had untolerated taint {k: v}" (1.25+) and "had untolerated
    # taint(s)" (kubernetes#134740, 1.34+) share this prefix ...
    ("had untolerated taint", SchedulerVerdict.CONSTRAINTS),
    # ... and <= 1.24 said "node(s) had taint {k: v}, that the pod didn't tolerate".
    ("that the pod didn't tolerate", SchedulerVerdict.CONSTRAINTS),
    ("didn't match pod affinity rules", SchedulerVerdict.CONSTRAINTS),
    ("didn't match pod anti-affinity rules", SchedulerVerdict.CONSTRAINTS),
    ("didn't satisfy existing pods anti-affinity rules", SchedulerVerdict.CONSTRAINTS),
    ("didn't match pod topology spread constraints", SchedulerVerdict.CONSTRAINTS),
    ("had volume node affinity conflict", SchedulerVerdict.CONSTRAINTS),
    ("didn't match the requested node name", SchedulerVerdict.CONSTRAINTS),
    # Volcano's gang texts: "pod group is not ready, 3 Pending, 3 minAvailable", "2/3 tasks
    # in gang unschedulable: ...", "... once minAvailable is satisfied".
    ("minAvailable", SchedulerVerdict.GANG),
    # kube-scheduler's own gangs (1.37 GenericWorkload): a member that fit gets its group's
    # "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining".
    ("minCount (", SchedulerVerdict.GANG),
    ("pod group is not ready", SchedulerVerdict.GANG),
    ("tasks in gang unschedulable", SchedulerVerdict.GANG),
)

# Volcano's allocate skips a pod whose task role (for KubeRay, its worker group) already
# failed the predicates in this session: "Task ns/x with role spec overflow has already
# predicated failed, skip". It judged the sibling, not this pod: the verdict is the
# sibling's (``admission_status`` lends it), and no verdict at all without one.
SKIPPED_FOR_SIBLING = "has already predicated failed, skip"

# "Insufficient nvidia.com/gpu" (a resource name may hold dots, never end with one).
INSUFFICIENT = re.compile(r"Insufficient [\w./-]*\w|Too many pods")


def classify_verdict(scheduled: Condition | None) -> SchedulerVerdict:
    """Read a pod's ``PodScheduled`` condition (core/v1 reasons)."""
    if scheduled is None or scheduled.status != "False":
        return SchedulerVerdict.NONE
    if scheduled.reason == "SchedulingGated":
        return SchedulerVerdict.GATED
    if scheduled.reason == "Schedulable":
        # Volcano: "Pod ns/x can possibly be assigned to <node>, once minAvailable is
        # satisfied" — allocated, waiting for the rest of the gang.
        return SchedulerVerdict.GANG
    if scheduled.reason != "Unschedulable":
        return SchedulerVerdict.NONE  # SchedulerError or unknown: the scheduler has not said no
    if SKIPPED_FOR_SIBLING in scheduled.message:
        return SchedulerVerdict.NONE
    for marker, verdict in MESSAGE_MARKERS:
        if marker in scheduled.message:
            return verdict
    return SchedulerVerdict.OTHER
