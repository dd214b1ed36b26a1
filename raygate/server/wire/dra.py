"""Dynamic Resource Allocation (``resource.k8s.io/v1``): the parts of DeviceClasses,
ResourceSlices, ResourceClaims and their templates that say "GPU"
(``raygate.server.cache.devices`` makes views of them)."""

from __future__ import annotations

import msgspec

from raygate.server.wire.kube import ObjectMeta, _Base

__all__ = ["DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"]


class CelSelector(_Base):
    expression: str = ""


class DeviceSelector(_Base):
    cel: CelSelector | None = None


class DeviceClassSpec(_Base):
    selectors: list[DeviceSelector] | None = None
    extended_resource_name: str | None = None


class DeviceClass(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)


class SliceDevice(_Base):
    name: str = ""
    node_name: str | None = None
    """Set only with the slice's ``perDeviceNodeSelection``."""


class ResourceSliceSpec(_Base):
    driver: str = ""
    node_name: str | None = None
    per_device_node_selection: bool | None = None
    devices: list[SliceDevice] | None = None


class ResourceSlice(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)


class DeviceSubRequest(_Base):
    device_class_name: str = ""


class DeviceRequest(_Base):
    name: str = ""
    exactly: DeviceSubRequest | None = None
    """``ExactDeviceRequest``: of its fields only ``deviceClassName`` is read."""
    first_available: list[DeviceSubRequest] | None = None


class DeviceClaim(_Base):
    requests: list[DeviceRequest] | None = None


class ResourceClaimSpec(_Base):
    devices: DeviceClaim | None = None


class ResourceClaim(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplateSpec(_Base):
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpec = msgspec.field(default_factory=ResourceClaimTemplateSpec)
