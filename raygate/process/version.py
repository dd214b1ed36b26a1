"""What raygate is: its version (from the installed distribution's metadata, the one
``pyproject.toml`` sets) and the Python running it — for ``raygate --version``,
``--print-config``, the startup log line and the ``raygate_build_info`` metric."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

__all__ = ["build_labels", "describe", "raygate_version"]


def raygate_version() -> str:
    """The installed ``raygate`` distribution's version; ``unknown`` when raygate runs
    from a source tree that was never installed (no metadata to read)."""
    try:
        return version("raygate")
    except PackageNotFoundError:  # pragma: no cover - the package is installed to run
        return "unknown"


def build_labels() -> dict[str, str]:
    """The labels of ``raygate_build_info``."""
    return {
        "version": raygate_version(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


def describe(program: str = "raygate", *others: str) -> str:
    """``raygate 0.1.0 (python 3.11.7)``: what ``--version`` prints; ``others``: more
    distributions whose versions matter to ``program`` (``not installed`` when absent)."""
    versions = [f"python {platform.python_version()}"]
    for name in others:
        try:
            versions.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            versions.append(f"{name} not installed")
    return f"{program} {raygate_version()} ({', '.join(versions)})"
