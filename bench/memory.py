"""The benchmarks' one reader of a process's memory: resident set and its peak, from
Linux's ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Memory", "read_memory"]


@dataclass(frozen=True)
class Memory:
    rss_kib: int
    """Resident now (``VmRSS``)."""
    hwm_kib: int
    """The peak resident so far (``VmHWM``, the high-water mark)."""

    @property
    def rss_mib(self) -> float:
        return self.rss_kib / 1024

    @property
    def hwm_mib(self) -> float:
        return self.hwm_kib / 1024


def read_memory(pid: int | None = None) -> Memory:
    """The memory of process ``pid`` (this process when None); OSError when it is gone
    (or not on Linux)."""
    fields: dict[str, int] = {}
    status = Path(f"/proc/{'self' if pid is None else pid}/status").read_text()
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return Memory(fields.get("VmRSS", 0), fields.get("VmHWM", 0))
