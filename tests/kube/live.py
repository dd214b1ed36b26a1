"""raygate's live source following the API-server double (``testkit/apiserver.py``) on
loopback, through the real ``kubernetes`` client and a generated kubeconfig: ``Live``
starts both and waits (generously) for the cache to show what it must; the retry delays
are injected small."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.keys import KINDS, key_of
from raygate.server.cache.snapshot import Snapshot
from raygate.server.kube.client import KubeTransport, load_connection
from raygate.server.kube.source import LiveSource
from raygate.server.kube.transport import BackoffPolicy, WatchSettings
from testkit.apiserver import CORE, CRDS, ApiServerDouble
from testkit.builders import (
    Obj,
    make_node,
    make_pod,
    make_raycluster,
)

NODES, PODS, EVENTS = CORE
RAYCLUSTERS, PODGROUPS, WORKLOADS_V1BETA2, WORKLOADS_V1BETA1, NODECLAIMS = CRDS
WAIT = 20.0  # seconds: generous, only spent when something is broken
NO_DRA = ["DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"]
"""The DRA kinds, absent from a double that does not serve resource.k8s.io (in the order
raygate follows its kinds: what makes a GPU node first, the claims last)."""
GANGS = "PodGroup.scheduling.k8s.io"  # Kubernetes' own gangs: not served by default

FAST = WatchSettings(page_size=2, rediscover_seconds=0.05, request_timeout=10.0,
                     backoff=BackoffPolicy(initial=0.01, maximum=0.05), freeze_gc=False,
                     stream_list=True)
"""The streaming list where the double serves it (it does unless told not to)."""
PAGES = replace(FAST, stream_list=False)
"""LIST pages only, raygate's default."""


class Live:
    """A double, raygate's live source following it, and helpers to wait on both."""

    def __init__(self, tmp_path: Path, settings: WatchSettings = FAST, **double: Any) -> None:
        self.double = ApiServerDouble(**double).start()
        self.double.install(RAYCLUSTERS)
        self.double.install(PODGROUPS)
        self.kubeconfig = self.double.kubeconfig(tmp_path / "kubeconfig")
        self.cache = ClusterCache(PolicyConfig(), "double")
        self.settings = settings
        self.source: LiveSource | None = None
        self._changed = threading.Condition()
        self.cache.add_listener(self._notify)
        # Status counters change without a publish: wake the waiters every 10 ms too.
        self._ticking = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._ticking.wait(0.01):
            self._notify(self.cache.snapshot)

    def _notify(self, _: Snapshot) -> None:
        with self._changed:
            self._changed.notify_all()

    def start(self, kubeconfig: Path | None = None) -> LiveSource:
        connection = load_connection(str(kubeconfig or self.kubeconfig), None, {})
        transport = KubeTransport(connection, self.settings)
        self.source = LiveSource(self.cache, transport, self.settings)
        self.source.start()
        self.wait(lambda: self.cache.ready, "the first sync")
        served = sum(1 for c in (*CORE, *CRDS) if self.double.served(c))
        self.wait(lambda: self.double.open_watches() == served, "a watch of each kind")
        return self.source

    def stop(self) -> None:
        if self.source is not None:
            self.source.stop()
        self.double.stop()
        self._ticking.set()
        self._ticker.join()

    def wait(self, done: Callable[[], bool], what: str) -> None:
        with self._changed:
            if not self._changed.wait_for(done, timeout=WAIT):
                raise AssertionError(f"timed out waiting for {what}")

    def wait_snapshot(self, done: Callable[[Snapshot], bool], what: str) -> None:
        self.wait(lambda: done(self.cache.snapshot), what)

    def kind(self, kind: str) -> Any:
        assert self.cache.sync is not None
        return self.cache.sync.kinds[kind]

    def converged(self) -> bool:
        return cache_state(self.cache.snapshot) == double_state(self.double)

    def wait_converged(self) -> None:
        try:
            self.wait(self.converged, "the cache to match the API server")
        except AssertionError:
            assert cache_state(self.cache.snapshot) == double_state(self.double)
            raise


def double_state(double: ApiServerDouble) -> dict[str, dict[Any, str]]:
    """{kind: {cache key: resourceVersion}} of what the API server holds."""
    out: dict[str, dict[Any, str]] = {kind: {} for kind in KINDS}
    for collection in (*CORE, *CRDS):
        if not double.served(collection):
            continue
        for (namespace, name), obj in double.objects(collection).items():
            meta = obj["metadata"]
            key: Any = meta["uid"] if collection.kind == "Pod" else (
                name if collection.kind in ("Node", "NodeClaim") else (namespace, name))
            out[collection.kind][key] = meta["resourceVersion"]
    return out


def cache_state(snap: Snapshot) -> dict[str, dict[Any, str]]:
    out: dict[str, dict[Any, str]] = {kind: {} for kind in KINDS}
    objects = snap.objects
    for kind, views in (("Node", objects.nodes), ("Pod", objects.pods),
                        ("RayCluster", objects.rayclusters), ("PodGroup", objects.podgroups),
                        ("Workload", objects.workloads)):
        for view in views:
            entry = snap.version_of(kind, key_of(view))
            assert entry is not None
            out[kind][key_of(view)] = entry[0]
    return out


def populate(double: ApiServerDouble) -> None:
    double.create(make_node("cpu-1").obj())
    double.create(make_node("cpu-2").obj())
    double.create(make_node("gpu-1").gpus(8).obj())
    double.create(make_raycluster("rc").autoscaling().group("workers", min=2, max=10).obj())
    double.create(make_pod("rc-head").head("rc").on("cpu-1").obj())
    for i in range(3):
        double.create(make_pod(f"web-{i}", "default").on("cpu-2").obj())


def worker(name: str, node: str | None = None) -> Obj:
    builder = make_pod(name).ray("rc", "workers").requests(cpu="1")
    return (builder.on(node) if node else builder).obj()
