"""raygate's config file as the settings tests write it: whole, as the kubelet swaps a
ConfigMap volume."""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """Replace the file whole, as the kubelet swaps a ConfigMap volume: a reader never
    sees half a file."""
    temp = path.with_suffix(".tmp")
    temp.write_text(text)
    os.replace(temp, path)
