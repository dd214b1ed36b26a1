"""Golden wire fixtures: requests shaped like kube-scheduler's own encoding/json output
(PascalCase envelope, every key present, nulls, full Pods and Nodes), replies compared
byte for byte against the demo cluster. Regenerate after a deliberate change with
``RAYGATE_UPDATE_GOLDEN=1 make test`` and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests.conftest import ServerThread

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
CASES = sorted(p.name.removesuffix(".request.json") for p in FIXTURES.glob("*.request.json"))


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
