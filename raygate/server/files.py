"""Files raygate reads: telling that one changed, for those re-read while it runs (the
config file, TLS certificates, keys and CA bundles); what is wrong with a YAML one, in a
line."""

from __future__ import annotations

import os
from collections.abc import Iterable

import yaml

__all__ = ["Stamp", "file_stamp", "yaml_problem"]

Stamp = tuple[int, int, int, int]
"""(device, inode, size, mtime in ns) of one file."""


def file_stamp(paths: Iterable[str]) -> tuple[Stamp, ...]:
    """The stamp of each file, in order; raises ``OSError`` when one cannot be stat'ed.

    Kubernetes updates a mounted Secret or ConfigMap by swapping the ``..data`` symlink to
    a new directory: ``stat`` follows the link, so the inode changes even when the size
    and the mtime of the new file happen to match the old.
    """
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: ``line 2, column 4: mapping values are not allowed
    here``. Its own message spans lines (the source line, a caret under the column) that
    a log line or a refusal on stderr cannot hold."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(exc).split())
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context = getattr(exc, "context", None)
    if context:
        start = getattr(exc, "context_mark", None)
        where = (f" at line {start.line + 1}, column {start.column + 1}"
                 if start is not None else "")
        text += f" ({context}{where})"
    return text
