"""``raygate explain``'s table: a line per scale gate of the pod's group, after its admission
state (which, writer, since when, whether it is on the RayCluster yet, why)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from raygate.client.explain_table import render_table
from raygate.contract.admission_status import ScaleGate
from raygate.contract.explain import ExplainReply

SINCE = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
NO_NODE = "raygate.io/no-node-coming"


def reply(*gates: ScaleGate) -> ExplainReply:
    return ExplainReply(
        pod="ray/w", verdict="prefer-cpu", rule="surplus-prefers-cpu", role="surplus",
        reason="why", thrash_guard_until=None, thrash_guard_active=False,
        admission_state="NoNodeComing", admission_reason="karpenter: no NodePool fits",
        nodes=[], scale_gates=list(gates))


@pytest.mark.parametrize(("gates", "lines"), [
    ((), []),
    ((ScaleGate(NO_NODE, "raygate", "pod w: no NodePool fits", SINCE, wanted=True,
                present=True),),
     [f"  scale gate {NO_NODE} (raygate, since 2026-11-30T04:00:00Z): pod w: no NodePool "
      "fits"]),
    ((ScaleGate(NO_NODE, "raygate", "pod w: none", None, wanted=True, present=False),),
     [f"  scale gate {NO_NODE} (raygate, not on the RayCluster): pod w: none"]),
    ((ScaleGate(NO_NODE, "raygate", "no reason for it holds now: raygate removes it", None,
                wanted=False, present=True),
      ScaleGate("kueue.k8s.io/quota-exceeded", "other", "set by another controller", None,
                wanted=False, present=True)),
     [f"  scale gate {NO_NODE} (raygate): no reason for it holds now: raygate removes it",
      "  scale gate kueue.k8s.io/quota-exceeded (other): set by another controller"]),
])
def test_a_line_per_scale_gate_after_the_admission_state(
        gates: tuple[ScaleGate, ...], lines: list[str]) -> None:
    table = render_table(reply(*gates)).splitlines()
    admission = table.index("  admission: NoNodeComing: karpenter: no NodePool fits")
    assert table[admission + 1:admission + 1 + len(lines)] == lines
    assert table[admission + 1 + len(lines)].lstrip().startswith("NODE")
