"""The benchmarks' one writer of results: markdown tables, aligned text tables, and the
JSON and markdown files (``--json``, ``--markdown``) every benchmark writes.

Used by ``bench.report`` (``python -m bench``), ``bench.scheduler_report``,
``bench.cache_scale``, ``bench.cache_sync``, ``bench.soak`` and
``bench.admission_watchers``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["markdown_table", "text_table", "write_json", "write_text"]


def _md_line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]],
                   align: str = "") -> str:
    """A GitHub markdown table; ``align`` one letter per column, ``r`` for a right-aligned
    one (``---:``), anything else (or none) left. A ``|`` in a cell becomes ``/``."""
    specs = ["---:" if align[i:i + 1] == "r" else "---" for i in range(len(header))]
    head = "|" + "|".join(f" {h} " if h else " " for h in header) + "|"  # "| |": no title
    lines = [head, "|" + "|".join(specs) + "|"]
    lines += [_md_line(row) for row in rows]
    return "\n".join(lines)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> str:
    """Columns padded to their widest cell, the first ``left`` left-aligned and the others
    right-aligned, under a rule as long as the header."""
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(header), "-" * len(line(header)), *map(line, rows)])


def write_text(path: Path | str, text: str) -> Path:
    """``text`` into ``path``, its folder made; the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_json(path: Path | str, data: Any, indent: int = 1) -> Path:
    """``data`` as indented JSON (and a final newline) into ``path``, its folder made."""
    return write_text(path, json.dumps(data, indent=indent) + "\n")
