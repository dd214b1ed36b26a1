"""Fixtures shared by the tests of raygate's server (tests/server/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ServerThread
from tests.server.pki import Pki, start


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Where a test writes raygate's config file (``config_files.write_whole``)."""
    return tmp_path / "raygate.yaml"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[ServerThread]:
    thread = start(pki, mtls=False)
    yield thread
    thread.stop()


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[ServerThread]:
    thread = start(pki, mtls=True)
    yield thread
    thread.stop()
