"""raygate's placement in native form: the node affinity every component reads.

No node autoscaler (Karpenter, Cluster Autoscaler) calls a scheduler extender: they
simulate placement from a pod's own affinity, tolerations and requests. So before a Ray pod
can be scheduled, raygate writes its decision into the pod, in the admission of the pod's
create (``admission_patch``): the pod is created with its rule, one API write. Where the
decision has to wait (a pod whose RayCluster raygate has not seen yet, a held
all-or-nothing scale-up), the webhook adds the scheduling gate ``GATE`` instead (KEP-3521);
raygate then decides the pod and, in one JSON Patch, adds the node affinity and removes
the gate (KEP-3838: while a pod is gated its node affinity may be narrowed, never widened).
That patch opens with a ``test`` of the gate, so a pod is released once: a second writer's
patch fails whole.

- ``AVOID_GPU`` (a CPU-only head, floor worker, thrash-guarded or ``never`` worker): a
  required term: none of the GPU node labels;
- ``PREFER_CPU`` (a surplus worker): a preferred term of the same expressions;
- otherwise no rule (a GPU pod, the ``always`` policy): only the labels.

GPU nodes are named by labels only (``gpuNodeLabels``): a node autoscaler decides before
the node exists, when no allocatable resource can say it is a GPU node. ``NotIn`` also
matches a node without the label, so the expressions of all labels together say "not a GPU
node" exactly as ``gpu_node_reason`` says "GPU node" by label.

The role a pod is created or released with is final (``LABEL_ROLE``): its affinity cannot
change after. ``admission_role`` and ``release_role`` give the floor to the first pods of
each group, counting those decided before (their ``LABEL_ROLE``) and those decided but not
seen yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from raygate.policy.classify import LABEL_ROLE, LABEL_RULE, RoleVerdict, fixed_role_or_floor
from raygate.policy.cluster_view import ClusterView
from raygate.policy.config import PolicyConfig
from raygate.policy.constraints import NodeRequirement
from raygate.policy.model import GroupKey, NodeAffinityShape, PodView, Role
from raygate.policy.placement import Decision, Placement, Rule, decide

__all__ = [
    "ANNOTATION_ADMITTED",
    "GATE",
    "LABEL_ROLE",
    "LABEL_RULE",
    "AdmissionDecision",
    "NativeRule",
    "admission_patch",
    "admission_role",
    "decide_at_admission",
    "gate_removal",
    "native_rule",
    "not_gpu_expressions",
    "places_taken",
    "release_patch",
    "release_role",
    "rule_requirements",
]

GATE = "raygate.io/placement"
"""The scheduling gate raygate's webhook adds where a pod's decision must wait, and
raygate removes."""
ANNOTATION_ADMITTED = "raygate.io/admitted"
"""Set at admission: the AdmissionReview's UID, by which raygate finds the pod it decided
when its watch brings it (until then the pod's role holds a place: ``admission_role``)."""
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"
SURPLUS_TASK = "-surplus"
"""Appended to the ``VOLCANO_TASK_SPEC`` (KubeRay's worker group) of a pod given the
preferred rule. Volcano's allocate treats the pods of one task spec as interchangeable: once
one fails its predicates on every node, it skips the others for the session, and reuses one's
per-node failures for the rest (v1.14.1 ``actions/allocate``: ``TaskHasFitErrors``;
``util/predicate_helper.go``). A floor pod held off GPU nodes would strand the surplus pods
GPU nodes would take. Apart, each task spec holds pods of one rule. KubeRay only writes the
annotation; Volcano's gang counts ``minMember`` over all tasks (KubeRay sets no
``minTaskMember``), whatever their names."""
EMPTY_ROLES: Mapping[str, Role] = MappingProxyType({})
PREFERRED_WEIGHT = 100  # the most a preferred term may weigh: kube-scheduler scales it


class NativeRule(Enum):
    """What raygate writes into a released pod."""

    REQUIRED = "required-not-gpu"
    PREFERRED = "preferred-not-gpu"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """A new pod decided in its create's admission: its role, placement and native rule."""

    role: RoleVerdict
    decision: Decision
    rule: NativeRule


WAIT_FOR_RAYCLUSTER = "its RayCluster is not in raygate's cache yet"
WAIT_FOR_BATCH = "a surplus worker of an all-or-nothing scale-up: held with its batch"


def decide_at_admission(pod: PodView, view: ClusterView, config: PolicyConfig, now: float,
                        taken: Callable[[], int]) -> AdmissionDecision | str:
    """How a new Ray pod is created (``taken``: ``admission_role``'s, asked only where a
    count decides), or why its decision has to wait at raygate's gate: a worker whose
    RayCluster the view lacks (the count needs its floor; the RayCluster comes by another
    watch), a CPU-only surplus worker of an all-or-nothing scale-up (released with its
    batch)."""
    cluster = view.raycluster(pod.namespace, pod.ray_cluster)
    if cluster is None and pod.ray_node_type != "head":
        return WAIT_FOR_RAYCLUSTER
    role = admission_role(pod, view, taken() if pod.ray_node_type != "head" else 0)
    decision = decide(pod, view, config, now, role=role)
    if (cluster is not None and cluster.all_or_nothing and role.role is Role.SURPLUS
            and decision.rule is not Rule.GPU_POD):
        return WAIT_FOR_BATCH
    # A pod that names its node is past every scheduler: its labels say its role.
    rule = NativeRule.NONE if pod.node_name else native_rule(decision, config)
    return AdmissionDecision(role, decision, rule)


def native_rule(decision: Decision, config: PolicyConfig) -> NativeRule:
    """The native form of ``decision``; none when no GPU node label is configured (then
    no native rule can name GPU nodes: raygate's startup and ``raygate check`` warn)."""
    if not config.gpu_node_labels:
        return NativeRule.NONE
    if decision.placement is Placement.AVOID_GPU:
        return NativeRule.REQUIRED
    if decision.placement is Placement.PREFER_CPU and decision.rule is not Rule.POLICY_ALWAYS:
        return NativeRule.PREFERRED
    return NativeRule.NONE  # a GPU pod; ``always``: GPU nodes are the pod's as much as any


def not_gpu_expressions(config: PolicyConfig) -> list[dict[str, object]]:
    """``matchExpressions`` that hold on a node carrying none of the GPU node labels."""
    return [{"key": key, "operator": "NotIn", "values": [value]}
            for key, value in sorted(config.gpu_node_labels.items())]


def rule_requirements(config: PolicyConfig) -> frozenset[NodeRequirement]:
    """``not_gpu_expressions`` as the cache reads them back from a pod's required node
    affinity: what raygate's required rule added to each of its terms."""
    return frozenset(NodeRequirement(key, "NotIn", (value,))
                     for key, value in config.gpu_node_labels.items())


def _escape(key: str) -> str:
    """A map key as a JSON Pointer token (RFC 6901: ``~`` → ``~0``, ``/`` → ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def release_patch(pod: PodView, rule: NativeRule, labels: Mapping[str, str],
                  config: PolicyConfig) -> list[dict[str, object]]:
    """The JSON Patch that releases ``pod`` (which holds ``GATE``): test that it is still
    that pod, with the gate where the view saw it; remove the gate; write ``rule``'s
    affinity; set ``labels``."""
    return gate_removal(pod.uid, pod.scheduling_gates) + _rule_ops(pod, rule, labels, config)


def gate_removal(uid: str, gates: Sequence[str]) -> list[dict[str, object]]:
    """The JSON Patch that removes ``GATE`` from the pod ``uid`` whose scheduling gates
    are ``gates`` (in order), and nothing else: test that it is still that pod, with the
    gate where it was seen (a pod made anew, or a gate moved or removed by another writer,
    fails the whole patch with 422)."""
    gate = f"/spec/schedulingGates/{list(gates).index(GATE)}"
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": f"{gate}/name", "value": GATE},
        {"op": "remove", "path": gate},
    ]


def admission_patch(pod: PodView, rule: NativeRule, labels: Mapping[str, str],
                    annotations: Mapping[str, str], *, has_annotations: bool,
                    config: PolicyConfig) -> list[dict[str, object]]:
    """The JSON Patch of a new pod's admission: ``rule``'s affinity, ``labels`` and
    ``annotations``, into a pod with an annotation map or without one."""
    return (_rule_ops(pod, rule, labels, config)
            + _map_ops("/metadata/annotations", annotations, exists=has_annotations))


def _rule_ops(pod: PodView, rule: NativeRule, labels: Mapping[str, str],
              config: PolicyConfig) -> list[dict[str, object]]:
    ops: list[dict[str, object]] = []
    if rule is not NativeRule.NONE:
        ops += _affinity_ops(pod, rule, not_gpu_expressions(config))
    task_spec = pod.annotations.get(VOLCANO_TASK_SPEC)
    if rule is NativeRule.PREFERRED and task_spec is not None:
        ops += _map_ops("/metadata/annotations", {VOLCANO_TASK_SPEC: task_spec + SURPLUS_TASK},
                        exists=True)
    # A KubeRay pod always has labels (ray.io/cluster among them): add to the map.
    return ops + _map_ops("/metadata/labels", labels, exists=True)


def _map_ops(path: str, values: Mapping[str, str], *, exists: bool
             ) -> list[dict[str, object]]:
    """Set ``values`` in the string map at ``path``, or create it when it is not there."""
    if not exists:
        return [{"op": "add", "path": path, "value": dict(values)}]
    return [{"op": "add", "path": f"{path}/{_escape(key)}", "value": value}
            for key, value in values.items()]


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


def release_role(pod: PodView, view: ClusterView, claimed: Mapping[str, Role],
                 admitted: int = 0) -> RoleVerdict:
    """The role ``pod`` (held by ``GATE``) is released with: the floor goes to the first
    pods decided in its group. ``claimed`` holds the roles of pods released whose release
    the view does not show yet, ``admitted`` the floor places of pods decided at admission
    that it does not show yet; a live pod released without ``LABEL_ROLE`` (before raygate
    ran, or while it was down) holds a floor place."""
    floor = fixed_role_or_floor(pod, view)
    if isinstance(floor, RoleVerdict):
        return floor
    held = places_taken(pod.group_key, view, claimed, pod.uid) + admitted
    return _by_count(pod, held, floor, "released")


def admission_role(pod: PodView, view: ClusterView, taken: int) -> RoleVerdict:
    """The role a new pod is created with: the floor goes to the first pods created in its
    group. ``taken``: the floor places its group's pods hold — those the view shows
    (``places_taken``) and those admitted that it does not show yet. The view can only lag,
    never lead, so a count that misses a pod gives floor, the safe side."""
    floor = fixed_role_or_floor(pod, view)
    if isinstance(floor, RoleVerdict):
        return floor
    return _by_count(pod, taken, floor, "created")


def places_taken(key: GroupKey, view: ClusterView, claimed: Mapping[str, Role] = EMPTY_ROLES,
                 but: str = "") -> int:
    """The floor places the live pods of group ``key`` in ``view`` (but ``but``) hold: a head
    or floor ``LABEL_ROLE``, or none (decided before raygate ran, or without it); or their
    role in ``claimed`` (released, the view not showing it yet). A gated pod holds none
    until it is released."""
    held = 0
    for other in view.group_pods(key):
        if other.uid == but or not _live(other):
            continue
        role = claimed.get(other.uid)
        if role is None:
            if GATE in other.scheduling_gates:
                continue  # not released yet: no place taken
            role = Role.SURPLUS if other.labels.get(LABEL_ROLE) == "surplus" else Role.FLOOR
        held += role is not Role.SURPLUS
    return held


def _by_count(pod: PodView, held: int, floor: int, when: str) -> RoleVerdict:
    group = pod.group_key.group
    if held < floor:
        return RoleVerdict(Role.FLOOR, f"{when} with {held} of group {group}'s "
                           f"{floor} floor places taken")
    return RoleVerdict(Role.SURPLUS, f"group {group}'s {floor} floor places are taken")
