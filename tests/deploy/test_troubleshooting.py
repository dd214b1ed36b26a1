"""docs/troubleshooting.md says what raygate does: its rules and messages are raygate's,
the extender's check on kind gets the refusal it quotes, and every block captured from the
testbed has its output and a step of e2e/test_troubleshooting.py that runs it again."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import httpx
import yaml

from e2e.doc_capture import blocks
from raygate.policy.config import PolicyConfig
from raygate.policy.placement import Rule
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import make_node, make_pod, uid_for
from tests.conftest import FakeClock, ServerThread, snapshot_of
from tests.docs import doc

ROOT = Path(__file__).resolve().parents[2]
PAGE = doc("troubleshooting.md")
# Rules that never refuse a node: pods raygate leaves alone, and surplus that may go.
NEVER_REFUSE = {Rule.NOT_RAY, Rule.GPU_POD, Rule.SURPLUS_PREFERS_CPU, Rule.POLICY_ALWAYS}


def _section(title: str) -> str:
    found = re.search(rf"^#+ {re.escape(title)}\n(?P<body>.*?)(?=^#+ |\Z)", PAGE, re.S | re.M)
    assert found, title
    return found["body"]


def test_it_is_linked_where_an_operator_starts() -> None:
    assert "(docs/troubleshooting.md)" in doc("README.md")
    assert "(troubleshooting.md#is-raygate-in-the-scheduling-path)" in doc("deploy.md")
    assert "## Is raygate in the scheduling path?" in PAGE


def test_every_rule_that_refuses_a_node_is_explained() -> None:
    table = _section("In a pod's events: why raygate refused a node")
    explained = set(re.findall(r"^\| `([a-z-]+)` \|", table, re.M))
    assert explained == {rule.value for rule in Rule} - {r.value for r in NEVER_REFUSE}


def test_the_names_it_uses_are_the_deployments() -> None:
    scheduler = [o for o in yaml.safe_load_all(
        (ROOT / "deploy/kube-scheduler-second/scheduler.yaml").read_text())
        if o and o["kind"] == "Deployment"]
    (deployment,) = scheduler
    containers = {c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    for used in re.findall(r"logs deploy/ray-scheduler -c ([\w-]+)", PAGE):
        assert used in containers
    assert deployment["metadata"]["name"] == "ray-scheduler"
    assert deployment["metadata"]["namespace"] == "raygate-system"
    (config,) = [o for o in yaml.safe_load_all(
        (ROOT / "deploy/kube-scheduler-second/scheduler.yaml").read_text())
        if o and o["kind"] == "ConfigMap"]
    election = yaml.safe_load(config["data"]["config.yaml"])["leaderElection"]
    raygate = yaml.safe_load(yaml.safe_load((ROOT / "deploy/base/configmap.yaml").read_text())
                             ["data"]["raygate.yaml"])["server"]["leaderElection"]
    assert set(re.findall(r"get lease ([\w-]+)", PAGE)) == {election["resourceName"],
                                                            raygate["leaseName"]}
    # The leader's sidecar is forwarded to its HTTP port.
    sidecar = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "raygate")
    http = next(p["containerPort"] for p in sidecar["ports"] if p["name"] == "http")
    assert f"port-forward pod/$LEADER 8889:{http}" in PAGE


def test_labelling_the_kind_node_gets_the_refusal_it_quotes() -> None:
    """The extender's third check, on the quickstart's example: the kind node labelled a
    GPU node, one baseline worker deleted, its replacement filtered by the extender (a
    setup without native placement)."""
    step = _section("The extender: setups without native placement")
    label = next(shlex.split(line)[-1] for line in step.splitlines()
                 if "kubectl label node" in line and line.strip().endswith("=true"))
    key, value = label.split("=")
    assert PolicyConfig().gpu_node_labels == {**PolicyConfig().gpu_node_labels, key: value}
    refusal = re.search(r"`(raygate: floor-avoids-gpu: [^`]*)`", step)
    assert refusal, "the refusal it quotes"
    quoted = " ".join(refusal[1].split())

    example = yaml.safe_load(
        (ROOT / "deploy/kube-scheduler-second/example-raycluster.yaml").read_text())
    example["metadata"]["uid"] = uid_for("RayCluster", "ray", "ray-demo")
    node = make_node("kind-control-plane").label(key, value).obj()
    running = [
        make_pod("ray-demo-head").head("ray-demo").on("kind-control-plane").obj(),
        make_pod("ray-demo-baseline-worker-a").ray("ray-demo", "baseline")
        .requests(cpu="250m").on("kind-control-plane").obj(),
    ]
    replacement = make_pod("ray-demo-baseline-worker-c").ray("ray-demo", "baseline") \
        .requests(cpu="250m").obj()
    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(example, node, *running, replacement))
    server = ServerThread(cache, FakeClock())
    server.start()
    try:
        reply = httpx.post(f"{server.url}/scheduler/filter", timeout=10, json={
            "Pod": replacement, "Nodes": None, "NodeNames": ["kind-control-plane"]}).json()
    finally:
        server.stop()
    assert reply["FailedAndUnresolvableNodes"] == {"kind-control-plane": quoted}


def test_every_captured_block_has_its_output_and_its_step() -> None:
    """A block added to the page is captured from the testbed
    (``RAYGATE_CAPTURE_DOCS=1``) and run again by a step of the e2e scenario."""
    scenario = (ROOT / "e2e" / "test_troubleshooting.py").read_text()
    captured = blocks(PAGE)
    assert len(captured) >= 10
    for name, block in captured.items():
        assert block.commands, name
        assert any(output.strip() for output in block.outputs), f"{name}: not captured"
        assert f'"{name}"' in scenario, f"no step of e2e/test_troubleshooting.py runs {name}"
