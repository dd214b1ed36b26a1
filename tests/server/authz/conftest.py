"""The authz tests' environments: one shared by the tables, one fresh per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.authz.harness import Env, make_env


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One environment for the tables: their answers do not depend on the cache."""
    yield from make_env(tmp_path_factory.mktemp("authz"))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A fresh environment: empty caches, review counts from zero."""
    yield from make_env(tmp_path)
