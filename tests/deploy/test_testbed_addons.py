"""The testbed's add-ons in one shape (``testbed.addon.AddOn``), without a cluster: a
testbed that was never started runs small Python processes as add-ons."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.addon import AddOn, answers
from testbed.cluster import CONTROL_PLANE, Testbed
from testbed.components import KubeRay, KubeScheduler, Kwok, Raygate
from testbed.control_plane import ControlPlane
from testbed.processes import Process, StartError

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
EXIT = [sys.executable, "-c", "raise SystemExit(3)"]


class Sleeper(AddOn):
    """``processes`` processes that sleep; ready once all run."""

    def __init__(self, name: str, processes: int = 1, argv: list[str] = SLEEP) -> None:
        super().__init__()
        self.name = name
        self.count = processes
        self.argv = argv
        self.timeout = 5.0

    def launch(self, testbed: ControlPlane) -> None:
        for i in range(self.count):
            self.run(f"{self.name}-{i}", list(self.argv))


@pytest.fixture
def testbed(tmp_path: Path) -> Iterator[Testbed]:
    made = Testbed(tmp_path)
    yield made
    made.stop()


def stop_order(testbed: Testbed, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    stopped: list[str] = []
    real = Process.stop

    def record(process: Process, timeout: float = 15.0) -> None:
        stopped.append(process.name)
        real(process, timeout)

    monkeypatch.setattr(Process, "stop", record)
    testbed.stop()
    return stopped


def test_an_added_addon_is_started_ready_and_kept(testbed: Testbed) -> None:
    addon = testbed.add(Sleeper("a", processes=2))
    assert testbed.addons == [addon]
    assert addon.ready()
    assert addon.process_names == ["a-0", "a-1"]
    assert [p.name for p in addon.processes] == ["a-0", "a-1"]
    assert addon.process is testbed.processes["a-1"]
    assert testbed.addon(Sleeper) is addon
    assert testbed.addon(KubeRay) is None


def test_an_addon_stops_alone_and_starts_again(testbed: Testbed) -> None:
    addon = testbed.add(Sleeper("a"))
    first = addon.process
    addon.stop()
    assert not addon.ready()
    assert addon.processes == []
    assert "a-0" not in testbed.processes  # no longer supervised
    assert first is not None and not first.alive
    testbed.add(addon)
    assert addon.ready()
    assert testbed.addons == [addon]
    assert addon.process_names == ["a-0"]


def test_an_addon_takes_the_place_of_one_of_the_same_name(testbed: Testbed) -> None:
    first = testbed.add(Sleeper("a"))
    other = testbed.add(Sleeper("b"))
    first.stop()
    second = testbed.add(Sleeper("a"))
    assert testbed.addons == [other, second]
    assert testbed.addon(Sleeper) is second


class Unanswering(Sleeper):
    readiness = "an answer"

    def ready(self) -> bool:
        return False


def test_an_addon_whose_process_exits_before_it_is_ready_does_not_start(
        testbed: Testbed) -> None:
    with pytest.raises(StartError, match="an answer: broken-0 exited with 3"):
        testbed.add(Unanswering("broken", argv=EXIT))


def test_an_addon_never_ready_does_not_start(testbed: Testbed) -> None:
    addon = Unanswering("mute")
    addon.timeout = 0.3
    with pytest.raises(StartError, match="an answer: not ready after 0 s"):
        testbed.add(addon)


def test_stop_goes_strays_then_addons_last_started_first_then_the_control_plane(
        testbed: Testbed, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CONTROL_PLANE:  # as start() would have run them
        testbed.run(name, SLEEP)
    testbed.add(Sleeper("first", processes=2))
    testbed.run("a-scenarios-own", SLEEP)
    testbed.add(Sleeper("second"))
    assert stop_order(testbed, monkeypatch) == [
        "a-scenarios-own", "second-0", "first-1", "first-0",
        "kube-controller-manager", "kube-apiserver", "etcd"]
    assert not any(process.alive for process in testbed.processes.values())


def test_an_addon_not_started_has_no_testbed() -> None:
    addon = Sleeper("idle")
    assert addon.processes == []
    assert not addon.ready()
    addon.stop()  # nothing to stop
    with pytest.raises(RuntimeError, match="idle has not started"):
        _ = addon.testbed


def test_the_standard_addons_keep_their_process_names() -> None:
    """The names scenarios and benchmarks look processes up by."""
    assert (KubeRay.name, Kwok.name, Raygate.name) == ("kuberay-operator", "kwok", "raygate")
    scheduler = KubeScheduler("ray-scheduler", Path("c.yaml"), "k", 1)
    assert scheduler.name == "ray-scheduler"


def test_answers_is_false_when_nothing_listens() -> None:
    assert not answers("http://127.0.0.1:1/healthz")
    assert not answers("not a url")
