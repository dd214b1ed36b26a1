"""The scale gates raygate asks KubeRay to carry on a worker group
(``workerGroupSpecs[].scaleStrategy.scaleGate``, kuberay#5094), as its writer
(``raygate.server.controllers.scale_gates``) reads them: per worker group of a RayCluster,
the gate names and their reasons.

The rule, ``SCALE_GATE_RULES``, lives in ``raygate.policy.admission.gates``: the admission
status decides each group's gates (which, why, since when) once, and the writer reads them
off that status.
"""

from __future__ import annotations

from collections.abc import Mapping

from raygate.policy.admission.status import AdmissionStatus
from raygate.policy.classify import HEAD_GROUP

__all__ = ["cluster_gates"]


def cluster_gates(status: AdmissionStatus) -> Mapping[str, dict[str, str]]:
    """Per worker group of the RayCluster, the gates raygate wants it to carry, each with
    its reason (groups with none included, as {}): read off the status's ``scale_gates``."""
    return {g.name: {gate.name: gate.reason for gate in g.scale_gates if gate.wanted}
            for g in status.groups if g.name != HEAD_GROUP}
