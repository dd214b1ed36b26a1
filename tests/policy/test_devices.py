"""Every way a node or a pod is a GPU one, GPUs through Dynamic Resource Allocation
included: one table per question, each row through the real loader and cache (the DRA
reasons are decided there, when an object changes), then the plugin's rule."""

from __future__ import annotations

import pytest

from raygate.policy.classify import gpu_node_reason, gpu_pod_reason
from raygate.policy.config import PolicyConfig
from raygate.policy.devices import (
    DeviceClassView,
    GpuDevices,
    gpu_class_reason,
    gpu_devices,
    selector_drivers,
)
from testkit.builders import (
    Obj,
    make_claim_template,
    make_device_class,
    make_node,
    make_pod,
    make_resource_claim,
    make_resource_slice,
)
from tests.conftest import snapshot_of

NVIDIA = "gpu.nvidia.com"  # NVIDIA's DRA driver, and the DeviceClass it ships
NIC = "nic.example.com"  # a DRA driver of network cards: not GPUs
CONFIG = PolicyConfig()


def per_device_slice(nodes: list[str], driver: str) -> Obj:
    """A slice whose devices each name their node (``perDeviceNodeSelection``)."""
    slice_ = make_resource_slice("x", driver, len(nodes), name="per-device")
    spec = slice_["spec"]
    del spec["nodeName"]
    spec["perDeviceNodeSelection"] = True
    for device, node in zip(spec["devices"], nodes, strict=True):
        device["nodeName"] = node
    return slice_


def all_nodes_slice(driver: str) -> Obj:
    slice_ = make_resource_slice("x", driver, 2, name="everywhere")
    del slice_["spec"]["nodeName"]
    slice_["spec"]["allNodes"] = True
    return slice_


NODES: list[tuple[str, list[Obj], str | None]] = [
    ("cpu node", [], None),
    ("allocatable", [make_node("n").gpus(8).obj()], "allocatable nvidia.com/gpu=8"),
    ("label", [make_node("n").label("nvidia.com/gpu.present", "true").obj()],
     "label nvidia.com/gpu.present=true"),
    ("slice of a GPU driver, no class needed", [make_resource_slice("n", NVIDIA, 8)],
     "ResourceSlices of gpu.nvidia.com (8 devices)"),
    ("slice of a driver a GPU-backing class picks",
     [make_resource_slice("n", "accel.example.com", 2),
      make_device_class("accel", "accel.example.com", extended_resource="nvidia.com/gpu")],
     "ResourceSlices of accel.example.com (2 devices)"),
    ("slice of a driver whose class picks nothing GPU", [
        make_resource_slice("n", NIC, 4), make_device_class("nic", NIC)], None),
    ("slice with no devices", [make_resource_slice("n", NVIDIA, 0)], None),
    ("slice of another node", [make_resource_slice("m", NVIDIA, 1)], None),
    ("per-device node selection", [per_device_slice(["n", "m"], NVIDIA)],
     "ResourceSlices of gpu.nvidia.com (2 devices)"),
    ("devices every node reaches are no node's own", [all_nodes_slice(NVIDIA)], None),
]


@pytest.mark.parametrize(("objects", "reason"), [c[1:] for c in NODES],
                         ids=[c[0] for c in NODES])
def test_gpu_node(objects: list[Obj], reason: str | None) -> None:
    if not any(o["kind"] == "Node" for o in objects):
        objects = [make_node("n").obj(), *objects]
    snap = snapshot_of(*objects, config=CONFIG)
    node = snap.node("n")
    assert node is not None
    assert gpu_node_reason(node, CONFIG, snap.dra_gpu_nodes) == reason
    assert snap.is_gpu_node("n") is (reason is not None)


def test_a_class_named_as_gpu_makes_its_drivers_slices_gpus() -> None:
    objects = (make_node("n").obj(), make_resource_slice("n", "accel.example.com"),
               make_device_class("accel", "accel.example.com"))
    assert not snapshot_of(*objects, config=CONFIG).is_gpu_node("n")
    config = PolicyConfig(gpu_device_classes=("accel",))
    assert snapshot_of(*objects, config=config).is_gpu_node("n")


GPU_CLASS = make_device_class(NVIDIA, NVIDIA)
POD = make_pod("p").ray("rc", "w").requests(cpu="1")
PODS: list[tuple[str, Obj, list[Obj], str | None]] = [
    ("cpu only", POD.obj(), [GPU_CLASS], None),
    ("device plugin resource", make_pod("p").requests(nvidia_com_gpu="1").obj(), [],
     "requests GPU resources (nvidia.com/gpu)"),
    ("claim", make_pod("p").claim("gpu", claim="c").obj(),
     [GPU_CLASS, make_resource_claim("c", NVIDIA)],
     "resource claim gpu: ResourceClaim c asks for GPU device class gpu.nvidia.com"),
    ("claim template", make_pod("p").claim("gpu", template="t").obj(),
     [GPU_CLASS, make_claim_template("t", NVIDIA)],
     "resource claim gpu: ResourceClaimTemplate t asks for GPU device class gpu.nvidia.com"),
    ("DRA-backed extended resource",
     make_pod("p").requests(**{"example.com/gpu": "1"}).obj(),
     [make_device_class("ex", NVIDIA, extended_resource="example.com/gpu")],
     "requests GPU resources (example.com/gpu)"),
    ("the implicit extended resource of a GPU class",
     make_pod("p").requests(**{"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}).obj(),
     [GPU_CLASS],
     "requests GPU resources (deviceclass.resource.kubernetes.io/gpu.nvidia.com)"),
    ("claim for a device that is not a GPU", make_pod("p").claim("net", claim="c").obj(),
     [GPU_CLASS, make_device_class("nic", NIC), make_resource_claim("c", "nic")], None),
    ("template for a device that is not a GPU", make_pod("p").claim("net", template="t").obj(),
     [make_device_class("nic", NIC), make_claim_template("t", "nic")], None),
    ("claim not known yet", make_pod("p").claim("gpu", claim="later").obj(), [GPU_CLASS],
     "resource claim gpu: ResourceClaim later not known yet (counted as a GPU)"),
    ("a claim of another namespace is not this pod's",
     make_pod("p").claim("gpu", claim="c").obj(),
     [GPU_CLASS, make_resource_claim("c", NVIDIA, namespace="other")],
     "resource claim gpu: ResourceClaim c not known yet (counted as a GPU)"),
]


@pytest.mark.parametrize(("pod_obj", "objects", "reason"), [c[1:] for c in PODS],
                         ids=[c[0] for c in PODS])
def test_gpu_pod(pod_obj: Obj, objects: list[Obj], reason: str | None) -> None:
    snap = snapshot_of(pod_obj, *objects, config=CONFIG)
    pod = snap.pod(pod_obj["metadata"]["uid"])
    assert pod is not None
    assert gpu_pod_reason(pod, snap, CONFIG) == reason


@pytest.mark.parametrize(("expression", "drivers"), [
    ("device.driver == 'gpu.nvidia.com'", ("gpu.nvidia.com",)),
    ('device.driver=="gpu.amd.com" && device.attributes["gpu.amd.com"].type == "gpu"',
     ("gpu.amd.com",)),
    ("'gpu.intel.com' == device.driver", ("gpu.intel.com",)),
    ("device.attributes['x'].model == 'gpu.nvidia.com'", ()),
])
def test_selector_drivers(expression: str, drivers: tuple[str, ...]) -> None:
    assert selector_drivers([expression]) == drivers


def test_gpu_devices_collects_classes_drivers_and_resources() -> None:
    config = PolicyConfig(gpu_device_classes=("named",))
    classes = [DeviceClassView("nvidia", ("gpu.nvidia.com",)),
               DeviceClassView("named", ("accel.example.com",), "example.com/accel"),
               DeviceClassView("plugin", (), "nvidia.com/gpu"),
               DeviceClassView("nic", (NIC,), "example.com/nic")]
    assert [gpu_class_reason(c, config) for c in classes] == [
        "selects GPU driver gpu.nvidia.com", "named in gpuDeviceClasses",
        "backs nvidia.com/gpu", None]
    assert gpu_devices(classes, config) == GpuDevices(
        {"named": "named in gpuDeviceClasses", "nvidia": "selects GPU driver gpu.nvidia.com",
         "plugin": "backs nvidia.com/gpu"},
        frozenset({*config.gpu_drivers, "accel.example.com"}),
        ("example.com/accel", "deviceclass.resource.kubernetes.io/named",
         "deviceclass.resource.kubernetes.io/nvidia",
         "deviceclass.resource.kubernetes.io/plugin"))
