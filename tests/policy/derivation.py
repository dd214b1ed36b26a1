"""The admission status of one RayCluster of a snapshot built from objects, as the
admission-status tests derive it (``raygate.policy.admission``)."""

from __future__ import annotations

from typing import Any

from raygate.policy.admission import (
    AdmissionStatus,
    Derivation,
    admission_status,
)
from raygate.policy.config import PolicyConfig
from testkit.builders import T0_EPOCH, Obj
from tests.conftest import snapshot_of

CONFIG = PolicyConfig()


def derive(objects: list[Obj], cluster: str, now: float = T0_EPOCH,
           config: PolicyConfig = CONFIG) -> Derivation:
    snap = snapshot_of(*objects, config=config)
    view = snap.raycluster("ray", cluster)
    assert view is not None, cluster
    return admission_status(view, snap, config, now)


def pods_by_name(status: AdmissionStatus) -> dict[str, Any]:
    return {p.name: p for p in status.pods}
