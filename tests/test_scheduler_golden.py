"""Golden wire fixtures: requests shaped like kube-scheduler's own encoding/json output
(PascalCase envelope, every key present, nulls, full Pods and Nodes), replies compared
byte for byte against the demo cluster. Regenerate after a deliberate change with
``RAYGATE_UPDATE_GOLDEN=1 make test`` and review the diff."""

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

FIXTURES = Path(__file__).parent / "fixtures" / "scheduler"
CASES = sorted(p.name.removesuffix(".request.json") for p in FIXTURES.glob("*.request.json"))


@pytest.fixture(scope="module")
def demo_server() -> Iterator[ServerThread]:
    config = PolicyConfig()
    cache = ClusterCache(config, "demo")
    cache.publish(Snapshot(load_text(demo_text(), "demo"), config))
    # 04:40: the demo's preemption at 04:05 is past the 300 s thrash guard.
    thread = ServerThread(cache, FakeClock(T0_EPOCH + 40 * 60))
    thread.start()
    yield thread
    thread.stop()


@pytest.mark.parametrize("case", CASES)
def test_golden_reply(case: str, demo_server: ServerThread) -> None:
    request = (FIXTURES / f"{case}.request.json").read_bytes()
    verbs = ["preempt"] if case.startswith("preempt") else ["filter", "prioritize"]
    with httpx.Client(base_url=demo_server.url) as client:
        for verb in verbs:
            reply = client.post(f"/scheduler/{verb}", content=request,
                                headers={"Content-Type": "application/json"})
            assert reply.status_code == 200
            golden = FIXTURES / f"{case}.{verb}.reply.json"
            if os.environ.get("RAYGATE_UPDATE_GOLDEN"):
                golden.write_bytes(reply.content)
            assert reply.content == golden.read_bytes(), f"{verb} reply drifted from {golden.name}"


def test_every_fixture_has_its_replies() -> None:
    replies = {p.name for p in FIXTURES.glob("*.reply.json")}
    for case in CASES:
        verbs = ["preempt"] if case.startswith("preempt") else ["filter", "prioritize"]
        for verb in verbs:
            assert f"{case}.{verb}.reply.json" in replies
