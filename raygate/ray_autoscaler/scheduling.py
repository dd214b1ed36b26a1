"""The reconciler's scheduler and availability scores as raygate-autoscaler lets Ray's
scheduler see them (needs Ray; ``provider`` wraps ``Reconciler.reconcile`` with them):
the groups raygate holds ranked last, the gated groups left out.

In Ray 2.60.0: ``ResourceDemandScheduler.schedule`` reads ``SchedulingRequest``'s
``current_instances`` and ``node_type_configs`` (``ScheduleContext.from_schedule_request``,
``scheduler.py`` L1005); ``SchedulingNode.is_schedulable`` (L525) says which instances it
counts as nodes; ``InstanceUtil.is_ray_pending`` (``instance_manager/common.py`` L95) which
are pending.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

from ray.autoscaler.v2.instance_manager.common import InstanceUtil
from ray.autoscaler.v2.scheduler import SchedulingNode

__all__ = ["GateAwareScheduler", "HoldAwareAvailability", "scheduling_problems"]


class HoldAwareAvailability:
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


class GateAwareScheduler:
    """The reconciler's scheduler, asked without the gated groups' pending workers that
    are not counted on, and with each gated group capped at the size left: no new worker
    of the group is considered, so the demand goes to the next group by Ray's own order
    (utilization score, availability, ``priority``). None of its workers is terminated
    for it either: the scheduler sees no more of them than the cap."""

    def __init__(self, scheduler: Any, gated: Collection[str],
                 counted_on: Callable[[str, str], bool]) -> None:
        self._scheduler = scheduler
        self._gated = gated
        self._counted_on = counted_on
        """(group, pod) to whether a pending worker is counted on."""

    def _counted(self, instance: Any) -> bool:
        im = instance.im_instance
        return (im is None or not InstanceUtil.is_ray_pending(im.status)
                or self._counted_on(im.instance_type, im.cloud_instance_id))

    def schedule(self, request: Any) -> Any:
        instances = [i for i in request.current_instances if self._counted(i)]
        configs = dict(request.node_type_configs)
        for group in self._gated:
            config = configs.get(group)
            if config is None:
                continue
            # What ScheduleContext counts as the group's nodes (SchedulingNode.new): the
            # instances that are or may become RAY_RUNNING.
            size = sum(1 for i in instances
                       if SchedulingNode.is_schedulable(i) and i.im_instance.instance_type == group)
            most = min(config.max_worker_nodes, size)
            configs[group] = dataclasses.replace(
                config, max_worker_nodes=most, min_worker_nodes=min(config.min_worker_nodes, most))
        return self._scheduler.schedule(dataclasses.replace(
            request, node_type_configs=configs, current_instances=instances))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scheduler, name)


def scheduling_problems() -> list[str]:
    """What this module relies on that this Ray lacks."""
    needed = ((SchedulingNode, "is_schedulable"), (InstanceUtil, "is_ray_pending"))
    return [f"{owner.__name__} has no {name}()" for owner, name in needed
            if not callable(getattr(owner, name, None))]
