"""Karpenter on the testbed: its kwok cloud provider (``sigs.k8s.io/karpenter/kwok``, one
binary: Karpenter's core controllers over a provider that "launches" an instance by
creating its Node object), beside a running testbed, as a cluster's node autoscaler.

``start_karpenter`` starts the add-on ``Karpenter`` on demand (the Karpenter scenarios do);
it stops with the testbed, or before with ``Karpenter.stop()``. What it sets up:

- Karpenter's five CRDs from the module it was built from (NodePool, NodeClaim,
  NodeOverlay, CapacityBuffer, KWOKNodeClass);
- one ``KWOKNodeClass`` (``testbed``) that every NodePool refers to. Its CRD defaults
  ``status`` to ``Ready=True``, which the API server fills in when it reads an object
  stored without one; nothing else writes it (no controller in the kwok provider does),
  and a NodePool whose class is not Ready is skipped, so the start checks it;
- the instance-type file of ``INSTANCE_TYPES`` (CPU-only and GPU types, ``nvidia.com/gpu``
  in their resources), read by the provider at start instead of its 144 built-in types;
- the controller itself, out of cluster under the admin's kubeconfig (``KUBECONFIG``:
  Karpenter has no ``--kubeconfig`` flag), leader election off, short batching windows.

No webhook runs (the kwok provider has none) and no NodePool exists: a scenario creates
its own (``node_pool``), labelled so that only its pods can use them. The testbed's kwok
(``--manage-all-nodes``) keeps the nodes Karpenter creates Ready and runs their pods.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.addon import AddOn, answers
from testbed.api import KubeApi
from testbed.build import COMPONENTS
from testbed.cluster import Testbed
from testbed.common import TestbedError, binary
from testbed.control_plane import ControlPlane
from testbed.processes import free_port, wait_for

__all__ = ["GPU_LABELS", "GPU_TAINT", "INSTANCE_TYPES", "NODECLAIMS", "NODEPOOLS", "NODE_CLASS",
           "POOL_LABEL", "InstanceType", "Karpenter", "node_pool", "start_karpenter",
           "wrote_on_pod"]

NODE_CLASS = "testbed"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
POOL_LABEL = "karpenter.sh/nodepool"
CRDS = ("crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh",
        "crd/kwoknodeclasses.karpenter.kwok.sh")
# What a GPU node carries in a cluster, written on a GPU NodePool's template: the taint a
# GPU operator's pools set, and GPU feature discovery's label (raygate's native rule and
# the seed's recipe select on it).
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_LABELS = {"nvidia.com/gpu.present": "true"}
ZONE = "test-zone-a"


@dataclass(frozen=True)
class InstanceType:
    """One entry of the provider's instance-type file."""

    name: str
    cpu: int
    memory: str
    price: float
    """Dollars an hour; Karpenter launches the cheapest type that fits, within a pool."""
    gpus: int = 0

    def options(self) -> dict[str, Any]:
        """The entry as the provider decodes it (``InstanceTypeOptions`` of
        ``kwok/cloudprovider/helpers.go``; the shape of the provider's own
        ``instance_types.json``, not of ``kwok/examples``, which is stale). Offerings need
        their requirements: the zone and capacity type a node gets come from them."""
        resources = {"cpu": str(self.cpu), "memory": self.memory, "pods": "110"}
        if self.gpus:
            resources["nvidia.com/gpu"] = str(self.gpus)
        return {"name": self.name, "architecture": "amd64", "operatingSystems": ["linux"],
                "resources": resources,
                "offerings": [{"Price": self.price, "Available": True, "Requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In",
                     "values": ["on-demand"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In",
                     "values": [ZONE]}]}]}


INSTANCE_TYPES = (
    InstanceType("cpu-4x", cpu=4, memory="16Gi", price=0.2),
    InstanceType("cpu-8x", cpu=8, memory="32Gi", price=0.4),
    InstanceType("gpu-8x", cpu=8, memory="64Gi", price=3.0, gpus=1),
    InstanceType("gpu-32x", cpu=32, memory="256Gi", price=12.0, gpus=4),
)


def node_pool(name: str, labels: dict[str, str], instance_types: list[str], *,
              gpu: bool = False, weight: int = 10, consolidate_after: str = "30s",
              cpu_limit: int = 64) -> dict[str, Any]:
    """A NodePool (karpenter.sh/v1) of ``instance_types``. Its nodes carry ``labels``: a
    scenario's pods select its own label, so Karpenter matches them to that scenario's
    pools only. A GPU pool adds the GPU taint and labels. ``weight`` is explicit because
    Karpenter tries pools by weight, then by name descending: of two pools of equal weight,
    ``gpu-…`` comes before ``cpu-…``."""
    template_labels = {**labels, **(GPU_LABELS if gpu else {})}
    return {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "weight": weight,
            "limits": {"cpu": str(cpu_limit)},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "consolidateAfter": consolidate_after},
            "template": {
                "metadata": {"labels": template_labels},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                     "name": NODE_CLASS},
                    "requirements": [{"key": "node.kubernetes.io/instance-type",
                                      "operator": "In", "values": instance_types}],
                    **({"taints": [GPU_TAINT]} if gpu else {}),
                },
            },
        },
    }


def wrote_on_pod(event: dict[str, Any]) -> bool:
    """An Event Karpenter wrote about a pod (``Nominated``: "Pod should schedule on: …",
    ``FailedScheduling``: why no pool fits). Karpenter records through the core/v1 Event
    API, as component ``karpenter``."""
    source = ((event.get("source") or {}).get("component")
              or event.get("reportingComponent") or "")
    return source == "karpenter" and event["involvedObject"].get("kind") == "Pod"


def _node_class_ready(api: KubeApi) -> bool:
    node_class = api.get(f"{NODECLASSES}/{NODE_CLASS}")
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in node_class.get("status", {}).get("conditions") or [])


def _install(testbed: ControlPlane) -> None:
    """Karpenter's CRDs and the ``KWOKNodeClass`` every NodePool refers to, checked
    Ready."""
    for folder in ("crds", "nodeclass-crds"):
        crds = COMPONENTS["karpenter"].path(folder)
        if not crds.is_dir():
            raise TestbedError(f"{crds} is missing: build the testbed first (`make testbed`)")
        # Server-side: the NodePool and NodeClaim CRDs are too large for client-side
        # apply's last-applied annotation.
        testbed.kubectl("apply", "--server-side", "-f", str(crds))
    wait_for("Karpenter's CRDs established", lambda: testbed.kubectl(
        "wait", "--for=condition=Established", "--timeout=10s", *CRDS,
        check=False).returncode == 0, 60)
    testbed.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": {"name": NODE_CLASS}, "spec": {}}))
    if not _node_class_ready(testbed.api()):
        raise TestbedError(f"KWOKNodeClass {NODE_CLASS} is not Ready: its CRD's status "
                           "default did not apply, and no NodePool would be used")


class Karpenter(AddOn):
    """The running controller and what scenarios read from it."""

    name = "karpenter"
    timeout = 90.0
    readiness = "karpenter /readyz"

    def __init__(self) -> None:
        super().__init__()
        self.health_port = free_port()

    def launch(self, testbed: ControlPlane) -> None:
        _install(testbed)
        types = testbed.workdir / "karpenter-instance-types.json"
        types.write_text(json.dumps([t.options() for t in INSTANCE_TYPES], indent=1))
        self.run(self.name, [
            binary("karpenter", "karpenter"), "--disable-leader-election",
            f"--metrics-port={free_port()}", f"--health-probe-port={self.health_port}",
            f"--instance-types-file-path={types}",
            # Karpenter waits for a quiet second (up to 10 s) before it provisions for the
            # pods that became pending; shorter windows make scenarios shorter, not
            # different.
            "--batch-idle-duration=1s", "--batch-max-duration=3s",
        ], env={"KUBECONFIG": str(testbed.admin_kubeconfig)})

    def ready(self) -> bool:
        return answers(f"http://127.0.0.1:{self.health_port}/readyz")

    def api(self) -> KubeApi:
        return self.testbed.api()

    def node_claims(self, selector: str = "") -> list[dict[str, Any]]:
        return self.api().items(NODECLAIMS, labelSelector=selector)

    def pool_ready(self, name: str) -> bool:
        pool = self.api().get(f"{NODEPOOLS}/{name}")
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in pool.get("status", {}).get("conditions") or [])

    def create_pools(self, pools: list[dict[str, Any]]) -> None:
        """Create NodePools and wait until Karpenter says each is Ready (it skips a pool
        that is not: "ignoring nodepool, not ready")."""
        for pool in pools:
            self.api().create(NODEPOOLS, pool)
        for pool in pools:
            name = pool["metadata"]["name"]
            wait_for(f"NodePool {name} Ready", functools.partial(self.pool_ready, name), 60,
                     self.process)

    def delete_pools(self, selector: str) -> None:
        """Delete a scenario's NodePools. Karpenter drains and deletes their nodes in the
        background (``wait_claims_gone``): the next scenario's pools and pods carry a label
        of their own, so it need not wait."""
        for pool in self.api().items(NODEPOOLS, labelSelector=selector):
            self.api().request("DELETE", f"{NODEPOOLS}/{pool['metadata']['name']}")

    def wait_claims_gone(self, selector: str = "", timeout: float = 120.0) -> None:
        """Wait until Karpenter has deleted the NodeClaims ``selector`` picks (all: "")."""
        wait_for(f"the NodeClaims of {selector or 'every NodePool'} gone",
                 lambda: not self.node_claims(selector), timeout, self.process)

    def stop(self) -> None:
        """Stop the controller (its CRDs and objects stay): it acts on every unschedulable
        pod of the cluster, so scenarios that do not expect it should not run beside it."""
        super().stop()


def start_karpenter(testbed: Testbed) -> Karpenter:
    """Start Karpenter on ``testbed``; returns once it is ready and its node class is."""
    return testbed.add(Karpenter())
