"""``GET /metrics`` read as the metrics tests read it (samples by name and labels, what a
block of requests moved), and the cluster and requests they send."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from testkit.builders import Obj, make_node, make_pod, make_raycluster, uid_for

NODES = [make_node("cpu-1").obj(), make_node("cpu-2").obj(),
         make_node("gpu-1").gpus(8).obj(), make_node("gpu-2").gpus(8).obj()]
NAMES = ["cpu-1", "gpu-1", "cpu-2", "gpu-2", "never-seen"]
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=6, min=0, max=8).obj()
PREEMPTOR = make_pod("trainer", "ml").requests(cpu="8", nvidia_com_gpu="4").priority(100).obj()

Key = tuple[str, tuple[tuple[str, str], ...]]


def scrape(client: httpx.Client) -> dict[Key, float]:
    reply = client.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    samples: dict[Key, float] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Key, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Delta:
    """What one block of requests moved: ``delta("raygate_x_total", label=...)``."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.before = scrape(client)
        self.after: dict[Key, float] = {}

    def __call__(self, name: str, **labels: str) -> float:
        if not self.after:
            self.after = scrape(self.client)
        return value(self.after, name, **labels) - value(self.before, name, **labels)


def base(name: str, node: str = "", cpu: str = "4") -> Obj:
    builder = make_pod(name).ray("rc", "base").requests(cpu=cpu)
    return (builder.on(node) if node else builder).obj()


def over(name: str, node: str = "", cpu: str = "4", priority: int = 0) -> Obj:
    builder = make_pod(name).ray("rc", "over").requests(cpu=cpu).priority(priority)
    return (builder.on(node) if node else builder).obj()


def uid(name: str, namespace: str = "ray") -> str:
    return uid_for("Pod", namespace, name)


def filter_body(pod: Obj, names: list[str]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def preempt_body(proposed: dict[str, list[str]]) -> dict[str, Any]:
    return {"Pod": PREEMPTOR, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
        for node, uids in proposed.items()}}
