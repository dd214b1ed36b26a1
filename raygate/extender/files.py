"""Telling that a file changed, for the files raygate re-reads while it runs (the config
file, TLS certificates, keys and CA bundles)."""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["Stamp", "file_stamp"]

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
