"""``bench.cache_scale``'s first step: the cluster of ``bench.cache_sync`` created through
kube-apiserver by concurrent requests (nodes, RayClusters with a Volcano PodGroup each,
pods bound at create and their status written by a second request, as a kubelet would),
after the namespaces and the ServiceAccounts admission requires."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from bench.cluster_json import Cluster, PodSpec
from testbed.api import KubeApi

__all__ = ["SERVER_SET", "Loaded", "concurrently", "load", "podgroup"]

Obj = dict[str, Any]
T = TypeVar("T")

SERVER_SET = ("uid", "resourceVersion", "creationTimestamp")
"""Metadata the API server sets itself; a create must not carry it."""


def concurrently(items: Iterable[T], work: Callable[[T], None], workers: int,
                 what: str) -> tuple[int, float]:
    """``work(item)`` for every item on ``workers`` threads; (items, seconds). The first
    failure cancels what has not started and is raised."""
    started = last_report = time.perf_counter()
    done = 0
    with ThreadPoolExecutor(workers, thread_name_prefix="load") as pool:
        try:
            for _ in pool.map(work, items):
                done += 1
                now = time.perf_counter()
                if now - last_report >= 15:
                    last_report = now
                    print(f"  {what}: {done:,} in {now - started:.0f}s "
                          f"({done / (now - started):,.0f}/s)", flush=True)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return done, time.perf_counter() - started


def _creatable(body: bytes) -> Obj:
    obj: Obj = msgspec.json.decode(body.replace(b'"__RV__"', b'"0"'))
    for key in SERVER_SET:
        obj["metadata"].pop(key, None)
    return obj


def podgroup(cluster: str, owner_uid: str) -> Obj:
    """The PodGroup KubeRay's Volcano integration creates for a RayCluster: the head and
    the four ``baseline`` workers (its floor) as the gang."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": f"ray-{cluster}-pg", "namespace": "ray",
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                          "name": cluster, "uid": owner_uid,
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"minMember": 5, "queue": "default",
                 "minResources": {"cpu": "36", "memory": "144Gi"}},
    }


@dataclass
class Loaded:
    nodes: int = 0
    pods: int = 0
    rayclusters: int = 0
    podgroups: int = 0
    pod_json_bytes: int = 0
    seconds: float = 0.0
    requests: int = 0


def load(api: KubeApi, cluster: Cluster, workers: int) -> Loaded:
    """Create ``cluster`` through ``api`` on ``workers`` threads."""
    loaded = Loaded()
    started = time.perf_counter()
    requests = _namespaces_and_accounts(api, cluster)
    owners = _load_rayclusters(api, cluster, workers, loaded)
    requests += 2 * loaded.rayclusters

    def add_node(item: tuple[str, bytes]) -> None:
        name, body = item
        obj = _creatable(body)
        status = obj.pop("status")
        api.put_status(f"/api/v1/nodes/{name}", api.ensure("/api/v1/nodes", obj), status)

    loaded.nodes, seconds = concurrently(cluster.nodes, add_node, workers, "nodes")
    print(f"load: {loaded.nodes:,} nodes in {seconds:.1f}s "
          f"({2 * loaded.nodes / seconds:,.0f} requests/s)", flush=True)
    requests += 2 * loaded.nodes
    _load_pods(api, cluster, workers, owners, loaded)
    requests += 2 * loaded.pods
    loaded.seconds = time.perf_counter() - started
    loaded.requests = requests
    return loaded


def _namespaces_and_accounts(api: KubeApi, cluster: Cluster) -> int:
    """The pods' namespaces and ServiceAccounts (admission requires a pod's): one pod of
    each template, namespace and RayCluster names them all. The requests made."""
    namespaces = sorted({p.namespace for p in cluster.pods} | {"ray"})
    for ns in namespaces:
        api.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": ns}})
    samples = {(p.template, p.namespace, p.cluster): p for p in cluster.pods}.values()
    accounts = {(p.namespace, _creatable(cluster.render(p))["spec"]["serviceAccountName"])
                for p in samples}
    for ns, account in sorted(accounts):
        api.ensure(f"/api/v1/namespaces/{ns}/serviceaccounts",
                   {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": ns}})
    return len(namespaces) + len(accounts)


def _load_rayclusters(api: KubeApi, cluster: Cluster, workers: int,
                      loaded: Loaded) -> dict[str, str]:
    """The RayClusters and their PodGroups; RayCluster name to its UID."""
    owners: dict[str, str] = {}

    def add_raycluster(item: tuple[str, bytes]) -> None:
        name, body = item
        obj = _creatable(body)
        obj.pop("status", None)
        created = api.ensure("/apis/ray.io/v1/namespaces/ray/rayclusters", obj)
        owners[name] = created["metadata"]["uid"]
        api.ensure("/apis/scheduling.volcano.sh/v1beta1/namespaces/ray/podgroups",
                   podgroup(name, owners[name]))

    loaded.rayclusters, _ = concurrently(cluster.rayclusters, add_raycluster, workers,
                                         "RayClusters")
    loaded.podgroups = loaded.rayclusters
    return owners


def _load_pods(api: KubeApi, cluster: Cluster, workers: int, owners: dict[str, str],
               loaded: Loaded) -> None:
    sizes: list[int] = []

    def add_pod(spec: PodSpec) -> None:
        body = cluster.render(spec)
        sizes.append(len(body))
        obj = _creatable(body)
        status = obj.pop("status")
        meta = obj["metadata"]
        if spec.cluster:
            meta["ownerReferences"][0]["uid"] = owners[spec.cluster]
        collection = f"/api/v1/namespaces/{spec.namespace}/pods"
        api.put_status(f"{collection}/{spec.name}", api.ensure(collection, obj), status)

    loaded.pods, seconds = concurrently(cluster.pods, add_pod, workers, "pods")
    loaded.pod_json_bytes = sum(sizes)
    print(f"load: {loaded.pods:,} pods in {seconds:.1f}s ({2 * loaded.pods / seconds:,.0f} "
          f"requests/s: a create and a status write each)", flush=True)
