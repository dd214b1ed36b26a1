"""``raygate uninstall``: take back what raygate wrote into the cluster, so that removing
raygate strands nothing. In order:

1. delete raygate's MutatingWebhookConfiguration (``raygate-ray-pods``): no new pod is
   gated from then on. First, because a pod created after the release below would
   otherwise be gated again, with no raygate left to release it;
2. with ``--stop NAMESPACE/DEPLOYMENT``: scale raygate's Deployment to 0 and wait until
   its pods are gone, so that no raygate still running writes a budget or gates a pod
   after the steps below (the chart's hook stops the one that serves);
3. release every pending Ray pod that holds raygate's scheduling gate
   (``raygate.io/placement``): a JSON Patch that removes the gate and nothing else, with
   a ``test`` of the pod's UID and of the gate's index, as raygate's own release has
   (``policy.native.gate_removal``). No role or rule is written: nothing of raygate should
   stay behind, and the pod is scheduled as its spec says. A pod another writer changed
   meanwhile fails the test, is read again and tried again;
4. delete every PodDisruptionBudget raygate wrote (label
   ``app.kubernetes.io/managed-by=raygate``);
5. remove raygate's entries (keyed ``raygate.io/...``: ``type``, or ``name`` as earlier
   drafts of the field had it) from each RayCluster's
   ``spec.workerGroupSpecs[].scaleStrategy.scaleGate``, by a JSON Patch of those entries
   alone, tested by their key and the RayCluster's UID; entries of other writers stay. Not by
   an empty server-side apply of raygate's field manager: KubeRay's CRD declares
   ``workerGroupSpecs`` an atomic list, so raygate's apply owns the whole list, and
   applying nothing would delete every worker group. Where the CRD has no such field (it
   is pruned) there is nothing to remove;
6. list the RayClusters whose head or worker templates name ``schedulerName:
   ray-scheduler``: once the second scheduler that raygate's setups run is gone, nothing
   schedules their new pods. Said loudly, not refused: the fix is the owner's (set the
   name back, or keep a ray-scheduler), and holding up the uninstall would not make it.

Idempotent: a second run finds nothing to do. Every failure is said on stderr and the
run goes on with the rest; the exit status is 1 when anything failed, 0 otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

import msgspec

from raygate.policy.budgets import LABEL_MANAGED_BY, MANAGED_BY
from raygate.policy.native import GATE, gate_removal
from raygate.server.kube.guarded_patch import Ops, patch_guarded
from raygate.server.kube.transport import ApiError, NotServed, TransportError
from raygate.server.uninstall_clusters import (
    RAY_SCHEDULER,
    RayClusterRead,
    decode_cluster,
    ray_scheduler_templates,
    scale_gate_removal,
)
from raygate.server.wire import DECODE_ERRORS, kube

__all__ = ["WEBHOOK_CONFIGURATION", "Options", "Summary", "Uninstall", "UninstallApi"]

WEBHOOK_CONFIGURATION = "raygate-ray-pods"
"""The name of raygate's webhook configuration in the chart and in deploy/."""
RAY_PODS = [("labelSelector", "ray.io/is-ray-node=yes"), ("fieldSelector", "status.phase=Pending")]
"""The pods raygate's webhook can have gated: KubeRay's (the webhook's objectSelector),
pending (a gated pod is never bound)."""


class UninstallApi(Protocol):
    """What the command asks of the API server (``raygate.server.kube.client.KubeTransport``)."""

    def delete_webhook_configuration(self, name: str) -> bool: ...
    def scale_to_zero(self, namespace: str, name: str) -> str | None: ...
    def list_raw(self, path: str, limit: int = 500,
                 query: Sequence[tuple[str, str]] = ()) -> Iterator[msgspec.Raw]: ...
    def get(self, path: str, query: list[tuple[str, str]]) -> bytes: ...
    def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None: ...
    def list_budgets(self, label_selector: str) -> list[tuple[str, str, str]]: ...
    def delete_budget(self, namespace: str, name: str) -> None: ...
    def patch_raycluster(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None: ...


# --- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    webhook_configuration: str = WEBHOOK_CONFIGURATION
    """"" leaves webhook configurations alone."""
    stop: tuple[tuple[str, str], ...] = ()
    """(namespace, name) of the Deployments that run raygate, scaled to 0 first."""
    stop_timeout: float = 120.0
    dry_run: bool = False


@dataclass
class Summary:
    webhook: str = "not asked"
    stopped: int = 0
    released: int = 0
    budgets: int = 0
    scale_gates: int = 0
    scale_gated_clusters: int = 0
    ray_scheduler: list[str] = field(default_factory=list)
    failures: int = 0

    def line(self, dry_run: bool) -> str:
        def n(count: int, what: str) -> str:
            return f"{count} {what}{'' if count == 1 else 's'}"
        verb = "would be " if dry_run else ""
        parts = [f"webhook configuration {self.webhook}",
                 f"{n(self.stopped, 'deployment')} {verb}stopped",
                 f"{n(self.released, 'pod')} {verb}released from {GATE}",
                 f"{n(self.budgets, 'budget')} {verb}deleted",
                 f"{n(self.scale_gates, 'scale gate')} {verb}removed from "
                 f"{n(self.scale_gated_clusters, 'RayCluster')}",
                 f"{n(len(self.ray_scheduler), 'RayCluster')} naming {RAY_SCHEDULER}"]
        state = ("dry run" if dry_run else "done" if not self.failures
                 else f"INCOMPLETE, {n(self.failures, 'failure')} (above): run it again")
        return f"raygate uninstall: {state}: {', '.join(parts)}"


class Uninstall:
    def __init__(self, api: UninstallApi, options: Options, out: TextIO, err: TextIO, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = api
        self.options = options
        self.out = out
        self.err = err
        self.clock = clock
        self.sleep = sleep
        self.summary = Summary()

    def run(self) -> Summary:
        """Every step, in the module's order; a step that fails leaves the next to run."""
        for step in (self._stop_gating, self._stop_raygate, self._release_pods,
                     self._delete_budgets, self._rayclusters):
            try:
                step()
            except (ApiError, TransportError) as exc:
                self._failed(str(exc))
        print(self.summary.line(self.options.dry_run), file=self.out, flush=True)
        return self.summary

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def _failed(self, message: str) -> None:
        self.summary.failures += 1
        print(f"raygate uninstall: {message}", file=self.err, flush=True)

    # --- 1. no new gates ----------------------------------------------------------------
    def _stop_gating(self) -> None:
        name = self.options.webhook_configuration
        if not name:
            return
        if self.options.dry_run:
            self.summary.webhook = f"{name} would be deleted"
            return
        deleted = self.api.delete_webhook_configuration(name)
        self.summary.webhook = f"{name} {'deleted' if deleted else 'absent'}"
        self._say(f"mutatingwebhookconfiguration {name}: "
                  f"{'deleted' if deleted else 'not there (deleted already)'}")

    # --- 2. no raygate running ----------------------------------------------------------
    def _stop_raygate(self) -> None:
        for namespace, name in self.options.stop:
            if self.options.dry_run:
                self.summary.stopped += 1
                continue
            try:
                selector = self.api.scale_to_zero(namespace, name)
            except (ApiError, TransportError) as exc:
                self._failed(str(exc))
                continue
            if selector is None:
                self._say(f"deployment {namespace}/{name}: not there")
                continue
            self.summary.stopped += 1
            self._say(f"deployment {namespace}/{name}: scaled to 0; waiting for its pods "
                      f"({selector}) to end")
            self._wait_gone(namespace, name, selector)

    def _wait_gone(self, namespace: str, name: str, selector: str) -> None:
        deadline = self.clock() + self.options.stop_timeout
        path = f"/api/v1/namespaces/{namespace}/pods"
        while (left := sum(1 for _ in self.api.list_raw(
                path, query=[("labelSelector", selector)]))):
            if self.clock() >= deadline:
                self._say(f"WARNING: deployment {namespace}/{name}: {left} pod(s) still "
                          f"there after {self.options.stop_timeout:g}s; going on (a raygate "
                          "still running may gate a pod or write a budget after this run: "
                          "run it again once they are gone)")
                return
            self.sleep(1.0)
        self._say(f"deployment {namespace}/{name}: its pods are gone")

    # --- 3. no pod held -----------------------------------------------------------------
    def _release_pods(self) -> None:
        for raw in self.api.list_raw("/api/v1/pods", query=RAY_PODS):
            pod = _decode_pod(raw)
            if pod is None:
                self._failed(f"a pending Ray pod that does not read as a Pod: {bytes(raw)[:200]!r}")
                continue
            if pod.metadata.deletion_timestamp or GATE not in _gates(pod):
                continue
            ref = f"{pod.metadata.namespace}/{pod.metadata.name}"
            if self.options.dry_run:
                self.summary.released += 1
                continue
            try:
                released = self._release(pod)
            except (ApiError, TransportError) as exc:
                self._failed(f"releasing pod {ref}: {exc}")
                continue
            self.summary.released += released
            self._say(f"pod {ref}: " + ("released" if released
                                        else "released by another writer, or gone"))

    def _release(self, pod: kube.Pod) -> bool:
        """Remove the gate; True once removed, False when someone else did (or the pod
        went). A failed ``test`` (422) or a conflict: read the pod again and retry."""
        meta = pod.metadata

        def read() -> kube.Pod | None:
            return _decode_pod(self.api.get(
                f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}", []))

        def removal(current: kube.Pod) -> Ops:
            gates = _gates(current)
            held = current.metadata.uid == meta.uid and GATE in gates
            return gate_removal(meta.uid, gates) if held else []

        return bool(patch_guarded(read, removal, lambda ops: self.api.patch_pod(
            meta.namespace, meta.name, ops), first=pod))

    # --- 4. no budget -------------------------------------------------------------------
    def _delete_budgets(self) -> None:
        for namespace, name, _ in self.api.list_budgets(f"{LABEL_MANAGED_BY}={MANAGED_BY}"):
            if self.options.dry_run:
                self.summary.budgets += 1
                continue
            try:
                self.api.delete_budget(namespace, name)
            except (ApiError, TransportError) as exc:
                self._failed(f"deleting poddisruptionbudget {namespace}/{name}: {exc}")
                continue
            self.summary.budgets += 1
            self._say(f"poddisruptionbudget {namespace}/{name}: deleted")

    # --- 5, 6. RayClusters: raygate's scale gates; those naming ray-scheduler -----------------
    def _rayclusters(self) -> None:
        try:
            raws = list(self.api.list_raw("/apis/ray.io/v1/rayclusters"))
        except NotServed:
            raws = []  # no RayCluster CRD: nothing of raygate's in any
        for raw in raws:
            cluster = decode_cluster(raw)
            if cluster is None:
                self._failed(f"a RayCluster that does not read as one: {bytes(raw)[:200]!r}")
                continue
            self._remove_scale_gates(cluster)
            named = ray_scheduler_templates(cluster)
            if named:
                meta = cluster.metadata
                self.summary.ray_scheduler.append(
                    f"{meta.namespace}/{meta.name} ({', '.join(named)})")
        self._warn_ray_scheduler()

    def _remove_scale_gates(self, cluster: RayClusterRead) -> None:
        groups = [(g.scale_strategy.scale_gate if g.scale_strategy else None)
                  for g in cluster.spec.worker_group_specs or ()]
        ops = scale_gate_removal(cluster.metadata.uid, groups)
        if not ops:
            return
        removed = sum(op["op"] == "remove" for op in ops)
        ref = f"{cluster.metadata.namespace}/{cluster.metadata.name}"
        if not self.options.dry_run:
            try:
                self.api.patch_raycluster(cluster.metadata.namespace, cluster.metadata.name,
                                          ops)
            except (ApiError, TransportError) as exc:
                self._failed(f"removing raygate's scale gates from raycluster {ref}: {exc} "
                             "(changed meanwhile? run it again)")
                return
            self._say(f"raycluster {ref}: {removed} scale gate(s) of raygate removed")
        self.summary.scale_gates += removed
        self.summary.scale_gated_clusters += 1

    def _warn_ray_scheduler(self) -> None:
        named = self.summary.ray_scheduler
        if not named:
            return
        self._say(
            f"WARNING: {len(named)} RayCluster(s) name schedulerName {RAY_SCHEDULER}, the "
            "second scheduler raygate's setups run (chart kubeScheduler.mode second, "
            "deploy/kube-scheduler-second, deploy/kueue). Once it is removed, nothing "
            "schedules their pods:\n" + "".join(f"  {ref}\n" for ref in named)
            + "In each, set schedulerName back (remove it: default-scheduler), then delete "
              "its pending pods (KubeRay makes them again from the template); or keep a "
              f"kube-scheduler named {RAY_SCHEDULER} running. docs/operations.md, "
              "\"Uninstall\".")


def _gates(pod: kube.Pod) -> list[str]:
    return [g.name for g in pod.spec.scheduling_gates or ()]


def _decode_pod(raw: bytes | msgspec.Raw) -> kube.Pod | None:
    try:
        return msgspec.json.decode(raw, type=kube.Pod)
    except DECODE_ERRORS:
        return None
