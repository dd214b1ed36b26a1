"""The documentation's examples return what it says they return: each curl reply of the
README is the golden reply that tests/fronts/test_scheduler_golden.py checks against a real
server; each console example of docs/ is raygate's real output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.fronts.scheduler import SchedulerExtender, scheduler_routes
from tests.docs import doc, documentation

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = re.compile(
    r"curl -s localhost:8888/scheduler/(?P<verb>\w+) -d @(?P<file>\S+)\n```\n```json\n"
    r"(?P<reply>.*?)\n```", re.S)


def test_readme_gives_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_curl_examples_match_the_golden_replies() -> None:
    readme = (ROOT / "README.md").read_text()
    examples = list(EXAMPLE.finditer(readme))
    assert len(examples) >= 4
    for example in examples:
        request = ROOT / example["file"]
        assert request.exists(), example["file"]
        golden = Path(str(request).replace(".request.json", f".{example['verb']}.reply.json"))
        assert example["reply"].encode() == golden.read_bytes().strip(), golden.name


def test_readme_stays_an_overview() -> None:
    # The rest is in docs/: the README is what an operator reads first.
    assert len(doc("README.md").splitlines()) <= 250


def test_the_extender_stanza_points_at_served_routes() -> None:
    readme = doc("deploy.md")
    prefix = re.search(r'urlPrefix: "http://127.0.0.1:8888(?P<path>/\w+)"', readme)
    assert prefix is not None
    served = scheduler_routes(SchedulerExtender(ClusterCache(PolicyConfig(), "test")))
    for verb in ("filter", "prioritize", "preempt"):
        assert f"{verb}Verb: {verb}" in readme
        assert f"{prefix['path']}/{verb}" in served



def _console_blocks(readme: str) -> list[tuple[list[str], str]]:
    blocks = re.findall(r"```console\n\$ raygate (?P<args>[^\n]+)\n(?P<out>.*?)```", readme, re.S)
    return [(args.split(), out) for args, out in blocks]


def test_console_examples_are_real_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from raygate.cli import main

    monkeypatch.chdir(ROOT)
    blocks = _console_blocks(documentation())
    assert len(blocks) >= 2
    for args, shown in blocks:
        main(args)
        assert capsys.readouterr().out == shown, " ".join(args)
