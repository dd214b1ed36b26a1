"""Fixtures shared by the tests of raygate-autoscaler's advice (tests/client/)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raygate.ray_autoscaler.advice import Advisor
from testkit.builders import T0_EPOCH
from tests.conftest import FakeClock, ServerThread


@pytest.fixture
def clock(server: ServerThread) -> FakeClock:
    """The server's clock, at the tests' "now"; the advisors read it too."""
    server.clock.now = T0_EPOCH
    return server.clock


@pytest.fixture
def advisors() -> Iterator[list[Advisor]]:
    """The advisors a test makes, closed after it."""
    made: list[Advisor] = []
    yield made
    for advisor in made:
        advisor.close()
