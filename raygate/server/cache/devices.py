"""Dynamic Resource Allocation in the cache: the DeviceClasses, ResourceSlices,
ResourceClaims and ResourceClaimTemplates as views (``*_view``, from their wire structs),
and ``DeviceTables``, which edits their indexes for ``SnapshotEditor`` and keeps what they
decide: ``GpuDevices`` (when a class changes) and each node's DRA reason to be a GPU node
(when a slice on it or a class changes), so no request pays for either.

Memory is a few strings per object: a slice keeps its driver, its nodes and a device
count (one slice per node and driver is what a GPU driver publishes), a claim or template
the device classes it asks for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from raygate.policy.config import PolicyConfig
from raygate.policy.devices import (
    ClaimTemplateView,
    ClaimView,
    DeviceClassView,
    GpuDevices,
    ResourceSliceView,
    dra_node_reason,
    gpu_devices,
    selector_drivers,
)
from raygate.server.cache.indexes import Editing
from raygate.server.cache.keys import (
    CLAIMTEMPLATE,
    DEVICECLASS,
    RESOURCECLAIM,
    RESOURCESLICE,
    ObjectKey,
)
from raygate.server.wire import dra

__all__ = [
    "DEVICE_KINDS",
    "DeviceTables",
    "claim_template_view",
    "device_class_view",
    "resource_claim_view",
    "resource_slice_view",
]

DEVICE_KINDS = frozenset({DEVICECLASS, RESOURCESLICE, RESOURCECLAIM, CLAIMTEMPLATE})


def device_class_view(cls: dra.DeviceClass, path: str = "$") -> DeviceClassView:
    expressions = [s.cel.expression for s in cls.spec.selectors or () if s.cel is not None]
    return DeviceClassView(cls.metadata.name, selector_drivers(expressions),
                           cls.spec.extended_resource_name or "")


def resource_slice_view(slice_: dra.ResourceSlice, path: str = "$") -> ResourceSliceView:
    spec = slice_.spec
    devices = spec.devices or ()
    if spec.per_device_node_selection:
        nodes = tuple(dict.fromkeys(d.node_name for d in devices if d.node_name))
    else:
        nodes = (spec.node_name,) if spec.node_name else ()
    return ResourceSliceView(slice_.metadata.name, spec.driver, nodes, len(devices))


def _device_classes(spec: dra.ResourceClaimSpec) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for request in (spec.devices.requests or ()) if spec.devices is not None else ():
        if request.exactly is not None:
            names[request.exactly.device_class_name] = None
        for choice in request.first_available or ():
            names[choice.device_class_name] = None
    return tuple(names)


def resource_claim_view(claim: dra.ResourceClaim, path: str = "$") -> ClaimView:
    meta = claim.metadata
    return ClaimView(meta.namespace, meta.name, _device_classes(claim.spec))


def claim_template_view(template: dra.ResourceClaimTemplate,
                        path: str = "$") -> ClaimTemplateView:
    meta = template.metadata
    return ClaimTemplateView(meta.namespace, meta.name, _device_classes(template.spec.spec))


DeviceView = DeviceClassView | ResourceSliceView | ClaimView


class DeviceTables:
    """The DRA objects of the snapshot being edited (one per editor, in its ``indexes``),
    with ``devices`` and ``dra_gpu_nodes`` as they follow from them. ``reclassify`` names
    the nodes whose DRA reason an edit changed, for the editor to class them again."""

    def __init__(self, indexes: Editing, config: PolicyConfig, devices: GpuDevices,
                 dra_gpu_nodes: dict[str, str]) -> None:
        self._ix = indexes
        self._config = config
        self.devices = devices
        self.dra_gpu_nodes = dra_gpu_nodes
        self._copied = False
        self.reclassify: set[str] = set()

    def upsert(self, view: DeviceView, resource_version: str) -> None:
        if isinstance(view, ClaimTemplateView):
            self._ix.resourceclaimtemplates.set((view.namespace, view.name),
                                                (resource_version, view))
        elif isinstance(view, ClaimView):
            self._ix.resourceclaims.set((view.namespace, view.name), (resource_version, view))
        elif isinstance(view, DeviceClassView):
            old = self._ix.deviceclasses.get(view.name)
            self._ix.deviceclasses.set(view.name, (resource_version, view))
            if old is None or old[1] != view:
                self._classes_changed()
        else:
            old_slice = self._ix.resourceslices.get(view.name)
            self._ix.resourceslices.set(view.name, (resource_version, view))
            if old_slice is not None:
                self._unplace(old_slice[1])
            for node in view.nodes:
                self._ix.slices_on.add(node, view.name, view)
            self._follow(view.nodes)

    def delete(self, kind: str, key: ObjectKey) -> bool:
        if kind == DEVICECLASS:
            gone = self._ix.deviceclasses.pop(cast(str, key)) is not None
            if gone:
                self._classes_changed()
            return gone
        if kind == RESOURCESLICE:
            old = self._ix.resourceslices.pop(cast(str, key))
            if old is not None:
                self._unplace(old[1])
            return old is not None
        table = (self._ix.resourceclaimtemplates if kind == CLAIMTEMPLATE
                 else self._ix.resourceclaims)
        return table.pop(cast(tuple[str, str], key)) is not None

    def _unplace(self, view: ResourceSliceView) -> None:
        for node in view.nodes:
            self._ix.slices_on.remove(node, view.name)
        self._follow(view.nodes)

    def _classes_changed(self) -> None:
        classes = (v for _, v in self._ix.deviceclasses.finish().values())
        devices = gpu_devices(classes, self._config)
        if devices != self.devices:
            self.devices = devices
            self._follow(list(self._ix.slices_on.finish().keys()))

    def _follow(self, nodes: Iterable[str]) -> None:
        """Decide the DRA reason of ``nodes`` again from the slices on them."""
        for node in nodes:
            reason = dra_node_reason(self._ix.slices_on.get(node).values(), self.devices)
            if self.dra_gpu_nodes.get(node) == reason:
                continue
            if not self._copied:
                self.dra_gpu_nodes, self._copied = dict(self.dra_gpu_nodes), True
            if reason is None:
                del self.dra_gpu_nodes[node]
            else:
                self.dra_gpu_nodes[node] = reason
            self.reclassify.add(node)
