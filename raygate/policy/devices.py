"""GPUs handed out through Dynamic Resource Allocation (``resource.k8s.io/v1``).

A DRA GPU driver publishes each node's devices as ``ResourceSlice`` objects; the node has
no GPU in its allocatable. A pod gets a GPU through a resource claim (its own
``ResourceClaim``, or one made from a ``ResourceClaimTemplate``) that asks for devices of
a ``DeviceClass``, or through an extended resource that a DeviceClass maps to DRA
(``extendedResourceName``, or the implicit ``deviceclass.resource.kubernetes.io/<class>``).

The rules, each once:

- ``gpu_class_reason``: a DeviceClass is a GPU class when the configuration names it, when
  its selectors pick a configured GPU driver, or when it maps a configured GPU resource;
- ``gpu_devices``: what all DeviceClasses together say (GPU classes, the drivers whose
  slices are GPUs, the extended resources that are GPUs), decided when a class changes;
- ``holds_gpus``, ``dra_node_reason``: whether a slice lists GPUs, and why a node is a GPU
  node by its slices;
- ``claim_gpu_reason``: why a pod's resource claims ask for a GPU.

Only node-local devices make a GPU node (a slice's ``nodeName``, or each device's own with
``perDeviceNodeSelection``): devices reachable from a node selector or from every node are
not one node's GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from raygate.policy.config import PolicyConfig

__all__ = [
    "IMPLICIT_RESOURCE_PREFIX",
    "NO_GPU_DEVICES",
    "ClaimTemplateView",
    "ClaimView",
    "DeviceClassView",
    "GpuDevices",
    "PodClaim",
    "ResourceSliceView",
    "claim_gpu_reason",
    "dra_node_reason",
    "gpu_class_reason",
    "gpu_devices",
    "holds_gpus",
    "selector_drivers",
]

IMPLICIT_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
"""A DeviceClass without ``extendedResourceName`` is still requestable as this prefix plus
its name (``resource.k8s.io/v1`` ``ResourceDeviceClassPrefix``)."""

# ``device.driver == "gpu.nvidia.com"`` (either quote, any spacing, either side): how a
# DRA driver's own DeviceClass picks its devices. Other CEL says nothing about drivers.
_DRIVER_EQUALS = re.compile(
    r"""device\.driver\s*==\s*(['"])([^'"]+)\1|(['"])([^'"]+)\3\s*==\s*device\.driver""")


@dataclass(frozen=True, slots=True)
class DeviceClassView:
    name: str
    drivers: tuple[str, ...] = ()
    """The drivers its CEL selectors compare ``device.driver`` with (``selector_drivers``)."""
    extended_resource: str = ""
    """``spec.extendedResourceName``: the extended resource this class backs, if named."""


@dataclass(frozen=True, slots=True)
class ResourceSliceView:
    name: str
    driver: str
    nodes: tuple[str, ...] = ()
    """The nodes whose own devices these are: ``spec.nodeName``, or the devices' node
    names with ``perDeviceNodeSelection``; empty for devices not local to one node."""
    devices: int = 0


@dataclass(frozen=True, slots=True)
class ClaimView:
    """A ``ResourceClaim``: the device classes it asks for."""

    namespace: str
    name: str
    device_classes: tuple[str, ...] = ()
    """Every request's ``exactly.deviceClassName`` and each ``firstAvailable`` choice's."""


@dataclass(frozen=True, slots=True)
class ClaimTemplateView(ClaimView):
    """A ``ResourceClaimTemplate``: what each claim made from it asks for."""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``: a claim by name or by template."""

    name: str
    claim: str = ""
    template: str = ""


@dataclass(frozen=True, slots=True)
class GpuDevices:
    """What the DeviceClasses say about GPUs under one configuration."""

    classes: Mapping[str, str]
    """GPU device class name -> why it is one."""
    drivers: frozenset[str]
    """Drivers whose devices are GPUs: the configured ones and those GPU classes pick."""
    resources: tuple[str, ...]
    """Extended resources GPU classes back that ``gpuResources`` does not list."""


NO_GPU_DEVICES = GpuDevices(MappingProxyType({}), frozenset(), ())
"""No DeviceClass seen and no GPU driver known (``raygate check`` offline)."""


def selector_drivers(expressions: Iterable[str]) -> tuple[str, ...]:
    """The drivers CEL selector ``expressions`` compare ``device.driver`` with."""
    found: list[str] = []
    for expression in expressions:
        for match in _DRIVER_EQUALS.finditer(expression):
            driver = match.group(2) or match.group(4)
            if driver not in found:
                found.append(driver)
    return tuple(found)


def gpu_class_reason(cls: DeviceClassView, config: PolicyConfig) -> str | None:
    """Why ``cls`` is a GPU device class, or None."""
    if cls.name in config.gpu_device_classes:
        return "named in gpuDeviceClasses"
    for driver in cls.drivers:
        if driver in config.gpu_drivers:
            return f"selects GPU driver {driver}"
    if cls.extended_resource in config.gpu_resources:
        return f"backs {cls.extended_resource}"
    return None


def gpu_devices(classes: Iterable[DeviceClassView], config: PolicyConfig) -> GpuDevices:
    """The GPU classes among ``classes``, the drivers whose slices hold GPUs, and the
    extended resources those classes back (explicit or implicit)."""
    reasons: dict[str, str] = {}
    drivers = set(config.gpu_drivers)
    resources: list[str] = []
    for cls in sorted(classes, key=lambda c: c.name):
        reason = gpu_class_reason(cls, config)
        if reason is None:
            continue
        reasons[cls.name] = reason
        drivers.update(cls.drivers)
        for resource in (cls.extended_resource, IMPLICIT_RESOURCE_PREFIX + cls.name):
            if resource and resource not in config.gpu_resources and resource not in resources:
                resources.append(resource)
    return GpuDevices(reasons, frozenset(drivers), tuple(resources))


def holds_gpus(slice_: ResourceSliceView, devices: GpuDevices) -> bool:
    """``slice_`` lists devices, and its driver's devices are GPUs."""
    return bool(slice_.devices) and slice_.driver in devices.drivers


def dra_node_reason(slices: Iterable[ResourceSliceView], devices: GpuDevices) -> str | None:
    """Why a node is a GPU node by the ``slices`` that name it, or None."""
    counts: dict[str, int] = {}
    for slice_ in slices:
        if holds_gpus(slice_, devices):
            counts[slice_.driver] = counts.get(slice_.driver, 0) + slice_.devices
    if not counts:
        return None
    return "ResourceSlices of " + ", ".join(
        f"{driver} ({n} device{'s' if n != 1 else ''})" for driver, n in sorted(counts.items()))


Lookup = Callable[[str], ClaimView | None]
"""A ResourceClaim (or template) of the pod's namespace by name; None when not known."""


def claim_gpu_reason(refs: Iterable[PodClaim], claim: Lookup, template: Lookup,
                     devices: GpuDevices) -> str | None:
    """Why a pod's resource claims ``refs`` ask for a GPU, or None; each names a
    ResourceClaim (found by ``claim``) or a template (by ``template``). A claim not known
    yet counts as a GPU claim: a pod that may need a GPU node is never refused one on a
    guess."""
    for ref in refs:
        if ref.claim:
            source, spec = f"ResourceClaim {ref.claim}", claim(ref.claim)
        elif ref.template:
            source, spec = f"ResourceClaimTemplate {ref.template}", template(ref.template)
        else:
            continue  # names neither: the API server refuses such a pod
        if spec is None:
            return f"resource claim {ref.name}: {source} not known yet (counted as a GPU)"
        for name in spec.device_classes:
            if name in devices.classes:
                return f"resource claim {ref.name}: {source} asks for GPU device class {name}"
    return None
