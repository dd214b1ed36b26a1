"""The live cache at scale on the real kube-apiserver: 5,000 nodes and 150,000 pods.

``bench/cache_sync.py`` measures raygate's cache against the API-server double of
``testkit/apiserver.py``; this measures it against the testbed's own etcd and
kube-apiserver (``testbed.cluster.Testbed(control_plane_only=True)``: the versions of
``testbed/modules``, the CRDs of KubeRay, Volcano and Kueue installed, nothing else
running — no scheduler, no controllers, no kubelet or kwok to change a pod meanwhile).

1. **Load** (not measured, only its rate printed): the cluster of ``bench.cache_sync``
   created through the API by concurrent requests over the admin client certificate —
   nodes of ``bench.payloads.node`` (15 % GPU), 300 RayClusters with a Volcano PodGroup
   each (named as KubeRay names them; no pod refers to it, as in ``bench.cache_sync``),
   and the pods, bound at create (``spec.nodeName``), their status (Running, Ready)
   written by a second request as a kubelet would: the API server drops the status a
   create carries. 20 % are KubeRay workers (~7 KB), the rest ~4 KB web pods, in 41
   namespaces whose ServiceAccounts are created first (admission requires them).
2. **Start**: ``python -m raygate serve --kubeconfig=<admin>`` with the settings of
   ``deploy/base/configmap.yaml`` (authz off: nothing here reviews tokens), a process
   of its own. Measured: seconds from the process's start to ``/readyz`` 200 (every kind
   listed: the cache is published) and to the ``cache synced`` log line; resident memory
   (psutil) then, and its peak (``VmHWM``) then and at the end.
3. **Changes**: 1,000 distinct RayCluster worker pods, 20 a second, each turned not Ready
   by a status patch (``Ready``/``ContainersReady`` False) as a failing probe does. A
   pod that is not ready enters its RayCluster's admission status (``raygate.policy.
   admission``: every pod not running), which raygate's admission-status API serves with
   an ETag and a long-poll (``GET /v1/namespaces/ray/rayclusters/<rc>/admission?
   waitForChange=<etag>``): the long-poll answers as soon as a snapshot holding the
   change is published and the status derived from it, without polling. Timed: from
   just before the PATCH is sent to the long-poll's reply listing the pod — the API
   server's write, its watch fan-out, raygate's decode, apply, publish and one
   RayCluster's derivation, and a loopback round trip; the PATCH's own round trip is
   reported beside it. At 20 a second a change usually waits for the cache's next
   publish slot (``WatchSettings.publish_interval``, 50 ms); 100 more changes, 250 ms
   apart, show a change published alone.
4. **The initial LIST, taken apart** (``list_alone``), with raygate stopped: raygate's
   LIST of nodes and pods again, page after page, timing kube-apiserver's pages and
   raygate's own decode and convert of them apart (in raygate they overlap), and each
   page again as protobuf: which side of the connection the time to ready is spent on.

Checks (the run fails on these, never on slowness): raygate's ``/readyz`` counts the
objects loaded, every changed pod is in its cluster's admission status, raygate logged
no error and exits cleanly, no component crashed.

Run::

    .venv/bin/python -m bench.cache_scale              # 5,000 nodes, 150,000 pods
    .venv/bin/python -m bench.cache_scale --fast       # 500 nodes, 5,000 pods, 200 changes
                                                       # (2-3 min)
    .venv/bin/python -m bench.cache_scale --nodes 2000 --pods 60000 --json out.json

The testbed's binaries must be built (``python -m testbed build``; cached).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from bench.cache_scale_list import ListAlone, list_alone
from bench.cache_scale_load import SERVER_SET, Loaded, load, podgroup
from bench.cache_scale_raygate import (
    Changes,
    Raygate,
    Started,
    apply_changes,
    changed_pods,
    not_ready,
    start_raygate,
)
from bench.cache_scale_report import Result, markdown
from bench.cache_scale_scheduler import SchedulerSynced, scheduler_sync
from bench.cluster_json import Cluster, build_cluster
from bench.reporter import write_json
from bench.stats import p50_p99
from raygate.server.kube.transport import WatchSettings
from testbed.api import ApiError, KubeApi
from testbed.cluster import REPO, Testbed, TestbedError
from testbed.processes import StartError

__all__ = ["SERVER_SET", "ListAlone", "Result", "changed_pods", "main", "markdown",
           "not_ready", "podgroup", "run"]

Obj = dict[str, Any]

HOST = "127.0.0.1"
LOAD_WORKERS = 16
"""Concurrent requests while loading: enough to keep kube-apiserver and etcd busy on two
cores (this side spends ~0.6 ms of CPU per request; kube-apiserver 3-6 ms, most of it
decoding, validating and tracking managed fields of a 5-14 KB pod)."""
ETCD_QUOTA_BYTES = 8 * 2**30
"""etcd's default quota (2 GiB) holds 150,000 pods, but each pod is written twice (create,
status) and the history stays until the next compaction (the testbed compacts every
minute, and compaction frees pages without shrinking the file): 8 GiB, etcd's suggested
maximum, rules out a run that fails with "mvcc: database space exceeded"."""
LONE_CHANGES = 100
LONE_RATE = 4.0
"""Changes a second in the second series: 250 ms apart, five publish intervals."""


# --- the run ----------------------------------------------------------------------------


def served_pod_kib(api: KubeApi, cluster: Cluster) -> float:
    """KiB of JSON per pod in kube-apiserver's LIST pages (``managedFields`` and all, which
    ``kubectl get -o json`` hides and the double's pods lack), from a page of Ray pods and
    one of web pods weighted by their numbers."""
    ray = sum(1 for p in cluster.pods if p.cluster)
    web_namespace = next((p.namespace for p in cluster.pods if not p.cluster), "")
    total = 0.0
    for namespace, count in (("ray", ray), (web_namespace, len(cluster.pods) - ray)):
        if count:
            page = api.call("GET", f"/api/v1/namespaces/{namespace}/pods?limit=200")
            total += len(page) / len(msgspec.json.decode(page)["items"]) * count
    return total / len(cluster.pods) / 1024


def _etcd_db_mib(workdir: Path) -> float:
    db = workdir / "etcd" / "member" / "snap" / "db"
    return db.stat().st_size / 2**20 if db.exists() else 0.0


def versions() -> dict[str, str]:
    from importlib import metadata

    def module(name: str) -> str:
        text = (REPO / "testbed" / "modules" / name / "go.mod").read_text()
        found = re.search(r"^require\s+\S+\s+(v\S+)", text, re.M)
        return found.group(1) if found else "?"

    return {"python": platform.python_version(), "raygate": metadata.version("raygate"),
            "etcd": module("etcd"), "kubernetes": module("kubernetes"),
            "machine": f"{os.cpu_count()} CPUs, {platform.release()}"}


@dataclass
class Ended:
    """After the changes: raygate's memory (KiB), the pods' size as served, the watches'
    counts, and the LIST taken apart."""

    rss_kib: int
    hwm_kib: int
    served_kib: float
    kinds: dict[str, Any]
    alone: ListAlone
    scheduler: SchedulerSynced


def _start_testbed(testbed: Testbed, workdir: Path, cluster: Cluster) -> tuple[KubeApi, Loaded]:
    try:
        testbed.start()
    except StartError as exc:
        raise TestbedError(str(exc)) from None
    print(f"testbed: etcd and kube-apiserver up in {workdir}", flush=True)
    api = KubeApi(testbed.server, testbed.admin_ssl_context())
    loaded = load(api, cluster, LOAD_WORKERS)
    print(f"load: {loaded.requests:,} requests in {loaded.seconds:.0f}s "
          f"({loaded.requests / loaded.seconds:,.0f}/s); etcd db "
          f"{_etcd_db_mib(workdir):,.0f} MiB", flush=True)
    return api, loaded


def _changes(api: KubeApi, raygate: Raygate, cluster: Cluster, n_changes: int,
             rate: float) -> tuple[Changes, Changes]:
    """``n_changes`` at ``rate``, then ``LONE_CHANGES`` far enough apart that each is
    published alone, not in the next publish slot (WatchSettings.publish_interval) after
    the one before."""
    targets = changed_pods(cluster, n_changes + LONE_CHANGES)
    changes = apply_changes(api, raygate, targets[:n_changes], rate)
    lat = p50_p99(changes.seconds_to_admission, 1e3, empty=0.0)
    patch = p50_p99(changes.patch_round_trip, 1e3, empty=0.0)
    print(f"changes: {len(changes.seconds_to_admission)} at {rate:g}/s: p50 {lat[0]:.1f} ms, "
          f"p99 {lat[1]:.1f} ms (PATCH alone p50 {patch[0]:.1f} ms)", flush=True)
    lone = apply_changes(api, raygate, targets[n_changes:], LONE_RATE)
    lat = p50_p99(lone.seconds_to_admission, 1e3, empty=0.0)
    print(f"lone changes: {LONE_CHANGES} at {LONE_RATE:g}/s: p50 {lat[0]:.1f} ms, p99 "
          f"{lat[1]:.1f} ms", flush=True)
    return changes, lone


def _end(api: KubeApi, raygate: Raygate, testbed: Testbed, cluster: Cluster,
         loaded: Loaded) -> Ended:
    """raygate's last numbers; stop it, check it and the testbed, then the LIST alone."""
    rss_end, hwm_end = raygate.memory_kib()
    served_kib = served_pod_kib(api, cluster)
    _, _, body = raygate.get("/readyz")
    kinds = json.loads(body).get("kinds", {})
    if not raygate.alive:
        raise RuntimeError(f"raygate exited:\n{raygate.tail()}")
    dead = [name for name, p in testbed.processes.items() if not p.alive]
    if dead or testbed.restarts:
        raise RuntimeError(f"testbed components exited: {dead or testbed.restarts}")
    code = raygate.stop()
    if code != 0:
        raise RuntimeError(f"raygate exited with {code}:\n{raygate.tail()}")
    if problems := raygate.problems():
        raise RuntimeError("raygate logged errors:\n  " + "\n  ".join(problems[:10]))
    scheduler = scheduler_sync(testbed)
    print(f"kube-scheduler: ready (informers and handlers synced) in {scheduler.ready_s:.2f}s; "
          "caches populated at " + ", ".join(f"{k} {v:.1f}s" for k, v in
                                             sorted(scheduler.populated_s.items())), flush=True)
    alone = list_alone(api, WatchSettings().page_size)
    for name, way in asdict(alone).items():
        print(f"the state alone, {name}: {way['requests']} requests, {way['items']:,} objects, "
              f"{way['mib']:,.0f} MiB; waiting for kube-apiserver {way['server_s']:.1f}s, "
              f"this side {way['client_s']:.1f}s", flush=True)
        if name != "pages_protobuf" and way["items"] != loaded.nodes + loaded.pods:
            raise RuntimeError(f"{name} read {way['items']:,} nodes and pods, loaded "
                               f"{loaded.nodes + loaded.pods:,}: it does not measure the LIST")
    return Ended(rss_end, max(hwm_end, raygate.peak_sampled_kib), served_kib,
                 {k: {f: v.get(f) for f in ("objects", "events", "relists", "errors")}
                  for k, v in kinds.items()}, alone, scheduler)


def _result(loaded: Loaded, started: Started, changes: Changes, lone: Changes,
            ended: Ended, *, rate: float, workdir: Path, command: str) -> Result:
    lat = changes.seconds_to_admission
    # (p50, p99) in ms, nearest rank (bench.stats); 0 for none.
    change_ms = p50_p99(lat, 1e3, empty=0.0)
    lone_ms = p50_p99(lone.seconds_to_admission, 1e3, empty=0.0)
    patch = p50_p99(changes.patch_round_trip, 1e3, empty=0.0)
    return Result(
        date=datetime.now(UTC).isoformat(timespec="seconds"), nodes=loaded.nodes,
        pods=loaded.pods, rayclusters=loaded.rayclusters, podgroups=loaded.podgroups,
        pod_json_mib=loaded.pod_json_bytes / 2**20, load_seconds=loaded.seconds,
        load_requests_per_s=loaded.requests / loaded.seconds, ready_s=started.ready_s,
        synced_log_s=started.synced_s, rss_ready_mib=started.rss_kib / 1024,
        peak_rss_ready_mib=started.hwm_kib / 1024, rss_end_mib=ended.rss_kib / 1024,
        peak_rss_end_mib=ended.hwm_kib / 1024, changes=len(lat), rate_per_s=rate,
        change_p50_ms=change_ms[0], change_p99_ms=change_ms[1],
        change_max_ms=max(lat) * 1e3, patch_p50_ms=patch[0], patch_p99_ms=patch[1],
        lone_changes=len(lone.seconds_to_admission), lone_rate_per_s=LONE_RATE,
        lone_p50_ms=lone_ms[0], lone_p99_ms=lone_ms[1],
        lone_patch_p50_ms=p50_p99(lone.patch_round_trip, 1e3, empty=0.0)[0], alone=ended.alone,
        scheduler=ended.scheduler, baselines={},
        ready_ratio=started.ready_s / ended.scheduler.ready_s,
        pod_json_kib_served=ended.served_kib,
        woken_by_other=changes.woken_by_other + lone.woken_by_other,
        etcd_db_mib=_etcd_db_mib(workdir), kinds=ended.kinds, versions=versions(),
        command=command)


def _baseline(testbed: Testbed, workdir: Path, loaded: Loaded, source: Path, n: int,
              ) -> Started:
    """raygate of another checkout to ready, then stopped (its start is checked as this
    one's is)."""
    baseline = Raygate(testbed.admin_kubeconfig, workdir, source, f"raygate-baseline-{n}")
    try:
        print(f"baseline: raygate of {source}", flush=True)
        return start_raygate(baseline, loaded)
    finally:
        # Not this run's raygate: how it exits is reported, not checked (one of the
        # commit before this bench's exited with SIGABRT at a SIGTERM just after ready).
        code = baseline.stop()
        if code != 0:
            print(f"baseline: raygate of {source} exited with {code}", flush=True)


def run(n_nodes: int, n_pods: int, n_changes: int, rate: float, *, command: str,
        keep: bool = False, baselines: list[Path] | None = None) -> Result:
    cluster = build_cluster(n_nodes, n_pods)
    workdir = Path(tempfile.mkdtemp(prefix="raygate-cache-scale-"))
    testbed = Testbed(workdir, control_plane_only=True, etcd_quota_bytes=ETCD_QUOTA_BYTES)
    raygate: Raygate | None = None
    try:
        api, loaded = _start_testbed(testbed, workdir, cluster)
        before = {str(source): _baseline(testbed, workdir, loaded, source, n)
                  for n, source in enumerate(baselines or ())}
        raygate = Raygate(testbed.admin_kubeconfig, workdir)
        started = start_raygate(raygate, loaded)
        changes, lone = _changes(api, raygate, cluster, n_changes, rate)
        ended = _end(api, raygate, testbed, cluster, loaded)
        result = _result(loaded, started, changes, lone, ended, rate=rate, workdir=workdir,
                         command=command)
        result.baselines = before
        return result
    finally:
        if raygate is not None:
            raygate.stop()
        testbed.stop()
        if keep:
            print(f"kept {workdir}")
        else:
            subprocess.run(["rm", "-rf", str(workdir)], check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0, help="pod changes per second")
    parser.add_argument("--fast", action="store_true",
                        help="CI size: 500 nodes, 5,000 pods, 200 changes")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    parser.add_argument("--baseline", metavar="DIR", type=Path, action="append",
                        help="first start raygate from this checkout (another commit's, "
                             "git archive'd), to ready, on the same loaded API server; "
                             "may be given more than once")
    parser.add_argument("--keep", action="store_true",
                        help="keep the testbed's directory (logs, etcd data)")
    args = parser.parse_args(argv)
    if args.fast:
        args.nodes, args.pods, args.changes = 500, 5000, min(args.changes, 200)
    command = "python -m bench.cache_scale " + " ".join(
        sys.argv[1:] if argv is None else argv)
    try:
        result = run(args.nodes, args.pods, args.changes, args.rate, command=command.strip(),
                     keep=args.keep, baselines=args.baseline)
    except (TestbedError, RuntimeError, ApiError, ValueError) as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    print()
    print(markdown(result))
    if args.json:
        write_json(args.json, asdict(result), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
