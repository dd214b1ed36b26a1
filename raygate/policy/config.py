"""Policy settings: typed, defaulted, validated apart from the defaults.

``policy_config_from_mapping`` turns the ``policy:`` part of a config file into a
``PolicyConfig`` and reports every problem with its path, all at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from raygate.contract.command import ConfigError

__all__ = ["GpuNodesForSurplus", "NodeAutoscaler", "PolicyConfig", "policy_config_from_mapping"]

DEFAULT_GPU_RESOURCES = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
    "habana.ai/gaudi",
    "aws.amazon.com/neuron",
    "google.com/tpu",
)

DEFAULT_GPU_DRIVERS = ("gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com")


class GpuNodesForSurplus(Enum):
    """May CPU-only Ray workers use GPU nodes at all?"""

    NEVER = "never"  # no CPU-only Ray pod, floor or surplus, ever lands on a GPU node
    SURPLUS = "surplus"  # surplus (overflow) workers may, scored low; floor pods never
    ALWAYS = "always"  # nobody is filtered; GPU nodes only score low


class NodeAutoscaler(Enum):
    """Does a node autoscaler bring nodes for pending pods? (An all-or-nothing scale-up is
    released whole where one does: ``raygate.policy.scale_up``.)"""

    AUTO = "auto"  # yes where Karpenter's NodeClaims are served
    PRESENT = "present"  # yes: Cluster Autoscaler, say, which serves no API to see
    ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    """Extended resources that make a node a GPU node (allocatable > 0) and a pod a GPU pod
    (any container requests or limits one). Default: the device plugins of NVIDIA, AMD,
    Intel, Habana, AWS Neuron and Google TPU."""

    gpu_node_labels: Mapping[str, str] = field(
        default_factory=lambda: {"nvidia.com/gpu.present": "true"}
    )
    """Node labels (key: value) that mark a GPU node even before its device plugin
    advertises the resource. Default: the NVIDIA GPU Operator's ``gpu.present``."""

    gpu_drivers: tuple[str, ...] = DEFAULT_GPU_DRIVERS
    """DRA drivers whose devices are GPUs: a node is a GPU node when a ResourceSlice of one
    lists devices on it (``raygate.policy.devices``). Default: the DRA drivers of NVIDIA,
    AMD and Intel GPUs."""

    gpu_device_classes: tuple[str, ...] = ()
    """DeviceClasses that hand out GPUs besides those picking a ``gpuDrivers`` driver or
    backing a ``gpuResources`` resource: a claim for one makes a GPU pod, and their drivers'
    slices make GPU nodes. Default: none."""

    thrash_guard_seconds: float = 300.0
    """Seconds, counted from the DisruptionTarget condition's lastTransitionTime, during
    which a worker group that lost a pod to scheduler preemption on a GPU node keeps all
    its CPU-only pods off GPU nodes. Default 300 s: longer than a typical GPU job's
    scheduling burst, short enough that idle GPU capacity is used again soon. 0 disables."""

    gpu_nodes_for_surplus: GpuNodesForSurplus = GpuNodesForSurplus.SURPLUS
    """``never | surplus | always``; see ``GpuNodesForSurplus``. Default ``surplus``."""

    volcano_score_scale: float = 50.0
    """Multiplier from raygate's 0..10 score to the float Volcano's prioritize adds *raw*
    to the other plugins' scores. Default 50: a CPU node then gets 500 over a GPU node,
    more than nodeorder's default weights can add for a big, idle node
    (leastrequested + balancedresource + imagelocality, weight 1 x 0..100 each)."""

    stuck_unbound_seconds: float = 120.0
    """Seconds an unbound pod may wait with no verdict from the scheduler (no
    PodScheduled=False, no gang holding it) before the admission status calls it
    ``Stuck``. Default 120 s: kube-scheduler and Volcano judge a new pod within seconds
    (Volcano's session period is 1 s), so two minutes of silence means nobody looks."""

    stuck_starting_seconds: float = 600.0
    """Seconds a pod bound to a node may stay not running and ready before the admission
    status calls it ``Stuck``. Default 600 s: room for a large Ray image pull on a cold
    node, well under the Ray autoscaler's 3600 s allocation timeout."""

    node_autoscaler: NodeAutoscaler = NodeAutoscaler.AUTO
    """``auto | present | absent``; see ``NodeAutoscaler``. Default ``auto``."""

    scale_up_settle_seconds: float = 2.0
    """Seconds an all-or-nothing scale-up must go without a new worker before it is
    complete and may be released. Default 2 s: KubeRay creates one scale-up's workers in
    one reconcile, well within it."""

    scale_gates: bool = True
    """Write raygate's scale gates (``raygate.policy.scale_gates``) into the RayClusters'
    ``workerGroupSpecs[].scaleStrategy.scaleGate`` where the CRD has the field. Default on;
    off: raygate removes those it wrote."""


class _Bad(ValueError):
    """One setting's value cannot be used; the message says where and why."""


def _names(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _Bad(f"{path}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def _gpu_node_labels(value: Any, path: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _Bad(f"{path}: expected a mapping of label to string value, got {value!r} "
                   "(quote values such as \"true\")")
    return dict(value)


def _number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)


def _guard_seconds(value: Any, path: str) -> float:
    seconds = _number(value)
    if seconds is None or seconds < 0:
        raise _Bad(f"{path}: expected a number of seconds >= 0, got {value!r}")
    return seconds


def _surplus_mode(value: Any, path: str) -> GpuNodesForSurplus:
    allowed = [m.value for m in GpuNodesForSurplus]
    if value not in allowed:
        raise _Bad(f"{path}: expected one of {', '.join(allowed)}, got {value!r}")
    return GpuNodesForSurplus(value)


def _node_autoscaler(value: Any, path: str) -> NodeAutoscaler:
    allowed = [m.value for m in NodeAutoscaler]
    if value not in allowed:
        raise _Bad(f"{path}: expected one of {', '.join(allowed)}, got {value!r}")
    return NodeAutoscaler(value)


def _switch(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"{path}: expected true or false, got {value!r}")
    return value


def _score_scale(value: Any, path: str) -> float:
    scale = _number(value)
    if scale is None or not 0 <= scale < 1e9:
        raise _Bad(f"{path}: expected a number in [0, 1e9), got {value!r}")
    return scale


def _stuck_seconds(value: Any, path: str) -> float:
    seconds = _number(value)
    if seconds is None or not 0 < seconds < 1e9:
        raise _Bad(f"{path}: expected a number of seconds > 0, got {value!r}")
    return seconds


_POLICY_KEYS: Mapping[str, tuple[str, Callable[[Any, str], Any]]] = {
    "gpuResources": ("gpu_resources", _names),
    "gpuNodeLabels": ("gpu_node_labels", _gpu_node_labels),
    "gpuDrivers": ("gpu_drivers", _names),
    "gpuDeviceClasses": ("gpu_device_classes", _names),
    "thrashGuardSeconds": ("thrash_guard_seconds", _guard_seconds),
    "gpuNodesForSurplus": ("gpu_nodes_for_surplus", _surplus_mode),
    "volcanoScoreScale": ("volcano_score_scale", _score_scale),
    "stuckUnboundSeconds": ("stuck_unbound_seconds", _stuck_seconds),
    "stuckStartingSeconds": ("stuck_starting_seconds", _stuck_seconds),
    "nodeAutoscaler": ("node_autoscaler", _node_autoscaler),
    "scaleUpSettleSeconds": ("scale_up_settle_seconds", _guard_seconds),
    "scaleGates": ("scale_gates", _switch),
}
"""Each key of the file's ``policy:`` section: the ``PolicyConfig`` field and its check."""


def policy_config_from_mapping(data: Mapping[str, Any], path: str = "policy") -> PolicyConfig:
    """Build a ``PolicyConfig`` from a mapping with camelCase keys, as in the YAML file;
    every problem is reported, not the first."""
    if not isinstance(data, Mapping):
        raise ConfigError([f"{path}: expected a mapping, got {type(data).__name__}"])
    problems = [f"{path}.{key}: unknown setting" for key in data if key not in _POLICY_KEYS]
    values: dict[str, Any] = {}
    for key, (name, convert) in _POLICY_KEYS.items():
        if key in data:
            try:
                values[name] = convert(data[key], f"{path}.{key}")
            except _Bad as exc:
                problems.append(str(exc))
    if problems:
        raise ConfigError(problems)
    return PolicyConfig(**values)


def policy_config_to_mapping(config: PolicyConfig) -> dict[str, Any]:
    """The inverse of ``policy_config_from_mapping``, for ``--print-config``."""
    names = {name: key for key, (name, _) in _POLICY_KEYS.items()}
    out: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[names[f.name]] = value
    return out
