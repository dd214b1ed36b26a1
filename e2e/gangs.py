"""What a gang scheduler wrote, as it wrote it: every distinct phase and condition of a
namespace's PodGroups (Volcano) or Workloads (Kueue), from a watch, and the events the
scheduler posted. The scenario report quotes them verbatim."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from testbed.api import ApiError, KubeApi

__all__ = ["GangRecorder", "Written", "events"]


@dataclass(frozen=True)
class Written:
    at: float
    name: str
    phase: str
    conditions: tuple[tuple[str, str, str, str], ...]
    """(type, status, reason, message) of each condition, in the object's order."""


@dataclass
class GangRecorder:
    api: KubeApi
    path: str
    """A namespaced collection: ``/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups``."""
    started: float
    written: list[Written] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gangs-{self.path}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                listing = self.api.get(self.path)
                for item in listing["items"]:
                    self._observe(item)
                for _, item in self.api.watch(self.path, listing["metadata"]["resourceVersion"],
                                              timeout_seconds=60):
                    if self._closed.is_set():
                        return
                    self._observe(item)
            except (ApiError, ValueError):
                self._closed.wait(0.5)

    def _observe(self, item: dict[str, Any]) -> None:
        status = item.get("status") or {}
        conditions = tuple((c.get("type", ""), c.get("status", ""), c.get("reason", ""),
                            c.get("message", "")) for c in status.get("conditions") or [])
        name = item["metadata"]["name"]
        with self._lock:
            previous = next((w for w in reversed(self.written) if w.name == name), None)
            seen = Written(time.monotonic() - self.started, name, status.get("phase", ""),
                           conditions)
            if previous is None or (previous.phase, previous.conditions) != (seen.phase,
                                                                             conditions):
                self.written.append(seen)

    def phases(self, name: str) -> list[str]:
        """The distinct phases ``name`` went through, in order."""
        with self._lock:
            phases = [w.phase for w in self.written if w.name == name]
        return [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]

    def latest(self, name: str) -> Written | None:
        with self._lock:
            return next((w for w in reversed(self.written) if w.name == name), None)

    def condition(self, name: str, kind: str) -> tuple[str, str, str, str] | None:
        """The latest condition of type ``kind`` that ``name`` carries."""
        latest = self.latest(name)
        return next((c for c in latest.conditions if c[0] == kind), None) if latest else None

    def close(self) -> None:
        self._closed.set()

    def table(self) -> str:
        lines = ["| t (s) | object | phase | conditions (type=status reason: message) |",
                 "|---:|---|---|---|"]
        with self._lock:
            for w in self.written:
                text = "<br>".join(f"{t}={s} {r}: {m}".replace("|", "\\|")
                                   for t, s, r, m in w.conditions)
                lines.append(f"| {w.at:.1f} | {w.name} | {w.phase} | {text} |")
        return "\n".join(lines) + "\n"


def events(api: KubeApi, namespace: str, *, source: str) -> str:
    """The namespace's events whose reporting component is ``source`` (``volcano``,
    ``kueue-admission``…) as a markdown table, oldest first."""
    items = api.items(f"/api/v1/namespaces/{namespace}/events")
    rows = [e for e in items if source in ((e.get("source") or {}).get("component", "")
                                           + e.get("reportingComponent", ""))]
    rows.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    lines = ["| object | type | reason | count | message |", "|---|---|---|---:|---|"]
    for e in rows:
        involved = e.get("involvedObject") or {}
        message = (e.get("message") or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {involved.get('kind')} {involved.get('name')} | {e.get('type')} | "
                     f"{e.get('reason')} | {e.get('count') or 1} | {message} |")
    return "\n".join(lines) + "\n"
