"""The documentation the tests hold to what raygate does: the README and docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def doc(name: str) -> str:
    """One page: ``README.md`` or a file of ``docs/``."""
    return (ROOT / name if name == "README.md" else ROOT / "docs" / name).read_text()


def documentation() -> str:
    """The README and every page of docs/, one after the other."""
    return "\n".join([doc("README.md"), *(p.read_text()
                                          for p in sorted((ROOT / "docs").glob("*.md")))])
