from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from raygate.policy.config import PolicyConfig
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot_files import SnapshotError, demo_text, load_files, load_text
from testkit.builders import (
    make_claim_template,
    make_device_class,
    make_gang_group,
    make_node,
    make_pod,
    make_raycluster,
    make_resource_claim,
    make_resource_slice,
    object_list,
)


def test_kubectl_json_list(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(object_list(
        make_node("n1").obj(), make_pod("p1").obj(), make_raycluster("rc").obj(),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
    )))
    objects = load_files([path])
    assert [n.name for n in objects.nodes] == ["n1"]
    assert [p.name for p in objects.pods] == ["p1"]
    assert [r.name for r in objects.rayclusters] == ["rc"]
    assert objects.ignored == {"v1/Service": 1}


def test_both_podgroups_and_the_dra_kinds_are_read_by_their_api_group() -> None:
    """Volcano's PodGroup and Kubernetes' own share the kind; their group tells them apart."""
    volcano = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "metadata": {"name": "ray-rc-pg", "namespace": "ray"}, "spec": {"minMember": 3}}
    objects = load_text(json.dumps(object_list(
        volcano, make_gang_group("rc-cluster", 4), make_device_class("gpu", "gpu.nvidia.com"),
        make_resource_slice("n1", "gpu.nvidia.com", 2), make_resource_claim("c", "gpu"),
        make_claim_template("t", "gpu"))), "test")
    assert [(g.name, g.min_member) for g in objects.podgroups] == [("ray-rc-pg", 3)]
    assert [(g.name, g.min_count) for g in objects.gang_groups] == [("rc-cluster", 4)]
    assert [c.drivers for c in objects.deviceclasses] == [("gpu.nvidia.com",)]
    assert [(s.nodes, s.devices) for s in objects.resourceslices] == [(("n1",), 2)]
    claims = (*objects.resourceclaims, *objects.resourceclaimtemplates)
    assert [c.device_classes for c in claims] == [("gpu",), ("gpu",)]


def test_multi_document_yaml_with_unquoted_values(tmp_path: Path) -> None:
    text = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: 16, memory: 64Gi, nvidia.com/gpu: 8}}
---
apiVersion: v1
kind: Pod
metadata:
  name: p1
  namespace: ray
  creationTimestamp: 2026-11-30T04:00:00Z
spec:
  containers: [{name: c, resources: {requests: {cpu: 0.5}}}]
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: ray-rc-pg, namespace: ray}
spec: {minMember: 3}
status: {phase: Inqueue}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: raycluster-rc, namespace: ray}
status:
  conditions: [{type: Admitted, status: "True", lastTransitionTime: "2026-11-30T04:00:00Z"}]
"""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    objects = load_files([path])
    assert objects.nodes[0].allocatable["nvidia.com/gpu"] == 8000
    assert objects.pods[0].containers[0].requests["cpu"] == 500
    assert objects.pods[0].created == 1796011200.0
    assert objects.podgroups[0].phase == "Inqueue" and objects.podgroups[0].min_member == 3
    assert objects.workloads[0].conditions[0].type == "Admitted"


def test_several_files_merge(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(make_node("n1").obj()))
    (tmp_path / "b.json").write_text(json.dumps(make_node("n2").obj()))
    objects = load_files([tmp_path / "a.json", tmp_path / "b.json"])
    assert [n.name for n in objects.nodes] == ["n1", "n2"]


BAD = [
    ("wrong type", object_list(make_node("n1").obj(),
                               {**make_pod("p1").obj(), "spec": {"priority": "high"}}),
     r"x.json: item 1 \(Pod p1\): Expected `int \| null`, got `str` - at `\$.spec.priority`"),
    ("bad quantity", object_list(make_pod("p1").requests(cpu="lots").obj()),
     r"item 0 \(Pod p1\): not a quantity: 'lots' - at `\$.spec.containers\[0\]"
     r".resources.requests.cpu`"),
    ("bad time", object_list(make_pod("p1").created("noon").obj()),
     r"not an RFC 3339 time: 'noon' - at `\$.metadata.creationTimestamp`"),
    ("negative replicas", object_list(make_raycluster("rc").group("g", replicas=-1).obj()),
     r"must not be negative, got -1 - at `\$.spec.workerGroupSpecs\[0\].replicas`"),
    ("no kind", {"apiVersion": "v1", "metadata": {}}, r"item 0: missing `kind` or `apiVersion`"),
    ("not an object", ["a", "b"], r"item 0: expected a Kubernetes object"),
]


@pytest.mark.parametrize(("obj", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_files_are_refused_with_file_item_and_path(
    tmp_path: Path, obj: object, message: str
) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(SnapshotError, match=message):
        load_files([path])


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot read"):
        load_files([tmp_path / "missing.yaml"])
    (tmp_path / "bad.yaml").write_text("a: [unclosed")
    with pytest.raises(SnapshotError, match=r"bad\.yaml: not valid YAML or JSON"):
        load_files([tmp_path / "bad.yaml"])


def test_the_demo_cluster_has_what_the_readme_promises() -> None:
    objects = load_text(demo_text(), "demo")
    snap = build_snapshot(objects, PolicyConfig())
    assert snap.gpu_node_names == {"gpu-node-1", "gpu-node-2"}  # by allocatable and by label
    assert {r.name for r in objects.rayclusters} == {"demo", "queued"}
    assert {(g.name, g.phase) for g in objects.podgroups} == {
        ("ray-demo-pg", "Running"), ("ray-queued-pg", "Inqueue")}
    demo = snap.raycluster("ray", "demo")
    assert demo is not None and demo.autoscaling
    groups = {g.name: (g.min_replicas, g.max_replicas) for g in demo.worker_groups}
    assert groups == {"baseline": (2, 2), "overflow": (0, 8)}
    pods = {p.name: p for p in objects.pods}
    waiting = pods["demo-overflow-worker-ddddd"].condition("PodScheduled")
    assert waiting is not None and "Insufficient cpu" in waiting.message
    preempted = pods["demo-overflow-worker-eeeee"].condition("DisruptionTarget")
    assert preempted is not None and preempted.reason == "PreemptionByScheduler"
    assert snap.preemptions(pods["demo-overflow-worker-eeeee"].group_key)
    assert any(p.name.startswith("train-llm") and p.node_name for p in objects.pods)
    assert any(not p.is_ray and p.namespace == "default" for p in objects.pods)
    assert objects.ignored == {"v1/ConfigMap": 1}
    # The demo file parses as plain YAML too (what `kubectl apply -f` would see).
    assert yaml.safe_load(demo_text())["kind"] == "List"
