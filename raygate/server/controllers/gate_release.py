"""The release of gated Ray pods: raygate's placement written into each as node affinity.

raygate's webhook decides each new Ray pod in its admission; it adds the scheduling gate
``raygate.io/placement`` only where the decision has to wait: a worker whose RayCluster
raygate has not seen yet, a surplus worker of an all-or-nothing scale-up, any CPU-only pod
while raygate's cache is loading (``raygate.server.fronts.webhook``). ``GateRelease``
follows the cache: when a gated pod appears, it decides the pod's role and placement
(``policy.native.release_role``, counting the pods admitted but not seen yet too;
``policy.placement.decide``) and sends one JSON Patch that writes the native rule, labels
the pod with its role and rule, and removes the gate (``policy.native.release_patch``).

Why the decision is sound under a burst: KubeRay creates a cluster's pods in one
reconcile, and raygate's pod watch delivers them in the API server's order. A gated pod
in the snapshot means every pod created before it is there too; the pods raygate released
but the snapshot still shows gated are in ``_claims`` until the snapshot catches up. So
the floor places of a group go to the first pods released, once each.

Only the leader acts (``leading``): two replicas would each count the other's releases
late. A release that races another writer fails whole on its ``test`` (422: nothing is
written); one that fails otherwise is tried again after a backoff, never in a loop.

A gated pod whose RayCluster the cache lacks waits up to ``wait_seconds`` (the RayCluster
comes by another watch), then is released as floor, the safe side. A pod whose patch the
API server refuses ``FAIL_OPEN_AFTER`` times is released bare (fail open); one it cannot
be reached for waits for it. raygate down means no
new gates (the webhook's ``failurePolicy: Ignore``) and the gated pods wait for the next
leader: within one lease when a second replica runs.

Decisions run on the server's event loop, as filter does; the patches, blocking calls,
in a small thread pool.

What ``kubectl describe`` shows (``events``, ``controllers.events``): a pod kept waiting
at the gate is told ``Held`` and why, once, and ``Released`` when it goes; a RayCluster
whose all-or-nothing scale-up is held, once complete, is told ``ScaleUpHeld`` and, when it
goes, ``ScaleUpReleased``. A pod released at the first look (the cache was loading when it
was created, or its scale-up went whole after settling) is told nothing: its labels say
how it was decided, and a burst costs no Event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from raygate.policy.model import PodView, RayClusterView, Role
from raygate.policy.native import (
    GATE,
    LABEL_ROLE,
    LABEL_RULE,
    NativeRule,
    native_rule,
    release_patch,
    release_role,
)
from raygate.policy.placement import decide
from raygate.policy.scale_up import KUEUE_GATE, gated_pods, scale_up_batch
from raygate.process.logs import about
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.snapshot import Snapshot
from raygate.server.controllers.admitted_pods import AdmittedPods
from raygate.server.controllers.events import EventRecorder, Reason, Regarding
from raygate.server.controllers.follow import OnLoop
from raygate.server.controllers.reconcile import Retries
from raygate.server.kube.transport import ApiError, BackoffPolicy
from raygate.server.metrics.registry import Metrics

__all__ = ["GateRelease", "PatchPod"]

log = logging.getLogger("raygate.native")

PatchPod = Callable[[str, str, list[dict[str, object]]], None]
"""``(namespace, name, json_patch)``: apply it to that pod, or raise."""

_ClusterKey = tuple[str, str]
FAIL_OPEN_AFTER = 3
"""Refused releases of a pod after which it is released without a rule (fail open): the
API server's refusals of the patch itself (400, 422: invalid, or an admission plugin
objects). One that cannot be reached, or answers 5xx, 429 or a 403 while a restarted one
fills its authorization cache, is waited for, never a reason to drop the rule (a 403 that
lasts would refuse a bare release as well)."""
MAX_RETRY_SECONDS = 30.0
REFUSALS = frozenset({400, 422})
"""The API server's answers that say the patch itself will not do."""
FAILED_OPEN = "failed-open"
"""The ``raygate.io/rule`` of a pod released without raygate's rule."""


@dataclass(slots=True)
class _Claim:
    role: Role
    sent_at: float


class GateRelease(OnLoop):
    def __init__(self, cache: ClusterCache, clock: Callable[[], float], patch: PatchPod,
                 metrics: Metrics, *, leading: Callable[[], bool] = lambda: True,
                 wait_seconds: float = 10.0, retry_seconds: float = 1.0,
                 tick_seconds: float = 1.0, workers: int = 8,
                 admitted: AdmittedPods | None = None,
                 events: EventRecorder | None = None) -> None:
        super().__init__(cache, at_start=True, workers=workers, name="raygate-native")
        self.clock = clock
        self.patch = patch
        self.metrics = metrics
        self.leading = leading
        self.wait_seconds = wait_seconds
        self.tick_seconds = tick_seconds
        self._claims: dict[str, _Claim] = {}
        """Released (or being released) pods the snapshot may still show gated."""
        self._seen: dict[str, float] = {}
        """When each gated pod was first seen (waits, backoffs, the gate's histogram)."""
        self._retries: Retries[str] = Retries(BackoffPolicy(
            initial=retry_seconds, maximum=MAX_RETRY_SECONDS, jitter=0.0))
        """Pods whose release failed, and when to try again."""
        self._waiting: set[_ClusterKey] = set()
        """Clusters with gated pods not released yet: looked at on every tick."""
        self._held: dict[_ClusterKey, int] = {}
        """The pods each cluster's all-or-nothing scale-up holds now (a metric)."""
        metrics.watch_scale_ups(self.held)
        self.admitted = AdmittedPods() if admitted is None else admitted
        """The pods the webhook decided at admission that the snapshot lacks yet."""
        self.events = events
        self._told: set[str] = set()
        """Pods told ``Held``: told ``Released`` when they go."""
        self._holding: set[_ClusterKey] = set()
        """Clusters told ``ScaleUpHeld``: told ``ScaleUpReleased`` when it goes."""

    # --- the check ----------------------------------------------------------------------
    def check(self) -> int:
        """Release every gated pod that can be released now; returns how many patches
        were sent."""
        if not self.cache.ready:
            return 0
        snap = self.cache.snapshot
        if not self.leading():
            self._claims.clear()
            self._waiting.clear()
            self._held.clear()
            self._told.clear()
            self._holding.clear()
            self.look_again()  # a new term starts from a full look
            self.wake(self.tick_seconds)
            return 0
        now = self.clock()
        sent = sum(self._release_cluster(snap, key, now) for key in self._clusters(snap))
        self._forget_released(snap)
        if self._waiting or self._claims:
            self.wake(self.tick_seconds)
        return sent

    def held(self) -> dict[_ClusterKey, int]:
        """The pods each RayCluster's all-or-nothing scale-up holds now."""
        return dict(self._held)

    def _clusters(self, snap: Snapshot) -> set[_ClusterKey]:
        changes = self.changes(snap)
        keys = set(snap.pod_clusters()) if changes is None else set(changes.clusters)
        keys |= self._waiting
        self._waiting = set()
        return keys

    def _forget_released(self, snap: Snapshot) -> None:
        for uid in list(self._claims):
            pod = snap.pod(uid)
            if pod is None or GATE not in pod.scheduling_gates:
                del self._claims[uid]
                self._seen.pop(uid, None)
                self._told.discard(uid)
        for uid in [u for u in self._seen if u not in self._claims and snap.pod(u) is None]:
            del self._seen[uid]
            self._retries.forget(uid)
            self._told.discard(uid)

    def _release_cluster(self, snap: Snapshot, key: _ClusterKey, now: float) -> int:
        cluster = snap.raycluster(*key)
        # An all-or-nothing scale-up is judged once Kueue's quota let it go: a pod behind
        # Kueue's elastic gate keeps raygate's too (its change brings the cluster back).
        kueue_waits = cluster is not None and cluster.all_or_nothing
        gated = [p for p in gated_pods(snap, *key) if p.uid not in self._claims
                 and not (kueue_waits and KUEUE_GATE in p.scheduling_gates)]
        for pod in gated:
            self._seen.setdefault(pod.uid, now)
        held = self._held_back(snap, key, now)
        sent = 0
        for pod in gated:
            unseen = snap.raycluster(*key) is None
            if self._retries.waiting(pod.uid, now) or pod.uid in held or (
                    unseen and now - self._seen[pod.uid] < self.wait_seconds):
                self._waiting.add(key)
                self._tell_held(pod, unseen=unseen, holding=key in self._holding)
                continue
            self._release(snap, pod, now)
            sent += 1
        return sent

    def _held_back(self, snap: Snapshot, key: _ClusterKey, now: float) -> frozenset[str]:
        """The pods of the cluster's all-or-nothing scale-up, unless it goes whole now:
        complete (no new pod for ``scaleUpSettleSeconds``), none waiting out a failed
        release, and all fit or a node autoscaler runs (``policy.scale_up``)."""
        self._held.pop(key, None)
        cluster = snap.raycluster(*key)
        claimed = {uid: claim.role for uid, claim in self._claims.items()}
        batch = (None if cluster is None or not cluster.all_or_nothing
                 else scale_up_batch(cluster, snap, snap.config, now, claimed))
        if batch is None:
            self._tell_scale_up(key, cluster, None, "its held pods are gone")
            return frozenset()
        uids = frozenset(p.uid for p in batch.pods)
        complete_at = (max(self._seen[uid] for uid in uids)
                       + snap.config.scale_up_settle_seconds)
        retrying = any(self._retries.waiting(uid, now) for uid in uids)
        if now < complete_at:
            self.wake(complete_at - now)
        elif batch.release and not retrying:
            log.info("%s/%s: %s", *key, batch.reason,
                     extra=about(namespace=key[0], raycluster=key[1]))
            trigger = "node-autoscaler" if batch.node_autoscaler else "fits"
            self.metrics.scale_up_releases.labels(trigger).inc()
            self._tell_scale_up(key, cluster, None, batch.reason)
            return frozenset()
        elif not batch.release:
            self._tell_scale_up(key, cluster, batch.reason, "")
        self._held[key] = len(uids)
        return uids

    def _release(self, snap: Snapshot, pod: PodView, now: float) -> None:
        verdict = release_role(pod, snap, {u: c.role for u, c in self._claims.items()},
                               self.admitted.held(pod.group_key, snap, now))
        decision = decide(pod, snap, snap.config, now, role=verdict)
        rule = native_rule(decision, snap.config)
        failure = self._retries.get(pod.uid)
        refusals = 0 if failure is None else failure.refusals
        failed_open = refusals >= FAIL_OPEN_AFTER
        if failed_open:
            # The API server keeps refusing the patch (a shape raygate misread, an
            # admission plugin that objects): release the pod bare rather than hold it.
            log.warning("%s: releasing it without raygate's rule after %d refused releases",
                        pod.ref, refusals, extra=about(namespace=pod.namespace, pod=pod.name))
            rule = NativeRule.NONE
        labels = {LABEL_ROLE: verdict.role.value,
                  LABEL_RULE: FAILED_OPEN if failed_open else decision.rule.value}
        ops = release_patch(pod, rule, labels, snap.config)
        self._claims[pod.uid] = _Claim(verdict.role, now)
        fields = about(namespace=pod.namespace, pod=pod.name, raycluster=pod.ray_cluster)
        log.info("%s: released as %s with %s (%s: %s)", pod.ref, verdict.role.value,
                 rule.value, decision.rule.value, decision.reason, extra=fields)
        self.write(self.patch, pod.namespace, pod.name, ops, done=partial(
            self._released, pod, rule=decision.rule.value, native=rule.value,
            first_seen=self._seen.get(pod.uid, now), failed_open=failed_open,
            told=pod.uid in self._told))

    def _released(self, pod: PodView, error: BaseException | None, *, rule: str,
                  native: str, first_seen: float, failed_open: bool, told: bool) -> None:
        """On the loop: count the patch's outcome; a failed one is tried again later."""
        code = error.code if isinstance(error, ApiError) else 0
        result = ("released" if error is None else "conflict" if code in (409, 422)
                  else "gone" if code == 404 else "failed")
        self.metrics.placement_releases.labels(rule, native, result).inc()
        now = self.clock()
        if result == "released":
            self._retries.forget(pod.uid)
            self._tell_released(pod, rule=rule, native=native, failed_open=failed_open,
                                told=told)
            # From when it was first seen gated: the snapshot may already show it released.
            self.metrics.placement_gate_seconds.labels().observe(now - first_seen)
            return
        self._claims.pop(pod.uid, None)  # the snapshot will say who released it, if anyone
        # Conflicts and gone pods too, until the snapshot shows what happened: a pod still
        # gated then failed its ``test`` on something else (validation answers 422 too).
        delay = self._retries.failed(pod.uid, now, refused=code in REFUSALS).delay
        self._waiting.add((pod.namespace, pod.ray_cluster))
        self.wake(delay)
        log.warning("%s: release from raygate's gate answered %s (looked at again in "
                    "%.0fs): %s", pod.ref, result, delay, error,
                    extra=about(namespace=pod.namespace, pod=pod.name))

    # --- Events -------------------------------------------------------------------------
    def _tell_held(self, pod: PodView, *, unseen: bool, holding: bool) -> None:
        """``Held``, once: a pod whose RayCluster is unseen, or one of a scale-up held
        once complete (not one waiting for the scale-up to settle: it goes in a moment)."""
        if self.events is None or pod.uid in self._told or not (unseen or holding):
            return
        self._told.add(pod.uid)
        why = (f"raygate has not seen RayCluster {pod.ray_cluster} yet: it decides the pod "
               f"when it does, or releases it as floor within {self.wait_seconds:g}s"
               if unseen else "its worker group's all-or-nothing scale-up waits to go "
               "whole (the RayCluster's ScaleUpHeld Event says why)")
        self.events.record(Regarding.of_pod(pod), Reason.HELD,
                           f"Held by the scheduling gate {GATE}: {why}")

    def _tell_released(self, pod: PodView, *, rule: str, native: str, failed_open: bool,
                       told: bool) -> None:
        """``Released`` to a pod told ``Held`` (``told``: when its release was sent; the
        snapshot may show it released before the reply comes); ``ReleasedWithoutRule`` to
        any pod released bare after its releases were refused."""
        if self.events is None:
            return
        if failed_open:
            reason = Reason.RELEASED_WITHOUT_RULE
        elif told:
            reason = Reason.RELEASED
        else:
            return
        self.events.record(Regarding.of_pod(pod), reason,
                           f"Released from {GATE} with the rule {native} ({rule})")

    def _tell_scale_up(self, key: _ClusterKey, cluster: RayClusterView | None,
                       held: str | None, released: str) -> None:
        """``ScaleUpHeld`` when a scale-up is held (``held``: why), once; then
        ``ScaleUpReleased`` when it goes (``released``: why)."""
        if self.events is None or cluster is None or (held is not None) == (
                key in self._holding):
            return
        if held is not None:
            self._holding.add(key)
            self.events.record(Regarding.of_raycluster(cluster), Reason.SCALE_UP_HELD,
                               f"Held at {GATE}: {held}")
        else:
            self._holding.discard(key)
            self.events.record(Regarding.of_raycluster(cluster), Reason.SCALE_UP_RELEASED,
                               f"Released: {released}")
