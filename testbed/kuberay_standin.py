"""Two worker-group fields of later KubeRay releases, added to the testbed's KubeRay 1.6.1
RayCluster CRD as a stand-in (the module proxy serves no KubeRay that has both):

- ``workerGroupSpecs[].priority``: KubeRay 1.7.0's schema, verbatim (ray-project/kuberay
  #4942; ``config/crd/bases/ray.io_rayclusters.yaml`` at tag v1.7.0);
- ``workerGroupSpecs[].scaleStrategy.scaleGate``: the list of gates external controllers
  write (ray-project/kuberay#5094, merged 2026-09 after 1.7), as the last revision of the
  pull request that could be read here has it: a list keyed by ``type`` (the entry's only
  field, ``MinLength=1``, the label-key pattern proposed with it). The merged CRD file itself
  could not be read; the key was ``name`` in earlier revisions. ``GATE_KEY`` names it.

Nothing else changes: ``workerGroupSpecs`` stays an atomic list, as in every KubeRay
release (no ``x-kubernetes-list-type``), and RayJob's and RayService's embedded cluster
specs are left as they are. KubeRay 1.6.1's Go types lack both fields, so its reconcile
neither reads nor writes them; they survive because it never writes a RayCluster's spec,
except the one Update that adds the GCS fault-tolerance finalizer, which drops both
(``e2e/test_scale_gate_field.py`` shows each).

``extend`` is idempotent: the KubeRay add-on calls it each time it starts the operator.
"""

from __future__ import annotations

import json
from typing import Any

from testbed.control_plane import ControlPlane
from testbed.processes import wait_for

__all__ = ["GATE_KEY", "PRIORITY", "SCALE_GATE", "crd_patch", "extend"]

CRD = "rayclusters.ray.io"
GATE_KEY = "type"
"""The merge key of a scale-gate entry (and its only field)."""
PRIORITY: dict[str, Any] = {"default": 0, "format": "int32", "type": "integer"}
# A label key: an optional DNS-subdomain prefix and "/", then a name of letters, digits
# and "-_." that starts and ends alphanumeric.
GATE_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
SCALE_GATE: dict[str, Any] = {
    "items": {"properties": {GATE_KEY: {"minLength": 1, "pattern": GATE_PATTERN,
                                        "type": "string"}},
              "required": [GATE_KEY], "type": "object"},
    "type": "array",
    "x-kubernetes-list-map-keys": [GATE_KEY],
    "x-kubernetes-list-type": "map",
}
GROUP_PATH = "/schema/openAPIV3Schema/properties/spec/properties/workerGroupSpecs/items"


def crd_patch(crd: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch that gives ``crd`` (KubeRay's RayCluster CRD as served) both fields
    in its ``v1`` schema; [] when it has them as above."""
    index, version = next((i, v) for i, v in enumerate(crd["spec"]["versions"])
                          if v["name"] == "v1")
    group = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "workerGroupSpecs"]["items"]["properties"]
    base = f"/spec/versions/{index}{GROUP_PATH}/properties"
    ops = []
    if group.get("priority") != PRIORITY:
        ops.append({"op": "add", "path": f"{base}/priority", "value": PRIORITY})
    if group["scaleStrategy"].get("properties", {}).get("scaleGate") != SCALE_GATE:
        ops.append({"op": "add", "path": f"{base}/scaleStrategy/properties/scaleGate",
                    "value": SCALE_GATE})
    return ops


def _probe() -> dict[str, Any]:
    """The smallest RayCluster that sets both fields."""
    container = {"name": "ray", "image": "rayproject/ray:2.60.0"}
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "kuberay-standin-probe", "namespace": "default"},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": [container]}}},
                 "workerGroupSpecs": [{
                     "groupName": "probe", "minReplicas": 0, "maxReplicas": 1, "priority": 1,
                     "scaleStrategy": {"scaleGate": [{GATE_KEY: "testbed.raygate.dev/probe"}]},
                     "template": {"spec": {"containers": [container]}}}]},
    }


def _kept(testbed: ControlPlane) -> bool:
    """A server-side dry run keeps both fields: the API server prunes by the new schema."""
    created = testbed.api().request(
        "POST", "/apis/ray.io/v1/namespaces/default/rayclusters", _probe(),
        query=[("dryRun", "All"), ("fieldValidation", "Strict")])
    group = created["spec"]["workerGroupSpecs"][0]
    return bool(group.get("priority") == 1 and group.get("scaleStrategy", {}).get("scaleGate"))


def extend(testbed: ControlPlane) -> None:
    """Give the testbed's RayCluster CRD both fields (a JSON Patch of the CRD), and return
    once the API server keeps them."""
    crd = json.loads(testbed.kubectl("get", "crd", CRD, "-o", "json").stdout)
    ops = crd_patch(crd)
    if not ops:
        return
    testbed.kubectl("patch", "crd", CRD, "--type=json", "-p", json.dumps(ops))
    wait_for("the RayCluster CRD's stand-in fields served", lambda: _kept(testbed), 30)
