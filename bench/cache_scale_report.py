"""The table of ``bench.cache_scale``'s run: its ``Result`` and the markdown an operator
reads, each number beside its goal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.cache_scale_list import ListAlone, Way
from bench.cache_scale_raygate import Started
from bench.cache_scale_scheduler import SchedulerSynced
from bench.reporter import markdown_table

__all__ = ["GOALS", "Result", "markdown"]


@dataclass
class Result:
    date: str
    nodes: int
    pods: int
    rayclusters: int
    podgroups: int
    pod_json_mib: float
    load_seconds: float
    load_requests_per_s: float
    ready_s: float
    synced_log_s: float
    rss_ready_mib: float
    peak_rss_ready_mib: float
    rss_end_mib: float
    peak_rss_end_mib: float
    changes: int
    rate_per_s: float
    change_p50_ms: float
    change_p99_ms: float
    change_max_ms: float
    patch_p50_ms: float
    patch_p99_ms: float
    lone_changes: int
    lone_rate_per_s: float
    lone_p50_ms: float
    lone_p99_ms: float
    lone_patch_p50_ms: float
    alone: ListAlone
    scheduler: SchedulerSynced
    baselines: dict[str, Started]
    """raygate of each ``--baseline`` checkout (by its path), started and stopped first on
    the same API server: the before of a before/after, or another way of this one's."""
    ready_ratio: float
    """raygate's start to ready over kube-scheduler's, on the same API server."""
    pod_json_kib_served: float
    woken_by_other: int
    etcd_db_mib: float
    kinds: dict[str, Any]
    versions: dict[str, str]
    command: str


GOALS = {"ready": 15.0, "ready_ratio": 1.0, "rss": 1024.0, "change_p99": 100.0}


def markdown(r: Result) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    peak = max(r.peak_rss_ready_mib, r.peak_rss_end_mib)
    rows = [
        ("cluster", f"{r.nodes:,} nodes (15 % GPU), {r.pods:,} pods "
                    f"({r.pod_json_mib * 1024 / r.pods:.1f} KiB of JSON each as created; "
                    f"{r.pod_json_kib_served:.1f} KiB as LIST serves them, managed fields "
                    f"and all: {r.pod_json_kib_served * r.pods / 1024:,.0f} MiB), "
                    f"{r.rayclusters} RayClusters, {r.podgroups} PodGroups", ""),
        ("process start → `/readyz` 200 (every kind listed, cache published)",
         f"{r.ready_s:.1f} s (`cache synced` logged at {r.synced_log_s:.1f} s)",
         f"< {GOALS['ready']:g} s: {verdict(r.ready_s < GOALS['ready'])}"),
        ("kube-scheduler's start → `/readyz` 200 (its informers and handlers synced), "
         "the same API server", f"{r.scheduler.ready_s:.1f} s (caches populated: "
         + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(r.scheduler.populated_s.items())
                     if k in ("Node", "Pod")) + ")", ""),
        *_baseline_rows(r),
        ("raygate's ready ÷ kube-scheduler's", f"{r.ready_ratio:.2f}",
         f"≤ {GOALS['ready_ratio']:g}: {verdict(r.ready_ratio <= GOALS['ready_ratio'])}"),
        ("resident memory when ready", f"{r.rss_ready_mib:,.0f} MiB (peak {peak:,.0f} MiB; "
                                       f"{r.rss_end_mib:,.0f} MiB after the changes)",
         f"< 1 GiB: {verdict(peak < GOALS['rss'])}"),
        (f"pod change in the API → raygate's snapshot, {r.changes:,} changes at "
         f"{r.rate_per_s:g}/s", f"p50 {r.change_p50_ms:.1f} ms, p99 {r.change_p99_ms:.1f} ms "
                                f"(max {r.change_max_ms:.1f})",
         f"p99 < {GOALS['change_p99']:g} ms: {verdict(r.change_p99_ms < GOALS['change_p99'])}"),
        ("of which the PATCH's own round trip", f"p50 {r.patch_p50_ms:.1f} ms, p99 "
                                                f"{r.patch_p99_ms:.1f} ms", ""),
        (f"the same, {r.lone_changes} lone changes ({r.lone_rate_per_s:g}/s)",
         f"p50 {r.lone_p50_ms:.1f} ms, p99 {r.lone_p99_ms:.1f} ms (PATCH alone p50 "
         f"{r.lone_patch_p50_ms:.1f} ms)", ""),
        *_alone_rows(r.alone),
    ]
    out = [markdown_table(("", "measured", "goal"), rows)]
    v = r.versions
    out.append("")
    pods = r.kinds.get("Pod", {})
    out.append(f"Pod watch after the changes: {pods.get('events')} events, "
               f"{pods.get('relists')} re-lists, {pods.get('errors')} errors; "
               f"{r.woken_by_other} long-polls woken by another change.")
    out.append("")
    out.append(f"{r.date}; kube-apiserver {v['kubernetes']}, etcd {v['etcd']}, raygate "
               f"{v['raygate']}, Python {v['python']}; {v['machine']}; loaded at "
               f"{r.load_requests_per_s:,.0f} requests/s (etcd db {r.etcd_db_mib:,.0f} MiB "
               f"after); `{r.command}`")
    return "\n".join(out)


def _baseline_rows(r: Result) -> list[tuple[str, str, str]]:
    return [(f"raygate of `--baseline {source}`, first on the same API server: start → "
             "`/readyz` 200", f"{b.ready_s:.1f} s, {b.rss_kib / 1024:,.0f} MiB when ready "
             f"(peak {b.hwm_kib / 1024:,.0f} MiB); its ready ÷ kube-scheduler's "
             f"{b.ready_s / r.scheduler.ready_s:.2f}", "") for source, b in r.baselines.items()]


WAYS = {
    "pages": "LIST pages, JSON",
    "pages_gzip": "LIST pages, JSON, `Accept-Encoding: gzip`",
    "pages_protobuf": "LIST pages, protobuf (read, not decoded)",
    "stream": "the streaming list (`sendInitialEvents=true`), JSON",
    "stream_gzip": "the streaming list, JSON, `Accept-Encoding: gzip`",
}


def _alone_rows(alone: ListAlone) -> list[tuple[str, str, str]]:
    """The same nodes and pods again, raygate stopped, each way one after the other."""
    rows = []
    for name, what in WAYS.items():
        way: Way = getattr(alone, name)
        rows.append((f"the same nodes and pods again, raygate stopped: {what}",
                     f"{way.server_s:.1f} s waiting for kube-apiserver ({way.requests:,} "
                     f"requests, {way.mib:,.0f} MiB on the wire); {way.client_s:.1f} s in "
                     "raygate's inflate, decode and convert", ""))
    return rows
