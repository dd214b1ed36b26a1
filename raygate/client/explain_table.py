"""``raygate explain --output table``: the reply as a human reads it."""

from __future__ import annotations

import msgspec

from raygate.contract.admission_status import ScaleGate
from raygate.contract.explain import ExplainReply

__all__ = ["render_table"]


def _gate(gate: ScaleGate) -> str:
    """``scale gate NAME (WRITER, since T): REASON``. One raygate wants that is not on the
    RayCluster (not written yet, or its CRD has no ``scaleGate``) says so: no autoscaler
    sees it there."""
    said = [gate.writer]
    if gate.since is not None:
        said.append(f"since {msgspec.to_builtins(gate.since)}")  # as the JSON writes it
    if gate.wanted and not gate.present:
        said.append("not on the RayCluster")
    return f"  scale gate {gate.name} ({', '.join(said)}): {gate.reason}"


def render_table(reply: ExplainReply) -> str:
    until = msgspec.to_builtins(reply.thrash_guard_until)  # as the JSON writes it
    lines = [
        f"pod {reply.pod}: {reply.verdict} ({reply.rule})"
        + (f", role {reply.role}" if reply.role else ""),
        f"  why: {reply.reason}",
        "  thrash guard: " + (f"active until {until}" if reply.thrash_guard_active else
                              f"off (last ended {until})" if until else "off"),
    ]
    if reply.admission_state:
        lines.append(f"  admission: {reply.admission_state}: {reply.admission_reason}")
    lines += [_gate(gate) for gate in reply.scale_gates]
    if reply.native_placement:
        lines.append(f"  native placement: {reply.native_placement}")
    width = max([len(n.name) for n in reply.nodes] + [4])
    lines.append(f"  {'NODE':<{width}}  CLASS    FILTER  SCORE  WHY")
    for n in reply.nodes:
        score = "-" if n.score is None else str(n.score)
        lines.append(f"  {n.name:<{width}}  {n.node_class:<7}  {'pass' if n.passes else 'FAIL':<6}"
                     f"  {score:>5}  {n.class_reason}; {n.reason}")
    return "\n".join(lines) + "\n"
