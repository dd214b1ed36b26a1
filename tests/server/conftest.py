"""Fixtures shared by the tests of raygate's server (tests/server/)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Where a test writes raygate's config file (``config_files.write_whole``)."""
    return tmp_path / "raygate.yaml"
