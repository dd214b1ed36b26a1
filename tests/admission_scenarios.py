"""Snapshot fixtures of the admission-status tests: builders of PodGroups and Kueue
Workloads beside ``testkit.builders``, and one named scenario per situation the API must
explain (each a list of objects as ``kubectl get -o json`` prints them).

Times are relative to ``T0_EPOCH``, the tests' fake "now".
"""

from __future__ import annotations

import copy
from typing import Self

from raygate.policy.native import GATE
from testkit.builders import (
    T0_EPOCH,
    Obj,
    iso,
    make_event,
    make_node,
    make_nodeclaim,
    make_pod,
    make_raycluster,
    uid_for,
)

# kube-scheduler's and Volcano's words.
INSUFFICIENT_CPU = "0/5 nodes are available: 5 Insufficient cpu."
MIXED_GPU = ("0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) didn't match "
             "Pod's node affinity/selector. preemption: 0/6 nodes are available: 2 No "
             "preemption victims found for incoming pod, 4 Preemption is not helpful for "
             "scheduling.")
AFFINITY = "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector."
TAINT_OLD = ("0/3 nodes are available: 3 node(s) had taint {nvidia.com/gpu: present}, that "
             "the pod didn't tolerate.")
TAINT_KEYED = "0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: true}."
TAINT_GENERIC = "0/3 nodes are available: 3 node(s) had untolerated taint(s)."
VOLCANO_GANG = "pod group is not ready, 3 Pending, 3 minAvailable; Pending: 3 Undetermined"
VOLCANO_ALLOCATED = ("Pod ray/x can possibly be assigned to cpu-node-1, once minAvailable is "
                     "satisfied")
VOLCANO_PIPELINED = ("Pod ray/x can possibly be assigned to cpu-node-1, once resource is "
                     "released and minAvailable is satisfied")
CORDONED = "0/3 nodes are available: 3 node(s) were unschedulable."
# The node autoscalers' words: Karpenter v1.15 (scheduling/events.go, scheduler.go,
# nodeclaim.go), Cluster Autoscaler (processors/status/eventing_scale_up_processor.go).
NOMINATED_CLAIM = "Pod should schedule on: nodeclaim/default-x7k2p"
KARPENTER_NO_FIT = ("Failed to schedule pod, incompatible requirements, key "
                    "nvidia.com/gpu.present, nvidia.com/gpu.present NotIn [true] not in "
                    "nvidia.com/gpu.present In [true]; no instance type has enough resources, "
                    'requirements=karpenter.sh/nodepool In [default], resources={"cpu":"100"}')
CA_TRIGGERED = "pod triggered scale-up: [{cpu-pool 0->1 (max: 10)}]"
CA_NOT_TRIGGERED = ("pod didn't trigger scale-up: 2 Insufficient cpu, 1 node(s) didn't "
                    "match Pod's node affinity/selector")
NO_NODES = "0/0 nodes are available: no nodes available to schedule pods."


def at(seconds: float) -> str:
    """T0 plus ``seconds`` as RFC 3339."""
    return iso(T0_EPOCH + seconds)


class PodGroupBuilder:
    def __init__(self, name: str, namespace: str) -> None:
        self._obj: Obj = {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": uid_for("PodGroup", namespace, name)},
            "spec": {"minMember": 1, "queue": "default"},
            "status": {"phase": "Pending"},
        }

    def owned_by(self, cluster: str) -> Self:
        ns = self._obj["metadata"]["namespace"]
        self._obj["metadata"]["ownerReferences"] = [{
            "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster,
            "uid": uid_for("RayCluster", ns, cluster), "controller": True}]
        return self

    def phase(self, phase: str) -> Self:
        self._obj["status"]["phase"] = phase
        return self

    def min_member(self, n: int) -> Self:
        self._obj["spec"]["minMember"] = n
        return self

    def condition(self, type_: str, status: str, reason: str = "", message: str = "",
                  when: str | None = None) -> Self:
        self._obj["status"].setdefault("conditions", []).append({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": when or at(0)})
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)


class WorkloadBuilder:
    def __init__(self, name: str, namespace: str) -> None:
        self._obj: Obj = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": uid_for("Workload", namespace, name)},
            "spec": {"queueName": "user-queue"},
            "status": {},
        }

    def owned_by(self, owner: str, kind: str = "RayCluster") -> Self:
        ns = self._obj["metadata"]["namespace"]
        self._obj["metadata"]["ownerReferences"] = [{
            "apiVersion": "ray.io/v1", "kind": kind, "name": owner,
            "uid": uid_for(kind, ns, owner), "controller": True}]
        return self

    def condition(self, type_: str, status: str, reason: str = "", message: str = "",
                  when: str | None = None) -> Self:
        self._obj["status"].setdefault("conditions", []).append({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": when or at(0)})
        return self

    def replaces(self, old: str) -> Self:
        """A new elastic slice: Kueue's annotations for the slice it replaces (in the
        same namespace, the chain named after its first slice)."""
        meta = self._obj["metadata"]
        meta["annotations"] = {
            "kueue.x-k8s.io/workload-slice-replacement-for": f"{meta['namespace']}/{old}",
            "kueue.x-k8s.io/workload-slice-name": old}
        return self

    def admitted(self) -> Self:
        return (self.condition("QuotaReserved", "True", "QuotaReserved",
                               "Quota reserved in ClusterQueue cluster-queue")
                .condition("Admitted", "True", "Admitted", "The workload is admitted"))

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)


def make_podgroup(name: str, namespace: str = "ray") -> PodGroupBuilder:
    return PodGroupBuilder(name, namespace)


def make_workload(name: str, namespace: str = "ray") -> WorkloadBuilder:
    return WorkloadBuilder(name, namespace)


def unschedulable(message: str, when: float = -30) -> tuple[str, str, str, str, str]:
    """PodScheduled=False, reason Unschedulable, as ``PodBuilder.condition`` takes it."""
    return ("PodScheduled", "False", "Unschedulable", message, at(when))


def running(name: str, cluster: str, group: str, node: str = "cpu-node-1") -> Obj:
    """A pod that runs: bound, phase Running, Ready."""
    builder = make_pod(name).ray(cluster, group) if group != "headgroup" else (
        make_pod(name).head(cluster))
    return (builder.created(at(-3600)).on(node)
            .condition("PodScheduled", "True", at=at(-3599))
            .condition("Ready", "True", at=at(-3500)).obj())


def nominated(obj: Obj, node: str) -> Obj:
    obj["status"]["nominatedNodeName"] = node
    return obj


# --- the scenarios ----------------------------------------------------------------------


def inqueue_gang() -> list[Obj]:
    """Volcano holds the gang in its queue: no pod is bound, one waits for an hour."""
    return [
        make_raycluster("queued").group("workers", replicas=2, min=1, max=4).obj(),
        make_podgroup("ray-queued-pg").owned_by("queued").phase("Inqueue").min_member(3).obj(),
        make_pod("queued-head").head("queued").created(at(-3600)).obj(),
        make_pod("queued-w1").ray("queued", "workers").created(at(-60)).obj(),
        make_pod("queued-w2").ray("queued", "workers").created(at(-60))
        .condition("PodScheduled", "False", "Unschedulable", VOLCANO_GANG, at(-55)).obj(),
    ]


def waiting_for_capacity() -> list[Obj]:
    """The gang runs; one overflow worker waits for CPU, another for a preemption under
    way (nominated node), a third was allocated by Volcano but waits for the gang."""
    return [
        make_raycluster("demo").autoscaling().group("baseline", replicas=1, min=1, max=1)
        .group("overflow", replicas=3, min=0, max=5).obj(),
        make_podgroup("ray-demo-pg").owned_by("demo").phase("Running").min_member(2).obj(),
        running("demo-head", "demo", "headgroup"),
        running("demo-baseline-1", "demo", "baseline"),
        make_pod("demo-overflow-1").ray("demo", "overflow").created(at(-120))
        .condition(*unschedulable(INSUFFICIENT_CPU, -119)).obj(),
        nominated(make_pod("demo-overflow-2").ray("demo", "overflow").created(at(-60))
                  .condition(*unschedulable(VOLCANO_PIPELINED, -59)).obj(), "cpu-node-2"),
        make_pod("demo-overflow-3").ray("demo", "overflow").created(at(-60))
        .condition("PodScheduled", "False", "Schedulable", VOLCANO_ALLOCATED, at(-59)).obj(),
    ]


def preempted() -> list[Obj]:
    """The scheduler preempted an overflow worker on a GPU node ten seconds ago; its
    replacement waits for capacity."""
    return [
        make_raycluster("demo").autoscaling().group("baseline", replicas=1, min=1, max=1)
        .group("overflow", replicas=2, min=0, max=5).obj(),
        make_podgroup("ray-demo-pg").owned_by("demo").phase("Running").min_member(2).obj(),
        running("demo-head", "demo", "headgroup"),
        running("demo-baseline-1", "demo", "baseline"),
        make_pod("demo-overflow-old").ray("demo", "overflow").created(at(-3600))
        .on("gpu-node-1").condition("Ready", "True", at=at(-3500)).preempted(at(-10)).obj(),
        make_pod("demo-overflow-new").ray("demo", "overflow").created(at(-5))
        .condition(*unschedulable(MIXED_GPU, -4)).obj(),
    ]


def stuck() -> list[Obj]:
    """No gang; nothing explains why one pod is unbound for five minutes, nor why another
    is bound but not ready for twenty; a third was created a minute ago."""
    return [
        make_raycluster("lonely").group("workers", replicas=3, min=3, max=3).obj(),
        running("lonely-head", "lonely", "headgroup"),
        make_pod("lonely-unbound").ray("lonely", "workers").created(at(-300)).obj(),
        make_pod("lonely-pulling").ray("lonely", "workers").created(at(-1300)).on("cpu-node-2")
        .phase("Pending").condition("PodScheduled", "True", at=at(-1200))
        .condition("Ready", "False", "ContainersNotReady", at=at(-1200)).obj(),
        make_pod("lonely-new").ray("lonely", "workers").created(at(-60)).obj(),
    ]


def kueue_admitted() -> list[Obj]:
    """Kueue admitted the RayCluster; one worker is still starting on its node."""
    return [
        make_raycluster("kq").group("workers", replicas=2, min=2, max=2).obj(),
        make_workload("raycluster-kq-1a2b3").owned_by("kq").admitted().obj(),
        running("kq-head", "kq", "headgroup"),
        running("kq-w1", "kq", "workers"),
        make_pod("kq-w2").ray("kq", "workers").created(at(-20)).on("cpu-node-3")
        .condition("PodScheduled", "True", at=at(-15))
        .condition("Ready", "False", "ContainersNotReady", at=at(-15)).obj(),
    ]


def kueue_waiting() -> list[Obj]:
    """Kueue has not reserved quota (reason ``Pending``, Kueue 0.17's own message); the
    elastic RayCluster's pod waits behind Kueue's ``kueue.x-k8s.io/elastic-job`` gate."""
    return [
        make_raycluster("kw").group("workers", replicas=1, min=1, max=1).obj(),
        make_workload("raycluster-kw-9f8e7").owned_by("kw")
        .condition("QuotaReserved", "False", "Pending",
                   "couldn't assign flavors to pod set workers: insufficient unused quota "
                   "for cpu in flavor default-flavor, 2 more needed").obj(),
        make_pod("kw-head").head("kw").created(at(-30)).gated("kueue.x-k8s.io/elastic-job")
        .condition("PodScheduled", "False", "SchedulingGated",
                   "Scheduling is blocked due to non-empty scheduling gates", at(-30)).obj(),
        # raygate's own placement gate, alone: raygate is writing its rule into the pod.
        make_pod("kw-w1").ray("kw", "workers").created(at(-1)).gated(GATE)
        .condition("PodScheduled", "False", "SchedulingGated",
                   "Scheduling is blocked due to non-empty scheduling gates", at(-1)).obj(),
        # Another controller's gate: an admission raygate does not read.
        make_pod("kw-w2").ray("kw", "workers").created(at(-30)).gated("example.com/quota")
        .condition("PodScheduled", "False", "SchedulingGated",
                   "Scheduling is blocked due to non-empty scheduling gates", at(-30)).obj(),
    ]


def no_gang() -> list[Obj]:
    """No PodGroup, no Workload: pods refused by affinity and by taints (all three
    spellings), one evicted by a node drain, one refused for an unknown reason."""
    return [
        make_raycluster("plain").group("workers", replicas=6, min=6, max=6).obj(),
        running("plain-head", "plain", "headgroup"),
        make_pod("plain-affinity").ray("plain", "workers")
        .condition(*unschedulable(AFFINITY)).obj(),
        make_pod("plain-taint-old").ray("plain", "workers")
        .condition(*unschedulable(TAINT_OLD)).obj(),
        make_pod("plain-taint-keyed").ray("plain", "workers")
        .condition(*unschedulable(TAINT_KEYED)).obj(),
        make_pod("plain-taint-generic").ray("plain", "workers")
        .condition(*unschedulable(TAINT_GENERIC)).obj(),
        make_pod("plain-drained").ray("plain", "workers").on("cpu-node-1")
        .condition("DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting",
                   at(-40)).terminating(at(-40)).obj(),
        make_pod("plain-cordoned").ray("plain", "workers")
        .condition(*unschedulable(CORDONED)).obj(),
    ]


def node_autoscaler() -> list[Obj]:
    """Karpenter and Cluster Autoscaler events on pods kube-scheduler refused: a node
    coming, none coming, the stranded floor worker, and events that no longer count."""
    def pending(name: str, group: str, message: str = INSUFFICIENT_CPU) -> Obj:
        return make_pod(name).ray("auto", group).condition(*unschedulable(message)).obj()

    pods = {n: pending(n, g) for n, g in (
        ("auto-launching", "karp"), ("auto-claim-gone", "karp"), ("auto-stale", "karp"),
        ("auto-not-karpenter", "karp"), ("auto-no-pool", "nopool"), ("auto-ca-up", "ca"),
        ("auto-ca-no", "cano"))}
    pods["auto-stranded"] = pending("auto-stranded", "floor", NO_NODES)
    return [
        make_raycluster("auto").group("karp", max=10).group("nopool", max=10)
        .group("ca", max=10).group("cano", max=10).group("floor", replicas=1, min=1, max=1)
        .obj(),
        running("auto-head", "auto", "headgroup"), *pods.values(),
        make_node("gpu-1").gpus(1).obj(),
        make_nodeclaim("default-x7k2p"), make_nodeclaim("gpu-c1", "gpu-1"),
        make_event(pods["auto-launching"], "Nominated", NOMINATED_CLAIM, at=at(-20)),
        make_event(pods["auto-claim-gone"], "Nominated",
                   "Pod should schedule on: nodeclaim/default-gone", at=at(-20)),
        make_event(pods["auto-stale"], "Nominated", NOMINATED_CLAIM, at=at(-31)),
        make_event(pods["auto-not-karpenter"], "FailedScheduling", INSUFFICIENT_CPU,
                   at=at(-20), component="default-scheduler"),
        make_event(pods["auto-no-pool"], "FailedScheduling", KARPENTER_NO_FIT, at=at(-20)),
        make_event(pods["auto-ca-up"], "TriggeredScaleUp", CA_TRIGGERED, at=at(-20),
                   component="cluster-autoscaler"),
        make_event(pods["auto-ca-no"], "NotTriggerScaleUp", CA_NOT_TRIGGERED, at=at(-20),
                   component="cluster-autoscaler"),
        make_event(pods["auto-stranded"], "Nominated",
                   "Pod should schedule on: nodeclaim/gpu-c1", at=at(-20)),
    ]


SCENARIOS = {
    "inqueue-gang": inqueue_gang,
    "waiting-for-capacity": waiting_for_capacity,
    "preempted": preempted,
    "stuck": stuck,
    "kueue-admitted": kueue_admitted,
    "kueue-waiting": kueue_waiting,
    "no-gang": no_gang,
    "node-autoscaler": node_autoscaler,
}
"""Every scenario by name."""

CLUSTERS = {"inqueue-gang": "queued", "waiting-for-capacity": "demo", "preempted": "demo",
            "stuck": "lonely", "kueue-admitted": "kq", "kueue-waiting": "kw",
            "no-gang": "plain", "node-autoscaler": "auto"}

EXPECTED_PODS: list[tuple[str, str, str, str, str]] = [
    # (scenario, pod, state, the POD_RULES row that decides it, advice)
    ("inqueue-gang", "queued-head", "WaitingForGangAdmission", "gang-not-admitted",
     "keep"),
    ("inqueue-gang", "queued-w1", "WaitingForGangAdmission", "gang-not-admitted",
     "keep"),
    ("inqueue-gang", "queued-w2", "WaitingForGangAdmission",
     "gang-waiting-for-members", "keep"),
    ("waiting-for-capacity", "demo-overflow-1", "WaitingForCapacity",
     "insufficient-resources", "keep"),
    ("waiting-for-capacity", "demo-overflow-2", "WaitingForCapacity", "nominated-node",
     "keep"),
    ("waiting-for-capacity", "demo-overflow-3", "WaitingForGangAdmission",
     "gang-waiting-for-members", "keep"),
    ("preempted", "demo-overflow-old", "Preempted", "preempted-by-scheduler",
     "keep"),
    ("preempted", "demo-overflow-new", "WaitingForCapacity", "insufficient-resources",
     "keep"),
    ("stuck", "lonely-unbound", "Stuck", "no-verdict-too-long", "replace"),
    ("stuck", "lonely-pulling", "Stuck", "bound-not-started-too-long", "replace"),
    ("stuck", "lonely-new", "Starting", "awaiting-scheduler", "keep"),
    ("kueue-admitted", "kq-w2", "Starting", "bound-starting", "keep"),
    ("kueue-waiting", "kw-head", "WaitingForGangAdmission", "kueue-slice-gated",
     "keep"),
    ("kueue-waiting", "kw-w1", "Starting", "placement-gated", "keep"),
    ("kueue-waiting", "kw-w2", "WaitingForGangAdmission", "scheduling-gated", "keep"),
    ("no-gang", "plain-affinity", "Unschedulable", "constraints", "keep"),
    ("no-gang", "plain-taint-old", "Unschedulable", "constraints", "keep"),
    ("no-gang", "plain-taint-keyed", "Unschedulable", "constraints", "keep"),
    ("no-gang", "plain-taint-generic", "Unschedulable", "constraints", "keep"),
    ("no-gang", "plain-drained", "Evicted", "disruption-target", "replace"),
    ("no-gang", "plain-cordoned", "Unschedulable", "unschedulable-other", "keep"),
    ("node-autoscaler", "auto-launching", "NodeProvisioning", "node-coming", "keep"),
    ("node-autoscaler", "auto-claim-gone", "WaitingForCapacity", "insufficient-resources",
     "keep"),
    ("node-autoscaler", "auto-stale", "WaitingForCapacity", "insufficient-resources", "keep"),
    ("node-autoscaler", "auto-not-karpenter", "WaitingForCapacity", "insufficient-resources",
     "keep"),
    ("node-autoscaler", "auto-no-pool", "NoNodeComing", "no-node-coming", "keep"),
    ("node-autoscaler", "auto-ca-up", "NodeProvisioning", "node-coming", "keep"),
    ("node-autoscaler", "auto-ca-no", "NoNodeComing", "no-node-coming", "keep"),
    ("node-autoscaler", "auto-stranded", "NoNodeComing", "no-node-coming", "keep"),
]
