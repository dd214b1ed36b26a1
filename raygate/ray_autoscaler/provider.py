"""The stock Ray autoscaler v2 for KubeRay, with raygate's advice wired in.

Importing this module imports Ray and fails with a clear message on a Ray version that is
not in ``TESTED_RAY_VERSIONS``: everything below leans on Ray's private interfaces, which
change between releases without notice. Those interfaces, in Ray 2.60.0:

``ray.autoscaler.v2.autoscaler.KubeRayProvider`` (the module global read by
    ``Autoscaler._init_cloud_instance_provider``, autoscaler.py L107): ``install()``
    rebinds it, so the autoscaler builds ``AdmissionAwareKubeRayProvider``.
``KubeRayProvider`` (``v2/instance_manager/cloud_providers/kuberay/cloud_provider.py``):
    its constructor, ``get_non_terminated`` (L144), ``launch`` (L185) and ``poll_errors``
    (L234) — the ``ICloudInstanceProvider`` interface — are extended, not replaced; so
    are two private methods: ``_patch`` (L703, the one write of ``_submit_scale_request``,
    L449), to keep the scale gates through a scale-down (``gates.keep_gates``), and
    ``_cloud_instance_from_pod`` (L644, called per pod by ``_fetch_instances``), to note
    which pending pods have a node.
``Reconciler.reconcile`` (``v2/instance_manager/reconciler.py`` L67) is wrapped to learn,
    per loop, which provider, ``cloud_resource_monitor`` and ``scheduler`` it runs with;
    only the availability scores it reads (L1257, L1260) are changed, for held groups,
    and the scheduling request (L1269), for gated groups: their pending workers without a
    node are left out of ``current_instances`` (the demand is not counted on them), their
    ``max_worker_nodes`` is the size left (``scheduler.py``
    ``_compute_available_node_types``: no new node of theirs is considered), their
    ``min_worker_nodes`` no more than that.
``Reconciler._handle_stuck_instance`` (L1614), which ``_handle_stuck_instances`` calls for
    every ALLOCATED instance with ``new_status=ALLOCATION_TIMEOUT`` (L1059): wrapped to
    decide, for workers raygate has advice on, instead of ``allocate_status_timeout_s``.

A gated group's pending workers are not deleted, only no longer counted on: a writer's
gate may rest on them (raygate's do: a pod no node comes for, a pod that waits; Kueue's
lasts while the group's pods cannot be admitted), so deleting them would lift the gate and
the group be tried again, a delete-and-recreate loop. Nor are they timed out early: after
an ALLOCATION_TIMEOUT ``CloudResourceMonitor`` ranks the group down for
``RAY_AUTOSCALER_AVAILABILITY_RECOVERY_S`` (600 s), past the gate's lifting.

Why these and not the alternatives: the provider interface alone cannot keep a pending
worker from timing out (the reconciler's timer knows nothing of the provider), and
raising ``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S`` would lose the stock timeout
when raygate is away. With the two wraps, a worker raygate says to replace takes the
stock path (ALLOCATION_TIMEOUT → TERMINATING → ``terminate()`` → ``workersToDelete``,
and ``CloudResourceMonitor`` marks its group unavailable as it would at a timeout), and a
loop without advice runs the original code unchanged.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from raygate.ray_autoscaler import TESTED_RAY_VERSIONS, RayUnusable

try:
    import ray
except ImportError as exc:  # pragma: no cover - the module is only imported with Ray
    raise RayUnusable("raygate.ray_autoscaler.provider needs Ray: "
                      "pip install 'raygate[ray]'") from exc

if ray.__version__ not in TESTED_RAY_VERSIONS:
    raise RayUnusable(
        f"raygate's autoscaler integration is tested with Ray "
        f"{', '.join(TESTED_RAY_VERSIONS)} and relies on its private interfaces; this is "
        f"Ray {ray.__version__}. Install a tested version (pip install 'raygate[ray]'), or "
        "run the stock autoscaler (unset RAYGATE_URL).")

from ray.autoscaler.v2 import autoscaler as ray_autoscaler
from ray.autoscaler.v2.instance_manager.cloud_providers.kuberay.cloud_provider import (
    KubeRayProvider,
)
from ray.autoscaler.v2.instance_manager.node_provider import LaunchNodeError
from ray.autoscaler.v2.instance_manager.reconciler import Reconciler
from ray.core.generated import instance_manager_pb2

from raygate.ray_autoscaler.advice import KEEP, REPLACE, Advice, Advisor
from raygate.ray_autoscaler.gates import Gated, ScaleGates, keep_gates
from raygate.ray_autoscaler.scheduling import (
    GateAwareScheduler,
    HoldAwareAvailability,
    scheduling_problems,
)

__all__ = ["AdmissionAwareKubeRayProvider", "Installation", "install"]

log = logging.getLogger("raygate.autoscaler")

ALLOCATED: int = instance_manager_pb2.Instance.ALLOCATED
ALLOCATION_TIMEOUT: int = instance_manager_pb2.Instance.ALLOCATION_TIMEOUT
WORKER: int = instance_manager_pb2.NodeKind.WORKER

AdvisorFactory = Callable[[str, str], Advisor]
"""(namespace, RayCluster name) to the advisor of that cluster."""


class AdmissionAwareKubeRayProvider(KubeRayProvider):  # type: ignore[misc]  # Ray is untyped
    """``KubeRayProvider`` that asks raygate and reads the groups' scale gates once per
    autoscaler loop (in ``get_non_terminated``, which ``Autoscaler.update_autoscaling_state``
    calls first), refuses launches for the groups raygate holds or a gate closes, and
    writes a scale-down so that it keeps the gates."""

    def __init__(self, cluster_name: str, provider_config: dict[str, Any], gcs_client: Any,
                 k8s_api_client: Any = None, *, advisor: AdvisorFactory,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(cluster_name, provider_config, gcs_client, k8s_api_client)
        self.advisor = advisor(str(provider_config["namespace"]), cluster_name)
        self.gates = ScaleGates(str(provider_config["namespace"]), cluster_name)
        self._bound: set[str] = set()
        """Pods with a node (``spec.nodeName``) seen in this loop: a pending worker that
        has its node is counted on, gated or not."""
        self._uncounted: set[str] = set()
        """The gated groups' pending pods not counted on in this loop."""
        self.advice: Advice | None = None
        """This loop's advice; None: act as stock."""
        self._clock = clock
        # When raygate last said to keep each pending pod (wall-clock seconds, like the
        # instance manager's timestamps): if raygate goes away, the stock timeout counts
        # from there, so a raygate restart does not get every long wait deleted at once.
        self._kept_at: dict[str, float] = {}
        self._hold_errors: list[Any] = []
        self._said: dict[str, str] = {}
        """The last ruling logged at info per pending pod: one line per change, not per loop."""

    def get_non_terminated(self) -> dict[str, Any]:
        self._bound = set()
        instances: dict[str, Any] = super().get_non_terminated()
        self.advice = self.advisor.current()
        # The RayCluster as the sync above read it; raygate's own gates count only while
        # raygate answers (fail open).
        self.gates.update(self._ray_cluster, raygate_answers=self.advice is not None)
        self._note_uncounted(instances)
        now = self._clock()
        self._kept_at = {pod: at for pod, at in self._kept_at.items() if pod in instances}
        self._said = {pod: said for pod, said in self._said.items() if pod in instances}
        if self.advice is not None:
            for pod, advice in self.advice.pods.items():
                if advice.action == KEEP and pod in instances:
                    self._kept_at[pod] = now
        return instances

    def held_groups(self) -> Mapping[str, str]:
        return {} if self.advice is None else self.advice.held

    def gated_groups(self) -> Gated:
        """This loop's gates to honour, by group."""
        return self.gates.honoured

    def refusal(self, node_type: str) -> str | None:
        """Why no worker of ``node_type`` is launched in this loop; None: launch."""
        gates = self.gates.honoured.get(node_type)
        if gates:
            return f"worker group {node_type} is gated ({', '.join(gates)})"
        held = self.held_groups().get(node_type)
        return None if held is None else f"raygate holds scale-up of group {node_type}: {held}"

    def counted_on(self, node_type: str, pod: str) -> bool:
        """Whether Ray's scheduler may count on the pending worker ``pod`` ("": not
        launched yet) of ``node_type`` in this loop: not while a gate closes its group,
        unless the pod has its node."""
        return node_type not in self.gates.honoured or pod in self._bound

    def _note_uncounted(self, instances: Mapping[str, Any]) -> None:
        uncounted = {pod for pod, i in instances.items() if i.node_kind == WORKER
                     and not i.is_running and not self.counted_on(i.node_type, pod)}
        for pod in sorted(uncounted - self._uncounted):
            group = instances[pod].node_type
            log.info("raygate: not counting on pending worker %s while worker group %s is "
                     "gated (%s): the demand goes to other groups; the pod stays",
                     pod, group, ", ".join(self.gates.honoured[group]))
        self._uncounted = uncounted

    def launch(self, shape: dict[str, int], request_id: str) -> None:
        refused = {t: why for t, n in shape.items() if n > 0 and (why := self.refusal(t))}
        for node_type, why in refused.items():
            # REQUESTED → ALLOCATION_FAILED on the next loop; nothing is patched.
            self._hold_errors.append(LaunchNodeError(
                node_type=node_type, count=shape[node_type], request_id=request_id,
                timestamp_ns=time.time_ns(), details=why))
            log.debug("raygate: not launching %d %s worker(s): %s", shape[node_type],
                      node_type, why)
        rest = {t: n for t, n in shape.items() if t not in refused}
        if rest:
            super().launch(rest, request_id)

    def poll_errors(self) -> list[Any]:
        errors: list[Any] = super().poll_errors()
        errors += self._hold_errors
        self._hold_errors = []
        return errors

    def _patch(self, remote_path: str, payload: list[dict[str, Any]]) -> dict[str, Any]:
        # Ray's scale-down replaces the group's whole scaleStrategy, every gate with it
        # (node_provider.worker_delete_patch); write workersToDelete alone instead.
        # _ray_cluster is the RayCluster as _initialize_scale_request read it for this write.
        patched: dict[str, Any] = super()._patch(remote_path,
                                                 keep_gates(self._ray_cluster, payload))
        return patched

    def _cloud_instance_from_pod(self, pod: dict[str, Any]) -> Any:
        if pod.get("spec", {}).get("nodeName"):
            self._bound.add(pod["metadata"]["name"])
        return super()._cloud_instance_from_pod(pod)

    def log_keep(self, pod: str, ruling: Ruling) -> None:
        """Log the ruling on ``pod`` at info when it differs from the last one logged."""
        if self._said.get(pod) != ruling.reason:
            self._said[pod] = ruling.reason
            log.info("raygate: keeping pending worker %s: %s", pod, ruling.reason)
        else:
            log.debug("raygate: keeping pending worker %s: %s", pod, ruling.reason)

    def verdict(self, pod: str, timeout_s: float) -> Ruling:
        """What to do with the ALLOCATED (pending) worker ``pod`` in this loop."""
        advice = None if self.advice is None else self.advice.pods.get(pod)
        if advice is not None and advice.action == KEEP:
            return Ruling(KEEP, f"{advice.state}: {advice.reason}")
        if advice is not None and advice.action == REPLACE:
            return Ruling(REPLACE, f"{advice.state}: {advice.reason}")
        kept_at = self._kept_at.get(pod)
        if kept_at is not None and self._clock() - kept_at <= timeout_s:
            return Ruling(KEEP, "raygate advised to keep it, and the stock timeout "
                                 f"({timeout_s:g} s) counts from then")
        return Ruling(None, "no advice from raygate: stock timeout")


@dataclass(frozen=True, slots=True)
class Ruling:
    action: str | None
    """``keep``, ``replace``, or None: the stock rule."""
    reason: str


_provider: ContextVar[AdmissionAwareKubeRayProvider | None] = ContextVar(
    "raygate_provider", default=None)


def _wrap_reconcile(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def reconcile(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        provider = bound.arguments.get("cloud_provider")
        if not isinstance(provider, AdmissionAwareKubeRayProvider):
            return original(*args, **kwargs)
        held = provider.held_groups()
        if held:
            bound.arguments["cloud_resource_monitor"] = HoldAwareAvailability(
                bound.arguments["cloud_resource_monitor"], tuple(held))
        gated = provider.gated_groups()
        if gated:
            bound.arguments["scheduler"] = GateAwareScheduler(
                bound.arguments["scheduler"], tuple(gated), provider.counted_on)
        token = _provider.set(provider)
        try:
            return original(*bound.args, **bound.kwargs)
        finally:
            _provider.reset(token)

    return reconcile


def _wrap_handle_stuck_instance(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def handle_stuck_instance(instance: Any, timeout_s: int, new_status: int,
                              **update_kwargs: Any) -> Any:
        provider = _provider.get()
        if (provider is None or new_status != ALLOCATION_TIMEOUT
                or instance.status != ALLOCATED or instance.node_kind != WORKER):
            return original(instance, timeout_s, new_status, **update_kwargs)
        verdict = provider.verdict(instance.cloud_instance_id, timeout_s)
        if verdict.action == KEEP:
            provider.log_keep(instance.cloud_instance_id, verdict)
            return None
        if verdict.action == REPLACE:
            log.info("raygate: replacing pending worker %s now: %s",
                     instance.cloud_instance_id, verdict.reason)
            # The event the stock timeout would produce, with raygate's reason.
            return instance_manager_pb2.InstanceUpdateEvent(
                instance_id=instance.instance_id, new_instance_status=ALLOCATION_TIMEOUT,
                details=f"raygate advises to replace it ({verdict.reason})", **update_kwargs)
        return original(instance, timeout_s, new_status, **update_kwargs)

    return handle_stuck_instance


def _check_interfaces() -> None:
    """Fail at install, not in the first loop, if Ray moved what this module wraps."""
    problems = []
    if ray_autoscaler.KubeRayProvider is not KubeRayProvider:
        problems.append("ray.autoscaler.v2.autoscaler.KubeRayProvider is already replaced")
    reconcile = inspect.signature(Reconciler.reconcile).parameters
    for name in ("cloud_provider", "cloud_resource_monitor", "scheduler"):
        if name not in reconcile:
            problems.append(f"Reconciler.reconcile has no parameter {name!r}")
    stuck = list(inspect.signature(Reconciler._handle_stuck_instance).parameters)
    if stuck != ["instance", "timeout_s", "new_status", "update_kwargs"]:
        problems.append(f"Reconciler._handle_stuck_instance takes {stuck}")
    for method in ("get_non_terminated", "launch", "poll_errors", "_patch",
                   "_cloud_instance_from_pod"):
        if not callable(getattr(KubeRayProvider, method, None)):
            problems.append(f"KubeRayProvider has no {method}()")
    problems += scheduling_problems()
    if problems:
        raise RuntimeError("cannot install raygate's autoscaler hooks into Ray "
                           f"{ray.__version__}: " + "; ".join(problems))


class Installation:
    """What ``install`` changed in Ray, and ``undo()`` to put it back."""

    def __init__(self, provider_factory: Callable[..., Any]) -> None:
        self._saved = (ray_autoscaler.KubeRayProvider, Reconciler.__dict__["reconcile"],
                       Reconciler.__dict__["_handle_stuck_instance"])
        ray_autoscaler.KubeRayProvider = provider_factory
        Reconciler.reconcile = staticmethod(_wrap_reconcile(Reconciler.reconcile))
        Reconciler._handle_stuck_instance = staticmethod(
            _wrap_handle_stuck_instance(Reconciler._handle_stuck_instance))
        self.active = True

    def undo(self) -> None:
        if self.active:
            (ray_autoscaler.KubeRayProvider, Reconciler.reconcile,
             Reconciler._handle_stuck_instance) = self._saved
            self.active = False

    @contextmanager
    def undone(self) -> Iterator[None]:
        """Ray as shipped inside the block (tests compare the two side by side)."""
        saved = (ray_autoscaler.KubeRayProvider, Reconciler.__dict__["reconcile"],
                 Reconciler.__dict__["_handle_stuck_instance"])
        (ray_autoscaler.KubeRayProvider, Reconciler.reconcile,
         Reconciler._handle_stuck_instance) = self._saved
        try:
            yield
        finally:
            (ray_autoscaler.KubeRayProvider, Reconciler.reconcile,
             Reconciler._handle_stuck_instance) = saved


def install(advisor: AdvisorFactory, *, clock: Callable[[], float] = time.time,
            **provider_kwargs: Any) -> Installation:
    """Make the Ray autoscaler of this process build ``AdmissionAwareKubeRayProvider``
    (with ``advisor`` and ``provider_kwargs``) and consult it before timing out a
    pending worker. Call before ``run_kuberay_autoscaler``."""
    _check_interfaces()
    factory = functools.partial(AdmissionAwareKubeRayProvider, advisor=advisor, clock=clock,
                                **provider_kwargs)
    return Installation(factory)
