"""raygate's placement in native form: the node affinity every component reads.

No node autoscaler (Karpenter, Cluster Autoscaler) calls a scheduler extender: they
simulate placement from a pod's own affinity, tolerations and requests. So before a Ray pod
can be scheduled, raygate writes its decision into the pod. raygate's webhook adds the
scheduling gate ``GATE`` when the pod is created (KEP-3521); raygate then decides the pod
and, in one JSON Patch, adds the node affinity and removes the gate (KEP-3838: while a pod
is gated its node affinity may be narrowed, never widened). The patch opens with a ``test``
of the gate, so a pod is released once: a second writer's patch fails whole.

- ``AVOID_GPU`` (a CPU-only head, floor worker, thrash-guarded or ``never`` worker): a
  required term: none of the GPU node labels;
- ``PREFER_CPU`` (a surplus worker): a preferred term of the same expressions;
- otherwise no rule: the gate goes and nothing else changes.

GPU nodes are named by labels only (``gpuNodeLabels``): a node autoscaler decides before
the node exists, when no allocatable resource can say it is a GPU node. ``NotIn`` also
matches a node without the label, so the expressions of all labels together say "not a GPU
node" exactly as ``gpu_node_reason`` says "GPU node" by label.

The role a gated pod is released with is final: after the release its affinity cannot
change. ``release_role`` gives the floor to the first pods released in each group, counting
those released before (their ``LABEL_ROLE``) and those decided but not seen released yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from raygate.plugin.classify import RoleVerdict, fixed_role_or_floor
from raygate.plugin.config import PolicyConfig
from raygate.plugin.model import ClusterView, NodeAffinityShape, PodView, Role
from raygate.plugin.placement import Decision, Placement

__all__ = [
    "GATE",
    "LABEL_ROLE",
    "LABEL_RULE",
    "NativeRule",
    "native_rule",
    "not_gpu_expressions",
    "release_patch",
    "release_role",
]

GATE = "raygate.io/placement"
"""The scheduling gate raygate's webhook adds and raygate removes."""
LABEL_ROLE = "raygate.io/role"
"""Set at the release: the role the pod was released with (head, floor, surplus)."""
LABEL_RULE = "raygate.io/rule"
"""Set at the release: the placement rule behind its affinity (``Rule`` values)."""
PREFERRED_WEIGHT = 100  # the most a preferred term may weigh: kube-scheduler scales it


class NativeRule(Enum):
    """What raygate writes into a released pod."""

    REQUIRED = "required-not-gpu"
    PREFERRED = "preferred-not-gpu"
    NONE = "none"


def native_rule(decision: Decision, config: PolicyConfig) -> NativeRule:
    """The native form of ``decision``; none when no GPU node label is configured (then
    no native rule can name GPU nodes: raygate's startup and ``raygate check`` warn)."""
    if not config.gpu_node_labels:
        return NativeRule.NONE
    if decision.placement is Placement.AVOID_GPU:
        return NativeRule.REQUIRED
    if decision.placement is Placement.PREFER_CPU:
        return NativeRule.PREFERRED
    return NativeRule.NONE


def not_gpu_expressions(config: PolicyConfig) -> list[dict[str, object]]:
    """``matchExpressions`` that hold on a node carrying none of the GPU node labels."""
    return [{"key": key, "operator": "NotIn", "values": [value]}
            for key, value in sorted(config.gpu_node_labels.items())]


def _escape(key: str) -> str:
    """A map key as a JSON Pointer token (RFC 6901: ``~`` → ``~0``, ``/`` → ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def release_patch(pod: PodView, rule: NativeRule, labels: Mapping[str, str],
                  config: PolicyConfig) -> list[dict[str, object]]:
    """The JSON Patch that releases ``pod`` (which holds ``GATE``): test that it is still
    that pod, with the gate where the view saw it; remove the gate; write ``rule``'s
    affinity; set ``labels``."""
    index = pod.scheduling_gates.index(GATE)
    gate = f"/spec/schedulingGates/{index}"
    ops: list[dict[str, object]] = [
        {"op": "test", "path": "/metadata/uid", "value": pod.uid},
        {"op": "test", "path": f"{gate}/name", "value": GATE},
        {"op": "remove", "path": gate},
    ]
    if rule is not NativeRule.NONE:
        ops += _affinity_ops(pod, rule, not_gpu_expressions(config))
    # A KubeRay pod always has labels (ray.io/cluster among them): add to the map.
    ops += [{"op": "add", "path": f"/metadata/labels/{_escape(key)}", "value": value}
            for key, value in labels.items()]
    return ops


def _affinity_ops(pod: PodView, rule: NativeRule, expressions: list[dict[str, object]]
                  ) -> list[dict[str, object]]:
    shape = pod.node_affinity
    node = "/spec/affinity/nodeAffinity"
    if rule is NativeRule.PREFERRED:
        term = {"weight": PREFERRED_WEIGHT, "preference": {"matchExpressions": expressions}}
        if shape is not None and shape.preferred:
            path = f"{node}/preferredDuringSchedulingIgnoredDuringExecution/-"
            return [{"op": "add", "path": path, "value": term}]
        return _create(shape, "preferredDuringSchedulingIgnoredDuringExecution", [term])
    terms = None if shape is None else shape.required_terms
    if not terms:  # no required selector, or one with no term: set it whole
        selector = {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        return _create(shape, "requiredDuringSchedulingIgnoredDuringExecution", selector)
    # Terms are ORed and a term's expressions ANDed: narrowing every term narrows them all.
    ops: list[dict[str, object]] = []
    required = f"{node}/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    for i, has_expressions in enumerate(terms):
        if has_expressions:
            ops += [{"op": "add", "path": f"{required}/{i}/matchExpressions/-", "value": e}
                    for e in expressions]
        else:
            ops.append({"op": "add", "path": f"{required}/{i}/matchExpressions",
                        "value": expressions})
    return ops


def _create(shape: NodeAffinityShape | None, field: str, value: object
            ) -> list[dict[str, object]]:
    """Add ``field`` under nodeAffinity, creating the objects above it that are missing."""
    if shape is None or not shape.affinity:
        return [{"op": "add", "path": "/spec/affinity",
                 "value": {"nodeAffinity": {field: value}}}]
    if not shape.node_affinity:
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {field: value}}]
    return [{"op": "add", "path": f"/spec/affinity/nodeAffinity/{field}", "value": value}]


def _live(pod: PodView) -> bool:
    return not pod.terminal and pod.deleted is None


def release_role(pod: PodView, view: ClusterView, claimed: Mapping[str, Role]) -> RoleVerdict:
    """The role ``pod`` (held by ``GATE``) is released with: the floor goes to the first
    pods released in its group. ``claimed`` holds the roles of pods released whose release
    the view does not show yet; a live pod released without ``LABEL_ROLE`` (before raygate
    ran, or while it was down) holds a floor place."""
    floor = fixed_role_or_floor(pod, view)
    if isinstance(floor, RoleVerdict):
        return floor
    key = pod.group_key
    held = 0
    for other in view.group_pods(key):
        if other.uid == pod.uid or not _live(other):
            continue
        role = claimed.get(other.uid)
        if role is None:
            if GATE in other.scheduling_gates:
                continue  # not released yet: no place taken
            role = Role.SURPLUS if other.labels.get(LABEL_ROLE) == "surplus" else Role.FLOOR
        held += role is not Role.SURPLUS
    if held < floor:
        return RoleVerdict(Role.FLOOR, f"released with {held} of group {key.group}'s "
                           f"{floor} floor places taken")
    return RoleVerdict(Role.SURPLUS, f"group {key.group}'s {floor} floor places are taken")
