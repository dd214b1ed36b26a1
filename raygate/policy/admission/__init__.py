"""Admission status: why is each Ray pod not running, and should anyone act?

For one RayCluster, ``admission_status`` derives from the cluster view (its pods, its
PodGroup or Kueue Workload, the scheduler's preemption records), the policy settings and
``now``:

* the **gang**: which object gates admission, its phase as that object reports it,
  whether it is admitted, its ``minMember`` and how many of the cluster's pods run;
* each **group** (head and worker groups): floor, desired, scheduled, running, pending,
  preempted within the thrash-guard window, whether scaling it up makes sense, and its
  scale gates (those raygate wants, those on the RayCluster: ``gates``);
* each **pod not running**: exactly one ``PodState``, the reason in words, since when,
  and what a control loop should do about it.

The pod state is decided by ``POD_RULES``, a table read top to bottom: the first rule
that applies wins. The order is the design: a DisruptionTarget or the scheduler's own
verdict first, then the gang, and ``Stuck`` only when nothing explains the wait. A pod
of a gang that is not admitted is ``WaitingForGangAdmission`` however long it waits:
Volcano and Kueue hold whole gangs for hours by design, and recreating a member changes
nothing. The advice per state is the table ``POD_ADVICE``; scale-up advice per group is
``SCALE_UP_RULES``.

Everything here is a pure function of its arguments: no clock (``now`` is passed in), no
I/O. The result carries ``next_change``, the earliest ``now`` at which the same inputs
give a different status (a ``Starting`` pod turning ``Stuck``, a preemption leaving the
window), so a caller can memoise it until then.

The package, by topic: ``states`` (the closed sets the API speaks), ``verdicts`` (what the
scheduler said), ``autoscalers`` (what the node autoscalers said: is a node coming?),
``gang`` (PodGroup or Workload), ``pods`` (one pod's state and advice), ``groups`` (counts
and scale-up advice), ``gates`` (scale gates), ``status`` (the whole status).
"""

from raygate.policy.admission.gang import GangSource, GangStatus
from raygate.policy.admission.groups import SCALE_UP_RULES, GroupStatus
from raygate.policy.admission.pods import (
    POD_ADVICE,
    POD_RULES,
    PodFacts,
    PodRule,
    PodStatus,
    derive_pod,
    no_node_coming,
)
from raygate.policy.admission.states import (
    PENDING_STATES,
    Advice,
    PodAction,
    PodState,
    ScaleGate,
    ScaleUp,
    is_running,
    whole_seconds,
)
from raygate.policy.admission.status import (
    AdmissionStatus,
    Derivation,
    admission_inputs,
    admission_status,
    admission_statuses,
)
from raygate.policy.admission.verdicts import SchedulerVerdict, classify_verdict

__all__ = [
    "PENDING_STATES",
    "POD_ADVICE",
    "POD_RULES",
    "SCALE_UP_RULES",
    "AdmissionStatus",
    "Advice",
    "Derivation",
    "GangSource",
    "GangStatus",
    "GroupStatus",
    "PodAction",
    "PodFacts",
    "PodRule",
    "PodState",
    "PodStatus",
    "ScaleGate",
    "ScaleUp",
    "SchedulerVerdict",
    "admission_inputs",
    "admission_status",
    "admission_statuses",
    "classify_verdict",
    "derive_pod",
    "is_running",
    "no_node_coming",
    "whole_seconds",
]
