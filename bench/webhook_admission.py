"""raygate's own time in the Ray-pod webhook with a cluster-sized cache: 5,000 nodes and
150,000 pods (``bench.cluster_json``'s cluster: 300 RayClusters of 100 pods, 15 % GPU
nodes), loaded through raygate's own loader into one snapshot, as ``raygate serve`` holds it.

Per run, for each contender, the same AdmissionReviews (KubeRay worker pods as KubeRay sends
them to be created: a generated name, no UID) of a burst into one RayCluster's groups,
answered by ``RayPodWebhook.mutate`` in this process — raygate's handling alone, from the
review's bytes to the reply's, as ``raygate_webhook_duration_seconds`` times it; no socket,
no TLS (kube-apiserver's ``apiserver_admission_webhook_admission_duration_seconds`` adds
those: ``bench.scheduler_throughput`` reports both):

- ``decide``: the decision at admission (the role counted from the snapshot and the pods
  admitted but not seen, the rule, the patch);
- ``gate``: the gate alone, what the webhook did before it decided (its cache not read):
  the peer in the same run.

The snapshot is not republished during the burst (the pods admitted stay in the book, as
when the watch lags), so the count walks a group that grows by every pod admitted.

    .venv/bin/python -m bench.webhook_admission              # 5,000 nodes, 150,000 pods
    .venv/bin/python -m bench.webhook_admission --fast       # 500 nodes, 15,000 pods
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable

from bench.cluster_json import build_cluster, raycluster_name
from bench.payloads import FLOOR_GROUP, OVERFLOW_GROUP, ray_worker_pod
from bench.stats import percentile
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot_files import load_text
from raygate.server.fronts.webhook import RayPodWebhook
from raygate.server.metrics.registry import Metrics

__all__ = ["main"]


def _cache(n_nodes: int, n_pods: int) -> tuple[ClusterCache, float]:
    """The cluster in one snapshot through raygate's loader; and the seconds it took."""
    cluster = build_cluster(n_nodes, n_pods)
    items = [b for _, b in cluster.nodes] + [b for _, b in cluster.rayclusters] + [
        cluster.render(p) for p in cluster.pods]
    text = b'{"apiVersion":"v1","kind":"List","items":[' + b",".join(items) + b"]}"
    began = time.perf_counter()
    snapshot = build_snapshot(load_text(text.decode(), "bench"), PolicyConfig())
    cache = ClusterCache(snapshot.config, "bench")
    cache.publish(snapshot)
    return cache, time.perf_counter() - began


def _reviews(count: int) -> list[bytes]:
    """AdmissionReviews of ``count`` new workers of one RayCluster, floor group first."""
    cluster = raycluster_name(0)
    bodies = []
    for i in range(count):
        pod = ray_worker_pod(FLOOR_GROUP if i < 8 else OVERFLOW_GROUP, index=9000 + i)
        pod = json.loads(json.dumps(pod).replace("bench", cluster))
        meta = pod["metadata"]
        meta["generateName"] = meta.pop("name").rsplit("-", 1)[0] + "-"
        meta.pop("uid", None)
        for key in ("creationTimestamp", "resourceVersion"):
            meta.pop(key, None)
        pod.pop("status", None)
        pod["spec"].pop("nodeName", None)
        bodies.append(json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": f"review-{i:06d}", "operation": "CREATE", "dryRun": False,
                        "namespace": meta.get("namespace", "ray"), "object": pod}}).encode())
    return bodies


def _time(answer: Callable[[bytes], bytes], bodies: list[bytes]) -> list[float]:
    out = []
    for body in bodies:
        began = time.perf_counter()
        answer(body)
        out.append(time.perf_counter() - began)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="500 nodes, 15,000 pods")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--burst", type=int, default=1000, help="reviews per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    nodes, pods = (500, 15_000) if args.fast else (args.nodes, args.pods)
    cache, loaded = _cache(nodes, pods)
    print(f"{nodes} nodes, {pods} pods loaded in {loaded:.1f} s; {platform.python_version()}"
          f", load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    bodies = _reviews(args.burst)
    loading = ClusterCache(cache.snapshot.config, "bench")  # never ready: the gate alone
    rows: dict[str, list[float]] = {"decide": [], "gate": []}
    for _ in range(args.runs):  # interleaved; a fresh webhook (an empty book) per run
        rows["decide"] += _time(RayPodWebhook(cache, Metrics(), place=True,
                                              marker=False).mutate, bodies)
        rows["gate"] += _time(RayPodWebhook(loading, Metrics(), place=True,
                                            marker=False).mutate, bodies)
    print("| contender | reviews | p50 (µs) | p99 (µs) | max (µs) |\n|---|---:|---:|---:|---:|")
    for name, values in rows.items():
        values.sort()
        print(f"| {name} | {len(values)} | {percentile(values, .5) * 1e6:.0f} | "
              f"{percentile(values, .99) * 1e6:.0f} | {values[-1] * 1e6:.0f} |")
    ratio = percentile(rows["decide"], .99) / percentile(rows["gate"], .99)
    print(f"\ndecide / gate, p99: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
