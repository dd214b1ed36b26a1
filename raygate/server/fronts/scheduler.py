"""kube-scheduler extender verbs: bytes in, bytes out, the policy in between.

Each verb decodes the request into slim structs, asks ``raygate.policy`` for the decision and
encodes the reply. The snapshot is read once per request. Errors are raised as
``raygate.contract.errors`` types; the HTTP layer replies to them, the filter's in the
filter's own shape (``_filter_error``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec

from raygate.contract.errors import MissingField
from raygate.policy.classify import gpu_node_reason
from raygate.policy.model import PodView
from raygate.policy.placement import Decision, Placement, filter_names, score
from raygate.policy.victims import Candidate, candidate_of_uids, select_victims
from raygate.process.logs import about
from raygate.server.cache import convert
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.memo import Memo
from raygate.server.cache.snapshot import Snapshot
from raygate.server.controllers.stale_refusals import StaleRefusals
from raygate.server.fronts.decisions import DecisionMemo, count_decision, decide_counted
from raygate.server.http.routes import Route
from raygate.server.metrics.registry import Metrics, VerbMetrics
from raygate.server.wire import decode, kube
from raygate.server.wire import scheduler as wire

__all__ = ["HostPriorities", "SchedulerExtender", "scheduler_routes"]

log = logging.getLogger("raygate.scheduler")

_encode = msgspec.json.encode


def _request_pod(pod: kube.Pod | msgspec.UnsetType | None) -> PodView:
    if not isinstance(pod, kube.Pod):  # absent (UNSET) or null
        raise MissingField("Pod")
    return convert.pod_view(pod, "$.Pod")


class RequestPods:
    """The views of the Pods in filter and prioritize requests, by their exact JSON text.

    kube-scheduler sends one pod to filter, then to prioritize, then again on every retry
    of its cycle: the text is decoded and converted once (about 25 µs of a 500-node
    request) and then found by its bytes. Equal text, equal view: nothing else is
    assumed. The oldest of ``limit`` entries goes first (a pod's calls come together).
    """

    def __init__(self, limit: int = 256) -> None:
        self._views: Memo[bytes, PodView] = Memo(limit)

    @property
    def limit(self) -> int:
        return self._views.limit

    def view(self, raw: msgspec.Raw | msgspec.UnsetType) -> PodView:
        if raw is msgspec.UNSET:
            raise MissingField("Pod")
        text = bytes(raw)
        view = self._views.get(text)
        if view is not None:
            return view
        if text == b"null":
            raise MissingField("Pod")
        # The request holds the Pod raw: the path of what it refuses is put back in the
        # request's.
        view = convert.pod_view(decode(wire.decode_pod, text, at="$.Pod"), "$.Pod")
        return self._views.put(text, view)


class HostPriorities:
    """kube-scheduler's ``HostPriority`` (PascalCase JSON) of each node the cache knows,
    for a managed pod: prioritize joins their bytes. The score depends only on the node's
    class, so the entries are encoded when the cache publishes a snapshot whose classes
    changed (``follow``, a listener of the cache: the publishing thread pays, never a
    request), only for the nodes that did. ``of`` finds them by the snapshot's
    ``node_classes``, which stays the same dict until a node appears, goes or changes
    class; in the moment between a publish and its listener, it derives them for that
    request alone."""

    def __init__(self) -> None:
        # One tuple, replaced whole: a reader in another thread sees a matching pair.
        self._state: tuple[dict[str, bool], dict[str, bytes]] = ({}, {})

    def follow(self, snap: Snapshot) -> None:
        classes = snap.node_classes
        if classes is not self._state[0]:
            self._state = (classes, _entries(self._state, classes))

    def of(self, snap: Snapshot) -> dict[str, bytes]:
        """The entries by node name for ``snap``. Read-only."""
        classes, entries = state = self._state
        if snap.node_classes is classes:
            return entries
        return _entries(state, snap.node_classes)


def _entries(state: tuple[dict[str, bool], dict[str, bytes]],
             classes: dict[str, bool]) -> dict[str, bytes]:
    """The entries of ``classes``, from those of ``state``: set differences of the items,
    so C loops over the nodes and Python encodes only the nodes that changed."""
    known, entries = state[0], dict(state[1])
    for name in known.keys() - classes.keys():
        del entries[name]
    for name, is_gpu in classes.items() - known.items():
        entries[name] = _encode(wire.HostPriority(host=name, score=score(is_gpu)))
    return entries


def _nodes_from_list(
    raw_items: list[msgspec.Raw], snap: Snapshot
) -> list[tuple[msgspec.Raw, str, bool]]:
    """(raw node, name, is GPU) for a NodeList request, classified from the Node objects
    the scheduler sent (in that mode they are the truth, whatever the cache holds) and
    the devices the cache knows on them (``dra_gpu_nodes``: no Node object says)."""
    out = []
    for i, raw in enumerate(raw_items):
        path = f"$.Nodes.items[{i}]"
        node = convert.node_view(decode(kube.NODE.decode, raw, path), path)
        is_gpu = gpu_node_reason(node, snap.config, snap.dra_gpu_nodes) is not None
        out.append((raw, node.name, is_gpu))
    return out


class SchedulerExtender:
    def __init__(self, cache: ClusterCache, clock: Callable[[], float] = time.time,
                 metrics: Metrics | None = None, *,
                 stale_refusals: StaleRefusals | None = None) -> None:
        """``stale_refusals``: where filter notes the pods it refuses GPU nodes to, when
        the server may ask kube-scheduler to try them again."""
        self.cache = cache
        self.clock = clock
        self.request_pods = RequestPods()
        self.decisions = DecisionMemo()
        self.host_priorities = HostPriorities()
        self.host_priorities.follow(cache.snapshot)
        cache.add_listener(self.host_priorities.follow)
        self.stale_refusals = stale_refusals
        metrics = metrics or Metrics()
        self._filter_metrics = metrics.verb("scheduler/filter")
        self._prioritize_metrics = metrics.verb("scheduler/prioritize")
        self._preempt_metrics = metrics.verb("scheduler/preempt")
        reuse = metrics.decision_reuse
        self._reuse = {verb: (reuse.labels(f"scheduler/{verb}", "hit"),
                              reuse.labels(f"scheduler/{verb}", "miss"))
                       for verb in ("filter", "prioritize")}

    def _decide(self, pod: PodView, snap: Snapshot, verb: str,
                metrics: VerbMetrics) -> Decision:
        """The decision for ``pod`` on ``snap``: the one already made for them (filter's,
        for the prioritize that follows it) when the memo has it, else a new one."""
        hits, misses = self._reuse[verb]
        decision = self.decisions.get(pod, snap)
        if decision is not None:
            hits.inc()
            count_decision(decision, pod, verb=verb, metrics=metrics, log=log)
            return decision
        misses.inc()
        decision = decide_counted(pod, snap, self.clock(), verb=verb, metrics=metrics, log=log)
        self.decisions.put(pod, snap, decision)
        return decision

    def filter(self, body: bytes) -> bytes:
        args = decode(wire.decode_filter_args, body)
        pod = self.request_pods.view(args.pod)
        snap = self.cache.snapshot
        decision = self._decide(pod, snap, "filter", self._filter_metrics)
        names = args.node_names
        if isinstance(names, list):
            passed, failed = filter_names(decision, names, snap.gpu_node_names)
            if failed:
                self._refused(pod, decision, len(failed))
            return _encode(
                wire.FilterResult(node_names=passed, failed_and_unresolvable_nodes=failed))
        if isinstance(args.nodes, wire.NodeListRaw):
            items = args.nodes.items or []
            refusal = decision.refusal(node_is_gpu=True)  # a CPU node always passes
            if refusal is None:
                return _encode(wire.FilterResult(nodes=wire.NodeListOut(items=items)))
            kept: list[msgspec.Raw] = []
            failed = {}
            for raw, name, is_gpu in _nodes_from_list(items, snap):
                if is_gpu:
                    failed[name] = refusal
                else:
                    kept.append(raw)
            if failed:
                self._refused(pod, decision, len(failed))
            return _encode(wire.FilterResult(
                nodes=wire.NodeListOut(items=kept), failed_and_unresolvable_nodes=failed))
        # Neither names nor nodes: there is nothing to filter; answer with no nodes.
        return _encode(wire.FilterResult(node_names=[]))

    def _refused(self, pod: PodView, decision: Decision, nodes: int) -> None:
        self._filter_metrics.refused[decision.rule].inc(nodes)
        if self.stale_refusals is not None:
            self.stale_refusals.note(pod, decision)

    def prioritize(self, body: bytes) -> bytes:
        args = decode(wire.decode_filter_args, body)
        pod = self.request_pods.view(args.pod)
        snap = self.cache.snapshot
        decision = self._decide(pod, snap, "prioritize", self._prioritize_metrics)
        if decision.placement is Placement.UNMANAGED:
            return b"[]"
        names = args.node_names
        if isinstance(names, list):
            # Nodes the cache has never seen get no entry: no opinion, their in-tree
            # scores stand.
            # C-level: entries are non-empty bytes, so filter(None) drops just the unknown.
            known = self.host_priorities.of(snap)
            entries = list(filter(None, map(known.get, names)))
            if len(entries) < len(names):
                self._prioritize_metrics.unknown_nodes.inc(len(names) - len(entries))
            return b"[" + b",".join(entries) + b"]"
        if isinstance(args.nodes, wire.NodeListRaw):
            return _encode([
                wire.HostPriority(host=name, score=score(is_gpu))
                for _, name, is_gpu in _nodes_from_list(args.nodes.items or [], snap)
            ])
        return b"[]"

    def preempt(self, body: bytes) -> bytes:
        args = decode(wire.decode_preempt_args, body)
        preemptor = _request_pod(args.pod)
        snap = self.cache.snapshot
        candidates = self._candidates(args, snap)
        metrics = self._preempt_metrics
        unknown = sum(len(c.unknown_uids) for c in candidates)
        if unknown:
            metrics.unknown_victims.inc(unknown)
        # The preemptor's placement, as filter decides it: preempt drops the nodes filter
        # would refuse it, so no pod is evicted for room the preemptor may not use.
        decision = decide_counted(preemptor, snap, self.clock(), verb="preempt",
                                  metrics=metrics, log=log)
        outcomes = select_victims(preemptor, candidates, snap, decision)
        result: dict[str, wire.MetaVictims] = {}
        for outcome in outcomes:
            if outcome.removed or outcome.substituted or outcome.dropped:
                # The rare branch: raygate changed the scheduler's proposal.
                if outcome.removed:
                    metrics.victims_removed.inc(len(outcome.removed))
                if outcome.substituted:
                    metrics.victims_substituted.inc(len(outcome.substituted))
                if outcome.dropped:
                    metrics.nodes_dropped.inc()
                if outcome.refused:
                    metrics.refused[decision.rule].inc()
                log.info(
                    "preempt %s on %s: protected %s, substituted %s%s",
                    preemptor.ref, outcome.node_name,
                    [f"{ref} ({why})" for ref, why in outcome.removed] or "none",
                    outcome.substituted or "none",
                    f", node dropped: {outcome.dropped}" if outcome.dropped else "",
                    extra=about(namespace=preemptor.namespace, pod=preemptor.name,
                                raycluster=preemptor.ray_cluster, verb="scheduler/preempt"),
                )
            if outcome.dropped or not outcome.victims:
                continue
            result[outcome.node_name] = wire.MetaVictims(
                pods=[wire.MetaPod(uid=uid) for uid in outcome.victims],
                num_pdb_violations=outcome.num_pdb_violations,
            )
        return _encode(wire.PreemptResult(node_name_to_meta_victims=result))

    def _candidates(self, args: wire.PreemptArgs, snap: Snapshot) -> list[Candidate]:
        candidates: list[Candidate] = []
        meta = args.node_name_to_meta_victims
        full = args.node_name_to_victims
        if isinstance(meta, dict):
            for node_name, victims in meta.items():
                uids = [p.uid for p in (victims.pods if victims else None) or ()]
                candidates.append(candidate_of_uids(
                    node_name, uids, victims.num_pdb_violations if victims else 0, snap))
        elif isinstance(full, dict):
            for node_name, full_victims in full.items():
                pods = (full_victims.pods if full_victims else None) or ()
                views = []
                for i, victim in enumerate(pods):
                    path = f"$.NodeNameToVictims.{node_name}.Pods[{i}]"
                    views.append(convert.pod_view(victim, path))
                candidates.append(Candidate(
                    node_name, tuple(views), (),
                    full_victims.num_pdb_violations if full_victims else 0))
        return candidates


def _filter_error(message: str) -> bytes:
    """An error in the filter's own reply: ``ExtenderFilterResult.Error`` in a 200 (with
    ``ignorable: true`` kube-scheduler then skips raygate for that pod: fail open).
    Prioritize and preempt have no such field: their errors are raygate's own non-200,
    which kube-scheduler treats as "no opinion" (prioritize) or, for an ignorable
    extender, skips (preempt)."""
    return _encode(wire.FilterResult(error=message))


def scheduler_routes(scheduler: SchedulerExtender) -> dict[str, Route]:
    """kube-scheduler's extender verbs under ``/scheduler/``."""
    return {
        "/scheduler/filter": Route(b"POST", scheduler.filter, _filter_error),
        "/scheduler/prioritize": Route(b"POST", scheduler.prioritize),
        "/scheduler/preempt": Route(b"POST", scheduler.preempt),
    }
