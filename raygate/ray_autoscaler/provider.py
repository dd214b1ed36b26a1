"""The stock Ray autoscaler v2 for KubeRay, with raygate's advice wired in.

Importing this module imports Ray and fails with a clear message on a Ray version that is
not in ``TESTED_RAY_VERSIONS``: everything below leans on Ray's private interfaces, which
change between releases without notice. Those interfaces, in Ray 2.60.0:

``ray.autoscaler.v2.autoscaler.KubeRayProvider`` (the module global read by
    ``Autoscaler._init_cloud_instance_provider``, autoscaler.py L107): ``install()``
    rebinds it, so the autoscaler builds ``AdmissionAwareKubeRayProvider``.
``KubeRayProvider`` (``v2/instance_manager/cloud_providers/kuberay/cloud_provider.py``):
    its constructor, ``get_non_terminated`` (L144), ``launch`` (L185) and ``poll_errors``
    (L234) — the ``ICloudInstanceProvider`` interface — are extended, not replaced.
``Reconciler.reconcile`` (``v2/instance_manager/reconciler.py`` L67) is wrapped to learn,
    per loop, which provider and which ``cloud_resource_monitor`` it runs with; only the
    availability scores it reads (L1257, L1260) are changed, for held groups.
``Reconciler._handle_stuck_instance`` (L1614), which ``_handle_stuck_instances`` calls for
    every ALLOCATED instance with ``new_status=ALLOCATION_TIMEOUT`` (L1059): wrapped to
    decide, for workers raygate has advice on, instead of ``allocate_status_timeout_s``.

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
from collections.abc import Callable, Collection, Iterator, Mapping
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

__all__ = ["AdmissionAwareKubeRayProvider", "Installation", "install"]

log = logging.getLogger("raygate.autoscaler")

ALLOCATED: int = instance_manager_pb2.Instance.ALLOCATED
ALLOCATION_TIMEOUT: int = instance_manager_pb2.Instance.ALLOCATION_TIMEOUT
WORKER: int = instance_manager_pb2.NodeKind.WORKER

AdvisorFactory = Callable[[str, str], Advisor]
"""(namespace, RayCluster name) to the advisor of that cluster."""


class AdmissionAwareKubeRayProvider(KubeRayProvider):  # type: ignore[misc]  # Ray is untyped
    """``KubeRayProvider`` that asks raygate once per autoscaler loop (in
    ``get_non_terminated``, which ``Autoscaler.update_autoscaling_state`` calls first) and
    refuses launches for the groups raygate holds."""

    def __init__(self, cluster_name: str, provider_config: dict[str, Any], gcs_client: Any,
                 k8s_api_client: Any = None, *, advisor: AdvisorFactory,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(cluster_name, provider_config, gcs_client, k8s_api_client)
        self.advisor = advisor(str(provider_config["namespace"]), cluster_name)
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
        instances: dict[str, Any] = super().get_non_terminated()
        self.advice = self.advisor.current()
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

    def launch(self, shape: dict[str, int], request_id: str) -> None:
        held = self.held_groups()
        for node_type, count in shape.items():
            if node_type in held and count > 0:
                # REQUESTED → ALLOCATION_FAILED on the next loop; nothing is patched.
                self._hold_errors.append(LaunchNodeError(
                    node_type=node_type, count=count, request_id=request_id,
                    timestamp_ns=time.time_ns(),
                    details=f"raygate holds scale-up of group {node_type}: "
                            f"{held[node_type]}"))
                log.debug("raygate: not launching %d %s worker(s): %s", count, node_type,
                         held[node_type])
        rest = {t: n for t, n in shape.items() if t not in held}
        if rest:
            super().launch(rest, request_id)

    def poll_errors(self) -> list[Any]:
        errors: list[Any] = super().poll_errors()
        errors += self._hold_errors
        self._hold_errors = []
        return errors

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


class _HoldAwareAvailability:
    """The reconciler's ``cloud_resource_monitor`` as the scheduler sees it, with the held
    groups' availability at 0: among candidates of equal utilization score, the
    scheduler (``_sched_best_node``) then prefers any other group, before priority."""

    def __init__(self, monitor: Any, held: Collection[str]) -> None:
        self._monitor = monitor
        self._held = held

    def get_resource_availabilities(self) -> dict[str, float]:
        scores = dict(self._monitor.get_resource_availabilities())
        return scores | dict.fromkeys(self._held, 0.0)

    def get_recoverable_resource_availabilities(self) -> dict[str, float]:
        scores = dict(self._monitor.get_recoverable_resource_availabilities())
        return scores | dict.fromkeys(self._held, 0.0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._monitor, name)


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
            bound.arguments["cloud_resource_monitor"] = _HoldAwareAvailability(
                bound.arguments["cloud_resource_monitor"], tuple(held))
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
    for name in ("cloud_provider", "cloud_resource_monitor"):
        if name not in reconcile:
            problems.append(f"Reconciler.reconcile has no parameter {name!r}")
    stuck = list(inspect.signature(Reconciler._handle_stuck_instance).parameters)
    if stuck != ["instance", "timeout_s", "new_status", "update_kwargs"]:
        problems.append(f"Reconciler._handle_stuck_instance takes {stuck}")
    for method in ("get_non_terminated", "launch", "poll_errors"):
        if not callable(getattr(KubeRayProvider, method, None)):
            problems.append(f"KubeRayProvider has no {method}()")
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
