"""Golden Volcano fixtures: requests shaped like Volcano's Go encoding (untagged PascalCase
TaskInfo/NodeInfo/JobInfo, milli-units, TaskStatus bit flags, flattened PodGroup
metadata, a NodeInfo with 100 tasks), replies compared byte for byte against the demo
cluster. Regenerate with ``RAYGATE_UPDATE_GOLDEN=1`` and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests.conftest import ServerThread

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "volcano"
CASES = sorted(p.name.removesuffix(".request.json") for p in FIXTURES.glob("*.request.json"))


@pytest.mark.parametrize("case", CASES)
def test_golden_reply(case: str, demo_server: ServerThread) -> None:
    verb = case.split("-", maxsplit=1)[0].removesuffix(".request.json")
    request = (FIXTURES / f"{case}.request.json").read_bytes()
    with httpx.Client(base_url=demo_server.url) as client:
        reply = client.post(f"/volcano/{verb}", content=request,
                            headers={"Content-Type": "application/json"})
    assert reply.status_code == 200
    golden = FIXTURES / f"{case}.reply.json"
    if os.environ.get("RAYGATE_UPDATE_GOLDEN"):
        golden.write_bytes(reply.content)
    assert reply.content == golden.read_bytes()
