"""Volcano ``raygate.server`` plugin verbs: bytes in, bytes out, the policy in between.

The same rules as the kube-scheduler extender, in Volcano's shapes: ``predicate`` is one
call per (task, node) — up to 16 in parallel — so it reads only the task's Pod and the
node's name (the node's own object only when the cache does not know it); ``prioritize``
answers floats; ``preemptable``/``reclaimable`` echo the evictees that may go unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import msgspec

from raygate.contract.errors import MissingField
from raygate.policy.classify import gpu_node_reason
from raygate.policy.model import PodView
from raygate.policy.placement import Decision, Placement, volcano_score
from raygate.policy.victims import volcano_victims
from raygate.process.logs import about
from raygate.server.cache import convert
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Snapshot
from raygate.server.fronts.decisions import decide_counted
from raygate.server.http.routes import Gate, Route
from raygate.server.metrics.registry import Metrics, VerbMetrics
from raygate.server.wire import decode, kube
from raygate.server.wire import volcano as wire

__all__ = ["VolcanoExtender", "volcano_routes"]

log = logging.getLogger("raygate.volcano")

_encode = msgspec.json.encode

UNSCHEDULABLE_AND_UNRESOLVABLE = 3  # api.UnschedulableAndUnresolvable
PASS = _encode(wire.PredicateResponse())
EMPTY_SCORES = _encode(wire.PrioritizeResponse())
ABSTAIN = _encode(wire.VoteResponse(status=0))
VETO = _encode(wire.VictimsResponse(status=-1, victims=[]))


def _task_pod(task: wire.TaskInfo | msgspec.UnsetType | None, key: str) -> PodView:
    """The task's Pod as a policy view; the TaskInfo's NodeName fills in a Pod not yet
    bound in its own spec (Volcano places tasks in-session before binding them)."""
    if not isinstance(task, wire.TaskInfo):
        raise MissingField(key)
    if task.pod is None:
        raise MissingField(f"{key}.Pod")
    pod = convert.pod_view(task.pod, f"$.{key}.Pod")
    if task.node_name and not pod.node_name:
        pod = dataclasses.replace(pod, node_name=task.node_name)
    return pod


class VolcanoExtender:
    def __init__(self, cache: ClusterCache, clock: Callable[[], float] = time.time,
                 metrics: Metrics | None = None) -> None:
        self.cache = cache
        self.clock = clock
        metrics = metrics or Metrics()
        self._predicate_metrics = metrics.verb("volcano/predicate")
        self._prioritize_metrics = metrics.verb("volcano/prioritize")
        self._victims_metrics = metrics.verb("volcano/victims")

    def _decide(self, pod: PodView, snap: Snapshot, verb: str,
                metrics: VerbMetrics) -> Decision:
        return decide_counted(pod, snap, self.clock(), verb=verb, metrics=metrics, log=log)

    def _is_gpu(self, node: wire.NodeInfo, snap: Snapshot, path: str,
                metrics: VerbMetrics) -> bool:
        known = snap.is_gpu_node(node.name)
        if known is not None:
            return known
        if bytes(node.node) == b"null":
            # Nothing to classify: fail open, the node passes. Rare (Volcano sends the
            # Node), so counting here costs the common path nothing.
            metrics.unknown_nodes.inc()
            return False
        view = convert.node_view(decode(kube.NODE.decode, node.node, f"{path}.Node"),
                                 f"{path}.Node")
        return gpu_node_reason(view, snap.config, snap.dra_gpu_nodes) is not None

    def session(self, _: bytes) -> bytes:
        """onSessionOpen/onSessionClose: Volcano never reads the reply; raygate's own
        cache is the source of truth, so the (possibly tens of MB) snapshot is not
        decoded."""
        return b"{}"

    def predicate(self, body: bytes) -> bytes:
        request = decode(wire.PREDICATE_REQUEST.decode, body, "predicate request")
        pod = _task_pod(request.task, "task")
        if not isinstance(request.node, wire.NodeInfo):
            raise MissingField("node")
        snap = self.cache.snapshot
        metrics = self._predicate_metrics
        decision = self._decide(pod, snap, "predicate", metrics)
        if not decision.refuses_gpu_nodes:
            return PASS  # the node's resources are not even read
        refusal = decision.refusal(self._is_gpu(request.node, snap, "$.node", metrics))
        if refusal is None:
            return PASS
        metrics.refused[decision.rule].inc()
        return _encode(wire.PredicateResponse(status=refusal, code=UNSCHEDULABLE_AND_UNRESOLVABLE))

    def prioritize(self, body: bytes) -> bytes:
        request = decode(wire.PRIORITIZE_REQUEST.decode, body, "prioritize request")
        pod = _task_pod(request.task, "task")
        snap = self.cache.snapshot
        metrics = self._prioritize_metrics
        decision = self._decide(pod, snap, "prioritize", metrics)
        if decision.placement is Placement.UNMANAGED or not request.nodes:
            return EMPTY_SCORES
        scores = {
            node.name: volcano_score(self._is_gpu(node, snap, f"$.nodes[{i}]", metrics),
                                     snap.config)
            for i, node in enumerate(request.nodes)
        }
        return _encode(wire.PrioritizeResponse(node_score=scores))

    def victims(self, body: bytes) -> bytes:
        """preemptable and reclaimable: the same request, the same rules."""
        request = decode(wire.VICTIMS_REQUEST.decode, body, "preemptable request")
        evictor = _task_pod(request.evictor, "evictor")
        raw_evictees = request.evictees if isinstance(request.evictees, list) else []
        evictees: list[PodView] = []
        for i, raw in enumerate(raw_evictees):
            task = decode(wire.TASK_INFO.decode, raw, f"$.evictees[{i}]")
            evictees.append(_task_pod(task, f"evictees[{i}]"))
        snap = self.cache.snapshot
        # The evictor's placement, as predicate decides it: no evictee goes from a node
        # the predicate refuses the evictor.
        decision = self._decide(evictor, snap, "victims", self._victims_metrics)
        vote = volcano_victims(evictor, evictees, snap, decision)
        if vote.removed:
            self._victims_metrics.victims_removed.inc(len(vote.removed))
            log.info("preemptable %s: protected %s", evictor.ref,
                     [f"{ref} ({why})" for ref, why in vote.removed],
                     extra=about(namespace=evictor.namespace, pod=evictor.name,
                                 raycluster=evictor.ray_cluster, verb="volcano/victims"))
        if vote.vote == 0:
            return ABSTAIN
        return _encode(wire.VictimsResponse(
            status=vote.vote, victims=[raw_evictees[i] for i in vote.keep]))

    def job_enqueueable(self, body: bytes) -> bytes:
        """Abstains; the JobInfo is parsed and logged for a later opt-in all-or-nothing
        overflow scale-up."""
        request = decode(wire.JOB_ENQUEUEABLE_REQUEST.decode, body, "jobEnqueueable request")
        if isinstance(request.job, wire.JobInfo) and log.isEnabledFor(logging.DEBUG):
            job = request.job
            log.debug("jobEnqueueable %s/%s queue=%s minAvailable=%d: abstain",
                      job.namespace, job.name, job.queue, job.min_available,
                      extra=about(namespace=job.namespace, verb="volcano/jobEnqueueable"))
        return ABSTAIN


# Each verb's errors in its own reply (a 200: Volcano reads no body of another status).


def _predicate_error(message: str) -> bytes:
    """Error (1): the node fails with the message as its reason, visible in the pod's
    events; Volcano's preempt also leaves such nodes alone."""
    return _encode(wire.PredicateResponse(status=message, code=1))


def _prioritize_error(message: str) -> bytes:
    """Volcano chooses no node from this candidate group, and logs the message."""
    return _encode(wire.PrioritizeResponse(error_message=message))


def _victims_error(message: str) -> bytes:
    """A reject vote with no victims: raygate cannot tell whether floor pods are among the
    evictees, so it vetoes (the safe side)."""
    return VETO


def _vote_error(message: str) -> bytes:
    """jobEnqueueable: abstain, as raygate always does."""
    return ABSTAIN


def volcano_routes(
    volcano: VolcanoExtender, predicate_gate: Gate | None = None,
) -> dict[str, Route]:
    """Volcano's extender plugin verbs under ``/volcano/``, named as the verbs in
    deploy/volcano's volcano-scheduler.conf. ``predicate_gate`` bounds the predicate calls
    in flight: Volcano makes one per (task, node)."""
    return {
        "/volcano/onSessionOpen": Route(b"POST", volcano.session, discard_body=True),
        "/volcano/onSessionClose": Route(b"POST", volcano.session, discard_body=True),
        "/volcano/predicate": Route(b"POST", volcano.predicate, _predicate_error,
                                    gate=predicate_gate),
        "/volcano/prioritize": Route(b"POST", volcano.prioritize, _prioritize_error),
        "/volcano/preemptable": Route(b"POST", volcano.victims, _victims_error),
        "/volcano/reclaimable": Route(b"POST", volcano.victims, _victims_error),
        "/volcano/jobEnqueueable": Route(b"POST", volcano.job_enqueueable, _vote_error),
    }
