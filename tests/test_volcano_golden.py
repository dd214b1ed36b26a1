"""Golden Volcano fixtures: requests shaped like Volcano's Go encoding (untagged PascalCase
TaskInfo/NodeInfo/JobInfo, milli-units, TaskStatus bit flags, flattened PodGroup
metadata, a NodeInfo with 100 tasks), replies compared byte for byte against the demo
cluster. Regenerate with ``RAYGATE_UPDATE_GOLDEN=1`` and review the diff."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from extender.cache import ClusterCache, Snapshot
from extender.snapshot_files import demo_text, load_text
from plugin.config import PolicyConfig
from tests.builders import T0_EPOCH
from tests.conftest import FakeClock, ServerThread

FIXTURES = Path(__file__).parent / "fixtures" / "volcano"
CASES = sorted(p.name.removesuffix(".request.json") for p in FIXTURES.glob("*.request.json"))


@pytest.fixture(scope="module")
def demo_server() -> Iterator[ServerThread]:
    config = PolicyConfig()
    cache = ClusterCache(config, "demo")
    cache.publish(Snapshot(load_text(demo_text(), "demo"), config))
    thread = ServerThread(cache, FakeClock(T0_EPOCH + 40 * 60))
    thread.start()
    yield thread
    thread.stop()


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
