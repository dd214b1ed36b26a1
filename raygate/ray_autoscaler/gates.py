"""KubeRay's worker-group scale gates, as ``raygate-autoscaler`` honours them (no Ray).

A gate is an entry of ``workerGroupSpecs[].scaleStrategy.scaleGate[]`` in the RayCluster
(ray-project/kuberay#5094): an external controller — Kueue for quota, raygate for
capacity or placement — says that the group cannot scale up now. Each writer keeps its
own domain-prefixed entries; an entry's name is its ``type`` (the list's merge key in the
last revision of #5094), or its ``name`` (earlier revisions).

``ScaleGates.update`` picks, once per autoscaler loop, the gates to honour: every other
writer's always, raygate's own (``raygate.io/``) only while raygate answers. A gate of
raygate's that nobody can remove must not hold a group for good, and raygate not
answering is when that can happen: fail open.

``keep_gates`` rewrites Ray's scale-down write, which would replace a group's whole
``scaleStrategy`` and every gate in it, into one of ``workersToDelete`` alone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from raygate.contract.scale_gate import gate_key, is_raygates
from raygate.process.logs import about

__all__ = ["ScaleGates", "gates_of", "keep_gates"]

log = logging.getLogger("raygate.autoscaler")


Gated = Mapping[str, tuple[str, ...]]
"""Gate names by worker group; a group without gates is absent."""


def gates_of(cluster: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The gates on each worker group of the RayCluster ``cluster``, sorted; entries
    that name no gate are left out, as are groups with none."""
    found: dict[str, tuple[str, ...]] = {}
    for group in cluster.get("spec", {}).get("workerGroupSpecs") or ():
        strategy = group.get("scaleStrategy")
        entries = strategy.get("scaleGate") if isinstance(strategy, dict) else None
        names = {name for entry in entries or () if (name := gate_key(entry)[1])}
        if names and isinstance(group.get("groupName"), str):
            found[group["groupName"]] = tuple(sorted(names))
    return found


class ScaleGates:
    """The gates one RayCluster's autoscaler honours, loop by loop, and their log: one
    line per change of a group's gates, one warning when raygate's own start to be
    ignored because raygate does not answer, one line when that ends."""

    def __init__(self, namespace: str, name: str) -> None:
        self._where = about(namespace=namespace, raycluster=name)
        self.honoured: Gated = {}
        """This loop's gates to honour, by group."""
        self.ignored: frozenset[tuple[str, str]] = frozenset()
        """(group, gate) of raygate's gates not honoured in this loop."""
        self.failed_open = 0
        """How many of raygate's gates were left unhonoured since this process started,
        each counted once per stretch of raygate not answering."""

    def update(self, cluster: Mapping[str, Any], raygate_answers: bool) -> Gated:
        """The gates to honour in this loop: ``cluster`` as just read, ``raygate_answers``
        whether raygate gave advice in this loop."""
        found = gates_of(cluster)
        honoured = {group: kept for group, gates in found.items()
                    if (kept := tuple(g for g in gates if raygate_answers or not is_raygates(g)))}
        ignored = frozenset((group, g) for group, gates in found.items() for g in gates
                            if not raygate_answers and is_raygates(g))
        self._note_ignored(ignored)
        self._note_changes(honoured)
        self.honoured = honoured
        return honoured

    def _note_ignored(self, ignored: frozenset[tuple[str, str]]) -> None:
        self.failed_open += len(ignored - self.ignored)
        if ignored and not self.ignored:
            log.warning("raygate does not answer: not honouring its scale gates (%s) until "
                        "it does, as a gate nobody can lift must not hold a group (%d "
                        "left unhonoured so far)", _pairs(ignored), self.failed_open,
                        extra=self._where)
        elif self.ignored and not ignored:
            log.info("raygate's scale gates are honoured again (%s had been ignored)",
                     _pairs(self.ignored), extra=self._where)
        self.ignored = ignored

    def _note_changes(self, honoured: Gated) -> None:
        for group in sorted(set(honoured) | set(self.honoured)):
            now, before = honoured.get(group, ()), self.honoured.get(group, ())
            if now == before:
                continue
            if now:
                log.info("worker group %s is gated (%s): no new workers, its pending ones "
                         "not counted on, demand goes to the other groups", group,
                         ", ".join(now), extra=self._where)
            else:
                log.info("worker group %s is no longer gated (was %s): it scales up again",
                         group, ", ".join(before), extra=self._where)


def _pairs(pairs: frozenset[tuple[str, str]]) -> str:
    return ", ".join(f"{group}: {gate}" for group, gate in sorted(pairs))


STRATEGY_PATH = re.compile(r"^/spec/workerGroupSpecs/(\d+)/scaleStrategy$")


def keep_gates(cluster: Mapping[str, Any], payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ray's JSON Patch of ``cluster`` (the RayCluster as read for it), with each
    ``replace`` of a group's whole ``scaleStrategy`` by ``{workersToDelete: [...]}``
    narrowed to that list, so the group's gates stay. The group's name is tested at its
    index. Where the group has no ``scaleStrategy`` yet, it is added whole, on the
    condition that the RayCluster is still the version read (a gate written meanwhile
    would be replaced); a refused patch is an error Ray retries next loop. Every other
    operation is passed on as it is."""
    out: list[dict[str, Any]] = []
    guard = False
    for op in payload:
        match = STRATEGY_PATH.match(str(op.get("path", "")))
        value = op.get("value")
        if (op.get("op") != "replace" or match is None or not isinstance(value, dict)
                or set(value) != {"workersToDelete"}):
            out.append(op)
            continue
        group = cluster["spec"]["workerGroupSpecs"][int(match[1])]
        out.append({"op": "test", "path": f"{op['path'].rsplit('/', 1)[0]}/groupName",
                    "value": group["groupName"]})
        if isinstance(group.get("scaleStrategy"), dict):
            out.append({"op": "add", "path": f"{op['path']}/workersToDelete",
                        "value": value["workersToDelete"]})
        else:
            guard = True
            out.append({"op": "add", "path": op["path"], "value": value})
    if guard:
        out.insert(0, {"op": "test", "path": "/metadata/resourceVersion",
                       "value": cluster["metadata"]["resourceVersion"]})
    return out
