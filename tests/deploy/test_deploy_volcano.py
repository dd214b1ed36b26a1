"""deploy/volcano: the volcano-scheduler.conf is structurally what Volcano's extender plugin
reads (exact key spellings, types that its decoder accepts) and points at routes raygate
serves."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.fronts.volcano import VolcanoExtender, volcano_routes

ROOT = Path(__file__).resolve().parents[2]
# pkg/scheduler/plugins/extender/extender.go argument keys, and the per-plugin switches
# (framework PluginOption) as spelled in volcano-scheduler.conf.
ARGUMENTS = {
    "extender.urlPrefix", "extender.httpTimeout", "extender.onSessionOpenVerb",
    "extender.onSessionCloseVerb", "extender.predicateVerb", "extender.prioritizeVerb",
    "extender.preemptableVerb", "extender.reclaimableVerb", "extender.queueOverusedVerb",
    "extender.jobEnqueueableVerb", "extender.jobReadyVerb", "extender.allocateFuncVerb",
    "extender.deallocateFuncVerb", "extender.ignorable", "extender.managedResources",
}
SWITCHES = {"enablePredicate", "enableNodeOrder", "enablePreemptable", "enableReclaimable",
            "enableJobReady", "enableJobEnqueued", "enabledOverused"}


def _conf() -> dict[str, Any]:
    configmap = yaml.safe_load((ROOT / "deploy/volcano/volcano-scheduler-configmap.yaml")
                               .read_text())
    assert configmap["kind"] == "ConfigMap"
    conf: dict[str, Any] = yaml.safe_load(configmap["data"]["volcano-scheduler.conf"])
    return conf


def _extender() -> dict[str, Any]:
    plugins = [p for tier in _conf()["tiers"] for p in tier["plugins"]]
    (extender,) = [p for p in plugins if p["name"] == "extender"]
    return dict(extender)


def test_raygate_sits_in_the_first_tier_with_preempt_and_reclaim_enabled() -> None:
    conf = _conf()
    assert "extender" in [p["name"] for p in conf["tiers"][0]["plugins"]]
    actions = [a.strip() for a in conf["actions"].split(",")]
    assert {"preempt", "reclaim", "allocate"} <= set(actions)


def test_argument_keys_and_types() -> None:
    extender = _extender()
    assert set(extender) - {"name", "arguments"} <= SWITCHES
    args = extender["arguments"]
    assert set(args) <= ARGUMENTS
    assert isinstance(args["extender.httpTimeout"], str)
    assert re.fullmatch(r"\d+(ms|s)", args["extender.httpTimeout"])
    assert isinstance(args.get("extender.managedResources", []), list)
    assert isinstance(args["extender.ignorable"], bool)


def test_every_verb_points_at_a_route_raygate_serves() -> None:
    args = _extender()["arguments"]
    prefix = args["extender.urlPrefix"].rstrip("/")
    assert prefix.endswith(":8888/volcano")
    served = volcano_routes(VolcanoExtender(ClusterCache(PolicyConfig(), "test")))
    verbs = [v for k, v in args.items() if k.endswith("Verb")]
    assert verbs
    for verb in verbs:
        assert f"/volcano/{verb}" in served
