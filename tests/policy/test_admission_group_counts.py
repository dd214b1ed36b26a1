"""The admission status's groups (``raygate.policy.admission``): their counts, and the
scale-up advice with its reasons."""

from __future__ import annotations

from typing import Any

from raygate.policy.admission import (
    AdmissionStatus,
    ScaleUp,
)
from testkit.builders import make_raycluster
from tests import admission_scenarios as sc
from tests.policy.derivation import derive


def _groups(status: AdmissionStatus) -> dict[str, tuple[Any, ...]]:
    return {g.name: (g.floor, g.desired, g.scheduled, g.running, g.pending, g.preempted,
                     g.scale_up.action) for g in status.groups}


def test_group_counts_and_scale_up() -> None:
    hold, go = ScaleUp.HOLD, ScaleUp.PROCEED
    assert _groups(derive(sc.inqueue_gang(), "queued").status) == {
        "headgroup": (1, 1, 0, 0, 1, 0, hold), "workers": (2, 2, 0, 0, 2, 0, hold)}
    assert _groups(derive(sc.waiting_for_capacity(), "demo").status) == {
        "headgroup": (1, 1, 1, 1, 0, 0, hold), "baseline": (1, 1, 1, 1, 0, 0, go),
        "overflow": (0, 3, 0, 0, 3, 0, hold)}
    assert _groups(derive(sc.preempted(), "demo").status)["overflow"] == (
        0, 2, 0, 0, 1, 1, hold)
    assert _groups(derive(sc.stuck(), "lonely").status)["workers"] == (3, 3, 1, 0, 3, 0, go)
    assert _groups(derive(sc.kueue_admitted(), "kq").status)["workers"] == (
        2, 2, 2, 1, 1, 0, go)
    # kw-w1, behind raygate's own gate for a moment, is pending like any new pod; so is
    # kw-w2, behind another controller's.
    assert _groups(derive(sc.kueue_waiting(), "kw").status)["workers"] == (
        1, 1, 0, 0, 2, 0, hold)
    assert _groups(derive(sc.no_gang(), "plain").status)["workers"] == (6, 6, 0, 0, 5, 0, hold)


def test_scale_up_reasons() -> None:
    def reason(scenario: str, group: str) -> str:
        status = derive(sc.SCENARIOS[scenario](), sc.CLUSTERS[scenario]).status
        return next(g.scale_up.reason for g in status.groups if g.name == group)

    assert "wait for admission" in reason("inqueue-gang", "workers")
    assert "2 pods of this group already waiting for capacity" in reason(
        "waiting-for-capacity", "overflow")
    assert "cannot be placed" in reason("no-gang", "workers")
    assert "does not scale" in reason("no-gang", "headgroup")
    assert "gang is admitted" in reason("kueue-admitted", "workers")
    assert "no gang gates" in reason("stuck", "workers")


def test_suspended_cluster_holds() -> None:
    rc = make_raycluster("rc").group("w", replicas=2, min=1).obj()
    rc["spec"]["suspend"] = True
    status = derive([rc], "rc").status
    w = next(g for g in status.groups if g.name == "w")
    assert (w.desired, w.floor, w.scale_up.action) == (0, 0, ScaleUp.HOLD)
    assert "suspended" in w.scale_up.reason
