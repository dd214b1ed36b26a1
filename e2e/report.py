"""The scenario report: sections the tests add, written once when the session ends."""

from __future__ import annotations

from pathlib import Path

__all__ = ["add", "write"]

_sections: dict[str, str] = {}

HEADER = (
    "# raygate against the real components: scenario report\n\n"
    "Written by `make e2e` (the tests in `e2e/`) on a real etcd, kube-apiserver, "
    "kube-controller-manager, two kube-schedulers (`ray-scheduler` with raygate as its "
    "extender, configured exactly as `deploy/kube-scheduler-second` ships it, and the "
    "stock `default-scheduler`), the KubeRay operator and kwok (and Volcano, Kueue and "
    "Karpenter where a scenario says so), all built from their Go modules "
    "(`make testbed`). Nodes are simulated by kwok; every Ray pod is created by "
    "the real KubeRay operator and placed by the real kube-scheduler. Times are seconds "
    "since the scenario began.\n\n")


def add(key: str, markdown: str) -> None:
    """Put a section into the report (sections are ordered by key)."""
    _sections[key] = markdown


def write(path: Path) -> bool:
    if not _sections:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "\n".join(_sections[key] for key in sorted(_sections)))
    return True
