"""deploy/'s setups as the deploy tests read them: the setups, what raygate really serves
(routes and default addresses), and the raygate containers, grants and selectors of the
rendered objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cli import _parser
from raygate.server.config.settings import parse_addr
from raygate.server.fronts.health import health_routes
from raygate.server.fronts.scheduler import SchedulerExtender, scheduler_routes
from raygate.server.fronts.volcano import VolcanoExtender, volcano_routes

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SETUPS = ["base", "kube-scheduler-second", "kube-scheduler-default", "volcano", "kueue"]
K8S_VERSION = "1.34"
CACHE = ClusterCache(PolicyConfig(), "test")
SERVED = {**health_routes(CACHE), **scheduler_routes(SchedulerExtender(CACHE)),
          **volcano_routes(VolcanoExtender(CACHE))}
DEFAULTS = _parser().parse_args(["serve"])
Obj = dict[str, Any]


def addr_port(args: list[str], flag: str) -> int:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return parse_addr(value, flag)[1]


def raygate_containers(objects: list[Obj]) -> list[tuple[Obj, Obj]]:
    return [(o, c) for o in objects if o["kind"] == "Deployment"
            for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "raygate"]


def grants(role: Obj) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule; no rule may narrow by resourceNames."""
    assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"])
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


def selects(selector: dict[str, str], deployment: Obj) -> bool:
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in selector.items())
