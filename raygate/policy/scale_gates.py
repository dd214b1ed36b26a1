"""The scale gates raygate asks KubeRay to carry on a worker group
(``workerGroupSpecs[].scaleStrategy.scaleGate``, kuberay#5094), as its writer
(``raygate.server.controllers.scale_gates``) reads them: per worker group of a RayCluster,
the gate names and their reasons.

The table, ``SCALE_GATE_RULES``, lives in ``raygate.policy.admission.gates``: the
admission status shows each group's gates (which, why, since when), so it is part of that
package and named here for the writer.
"""

from __future__ import annotations

from collections.abc import Mapping

from raygate.policy.admission.gates import (
    CANNOT_FIT,
    NO_NODE_COMING,
    ONLY_GPU_ROOM,
    PREFIX,
    SCALE_GATE_RULES,
    THRASH_GUARD,
    ScaleGateRule,
    group_gates,
)
from raygate.policy.admission.pods import PodStatus
from raygate.policy.admission.status import AdmissionStatus
from raygate.policy.classify import HEAD_GROUP

__all__ = ["CANNOT_FIT", "NO_NODE_COMING", "ONLY_GPU_ROOM", "PREFIX", "SCALE_GATE_RULES",
           "THRASH_GUARD", "ScaleGateRule", "cluster_gates", "group_gates"]


def cluster_gates(status: AdmissionStatus) -> Mapping[str, dict[str, str]]:
    """Per worker group of the RayCluster, the gates it should carry (groups with none
    included, as {}): ``group_gates`` of each."""
    by_group: dict[str, list[PodStatus]] = {}
    for pod in status.pods:
        by_group.setdefault(pod.group, []).append(pod)
    return {g.name: group_gates(g, by_group.get(g.name, ())) for g in status.groups
            if g.name != HEAD_GROUP}
