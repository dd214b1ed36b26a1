"""`raygate check` and GPUs handed out through Dynamic Resource Allocation: a worker group
(or the head) is a GPU group by a resource claim for a GPU DeviceClass or by an extended
resource a GPU DeviceClass backs; live, RG009 counts the nodes DRA gives GPUs to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.devices import gpu_devices
from raygate.policy.lint.model import ClusterFacts
from raygate.policy.lint.rules import lint
from raygate.server.cache.devices import (
    claim_template_view,
    device_class_view,
    resource_claim_view,
)
from raygate.server.check.run import check_files, live_inputs
from raygate.server.kube.client import load_connection
from raygate.server.wire import dra
from testkit.builders import (
    Obj,
    make_claim_template,
    make_device_class,
    make_node,
    make_raycluster,
    make_resource_claim,
    make_resource_slice,
)
from tests.check.manifests import GROUPS, HEAD, TOLERATE_GPU, good, with_

GPU_CLASS = make_device_class("gpu.nvidia.com", "gpu.nvidia.com",
                              extended_resource="example.com/gpu")
NIC_CLASS = make_device_class("nic.example.com", "sriov.example.com")
BY_TEMPLATE = [{"name": "gpu", "resourceClaimTemplateName": "a100"}]
BY_CLAIM = [{"name": "gpu", "resourceClaimName": "shared"}]
Wire = TypeVar("Wire", bound=msgspec.Struct)
FLOOR = f"{GROUPS}.0.template.spec"  # group "base" of good(): 2 floor pods
AT_FLOOR = f"{GROUPS}[0].template.spec"  # the same, as a finding's path says it


def facts(*objects: Obj, gpu_nodes: int = 8) -> ClusterFacts:
    """What ``live_inputs`` makes of these DRA objects (through the same converters)."""
    config = PolicyConfig()

    def of(kind: str, wire: type[Wire]) -> list[Wire]:
        return [msgspec.convert(o, wire) for o in objects if o["kind"] == kind]

    classes = [device_class_view(c) for c in of("DeviceClass", dra.DeviceClass)]
    claims = [resource_claim_view(c) for c in of("ResourceClaim", dra.ResourceClaim)]
    templates = [claim_template_view(t)
                 for t in of("ResourceClaimTemplate", dra.ResourceClaimTemplate)]
    return ClusterFacts(gpu_nodes, False, False, gpu_devices(classes, config),
                        {(c.namespace, c.name): c for c in claims},
                        {(t.namespace, t.name): t for t in templates})


def floor_with(leaf: str, value: object) -> Obj:
    """``good()``'s floor group tolerating GPU taints (RG008 when CPU-only), with ``leaf``."""
    return with_(with_(good(), f"{FLOOR}.tolerations", TOLERATE_GPU), f"{FLOOR}.{leaf}", value)


def selecting_gpu_nodes() -> Obj:
    return with_(with_(good(), f"{FLOOR}.resourceClaims", BY_TEMPLATE),
                 f"{FLOOR}.nodeSelector", {"nvidia.com/gpu.present": "true"})


def gpu_request(resource: str) -> list[Obj]:
    requests = {"cpu": "1", resource: "1"}
    return [{"name": "ray-worker", "image": "rayproject/ray:2.60.0",
             "resources": {"requests": requests, "limits": requests}}]


RG008 = [("RG008", f"{AT_FLOOR}.tolerations")]
# (case, manifest, live facts or None offline, findings as (id, path))
CASES: list[tuple[str, Obj, ClusterFacts | None, list[tuple[str, str]]]] = [
    ("a claim template asking for a GPU DeviceClass makes a GPU group",
     floor_with("resourceClaims", BY_TEMPLATE),
     facts(GPU_CLASS, make_claim_template("a100", "gpu.nvidia.com")), []),
    ("a ResourceClaim asking for a GPU DeviceClass makes a GPU group",
     floor_with("resourceClaims", BY_CLAIM),
     facts(GPU_CLASS, make_resource_claim("shared", "gpu.nvidia.com")), []),
    ("a claim for a device class that is no GPU leaves the group CPU-only: RG008",
     floor_with("resourceClaims", BY_TEMPLATE),
     facts(GPU_CLASS, NIC_CLASS, make_claim_template("a100", "nic.example.com")), RG008),
    ("a claim is looked up in the cluster's namespace, not another's",
     floor_with("resourceClaims", BY_TEMPLATE),
     facts(GPU_CLASS, NIC_CLASS, make_claim_template("a100", "nic.example.com"),
           make_claim_template("a100", "gpu.nvidia.com", namespace="other")), RG008),
    ("a claim whose object is not known counts as a GPU (never flag a GPU group)",
     floor_with("resourceClaims", BY_TEMPLATE), facts(GPU_CLASS), []),
    ("an extended resource a GPU DeviceClass backs makes a GPU group",
     floor_with("containers", gpu_request("example.com/gpu")), facts(GPU_CLASS), []),
    ("a GPU DeviceClass's implicit extended resource makes a GPU group",
     floor_with("containers", gpu_request("deviceclass.resource.kubernetes.io/gpu.nvidia.com")),
     facts(GPU_CLASS), []),
    ("an extended resource no GPU DeviceClass backs is no GPU: RG008",
     floor_with("containers", gpu_request("example.com/gpu")), facts(NIC_CLASS), RG008),
    ("a head whose claim asks for a GPU is a GPU head",
     with_(with_(good(), f"{HEAD}.tolerations", TOLERATE_GPU), f"{HEAD}.resourceClaims",
           BY_CLAIM), facts(GPU_CLASS, make_resource_claim("shared", "gpu.nvidia.com")), []),
    ("RG013 for a floor group whose claim is for no GPU, selecting GPU nodes only",
     selecting_gpu_nodes(), facts(NIC_CLASS, make_claim_template("a100", "nic.example.com")),
     [("RG013", f"{AT_FLOOR}.nodeSelector")]),
    ("no RG013 when that claim is for a GPU: a GPU group may select GPU nodes",
     selecting_gpu_nodes(), facts(GPU_CLASS, make_claim_template("a100", "gpu.nvidia.com")),
     []),
    ("offline a claim counts as a GPU: no RG008",
     floor_with("resourceClaims", BY_TEMPLATE), None, []),
    ("offline a claim by name counts as a GPU too",
     floor_with("resourceClaims", BY_CLAIM), None, []),
    ("offline a CPU-only floor group tolerating GPU taints is still RG008",
     floor_with("resourceClaims", []), None, RG008),
    ("offline an extended resource is no GPU (no DeviceClass is known)",
     floor_with("containers", gpu_request("example.com/gpu")), None, RG008),
]


@pytest.mark.parametrize(("obj", "live", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_gpu_groups_by_dra(obj: Obj, live: ClusterFacts | None,
                           expected: list[tuple[str, str]], tmp_path: Path) -> None:
    path = tmp_path / "rc.json"
    path.write_text(json.dumps(obj))
    report = check_files([str(path)], PolicyConfig())
    assert not [f for f in report.findings if f.finding.id >= "RG100"]  # the CRD takes it
    (cluster,) = report.clusters
    if live is None:
        found = [(f.finding.id, f.finding.path) for f in report.findings]
    else:
        found = [(f.id, f.path) for f in lint([cluster], live, PolicyConfig())]
    assert found == expected


def claim_group(replicas: int) -> Obj:
    cluster = make_raycluster("train").autoscaling().group(
        "gpu", replicas=replicas, min=replicas, max=replicas).obj()
    return with_(cluster, f"{FLOOR}.resourceClaims", BY_TEMPLATE)


def test_rg009_counts_a_claim_group_against_the_gpu_nodes(tmp_path: Path) -> None:
    path = tmp_path / "rc.json"
    path.write_text(json.dumps(claim_group(4)))
    clusters = check_files([str(path)], PolicyConfig()).clusters
    gpu = (GPU_CLASS, make_claim_template("a100", "gpu.nvidia.com"))
    assert [(f.id, f.path) for f in lint(clusters, facts(*gpu, gpu_nodes=2), PolicyConfig())
            ] == [("RG009", f"{GROUPS}[0].minReplicas")]
    assert lint(clusters, facts(*gpu, gpu_nodes=4), PolicyConfig()) == []
    nic = facts(NIC_CLASS, make_claim_template("a100", "nic.example.com"), gpu_nodes=2)
    assert lint(clusters, nic, PolicyConfig()) == []  # a CPU group: no GPU node to count


def test_live_inputs_read_the_dra_objects(tmp_path: Path) -> None:
    """Through the API server double: GPU nodes by their ResourceSlices (a GPU driver's,
    with devices) beside those by allocatable, the GPU devices, and the claims and
    templates of the namespace checked; a cluster without resource.k8s.io/v1 has none."""
    from testkit.apiserver import CRDS, DRA, ApiServerDouble

    double = ApiServerDouble().start()
    try:
        double.install(CRDS[0])
        double.create(claim_group(4))
        for node in (make_node("plugin").gpus(8), make_node("dra-0"), make_node("dra-1"),
                     make_node("nic-0"), make_node("empty-0")):
            double.create(node.obj())
        connection = load_connection(str(double.kubeconfig(tmp_path / "kubeconfig")), None)
        clusters, before, _ = live_inputs(connection, "ray", PolicyConfig())
        assert before.gpu_nodes == 1 and not before.gpu_devices.classes
        assert [(f.id, f.message.split(": ")[0]) for f in lint(clusters, before, PolicyConfig())
                ] == [("RG009", "GPU worker group 'gpu' needs 4 floor pods but raygate sees "
                                "1 GPU nodes")]  # the claim is not known: it counts as a GPU

        for collection in DRA:  # the cluster now serves resource.k8s.io/v1
            double.install(collection)
        for obj in (GPU_CLASS, NIC_CLASS,
                    make_resource_slice("dra-0", "gpu.nvidia.com", 4),
                    make_resource_slice("dra-1", "gpu.nvidia.com", 4),
                    make_resource_slice("nic-0", "sriov.example.com", 2),
                    make_resource_slice("empty-0", "gpu.nvidia.com", 0),
                    make_claim_template("a100", "gpu.nvidia.com"),
                    make_resource_claim("shared", "gpu.nvidia.com"),
                    make_claim_template("a100", "nic.example.com", namespace="other")):
            double.create(obj)
        clusters, after, _ = live_inputs(connection, "ray", PolicyConfig())
        assert after.gpu_nodes == 3  # plugin, dra-0, dra-1
        assert set(after.gpu_devices.classes) == {"gpu.nvidia.com"}
        assert "example.com/gpu" in after.gpu_devices.resources
        assert (set(after.claims), set(after.claim_templates)) == (
            {("ray", "shared")}, {("ray", "a100")})
        (finding,) = lint(clusters, after, PolicyConfig())
        assert "raygate sees 3 GPU nodes" in finding.message

        _, everywhere, _ = live_inputs(connection, None, PolicyConfig())
        assert set(everywhere.claim_templates) == {("ray", "a100"), ("other", "a100")}
        paths = {p for p, _ in double.requests}
        assert "/apis/resource.k8s.io/v1/namespaces/ray/resourceclaimtemplates" in paths
        assert "/apis/resource.k8s.io/v1/resourceclaims" in paths
    finally:
        double.stop()
