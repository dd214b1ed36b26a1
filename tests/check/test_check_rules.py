"""`raygate check`: every rule, table-driven, through the real reader and schema; the
rules that need facts or a config of their own; deploy/'s manifests pass clean."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from raygate.policy.config import PolicyConfig
from raygate.policy.lint.model import ClusterFacts, Severity
from raygate.policy.lint.rules import RULES, lint
from raygate.server.check.report import EXIT_CLEAN, EXIT_NOTHING
from raygate.server.check.run import check_files, run_check
from testkit.builders import Obj, make_raycluster
from tests.check.manifests import (
    GROUPS,
    HEAD,
    KUBERNETES_GANG,
    REQUIRED,
    TOLERATE_GPU,
    VOLCANO_QUEUE,
    cron,
    embedded,
    gke_accelerator,
    good,
    gpu_present,
    kueue_autoscaled,
    requiring,
    two_cpu_groups,
    unscaled_volcano,
    with_,
)

ROOT = Path(__file__).resolve().parents[2]


Found = list[tuple[str, Severity, str]]


def check(tmp_path: Path, *objects: Obj) -> Found:
    path = tmp_path / "rc.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    report = check_files([str(path)], PolicyConfig())
    return [(f.finding.id, f.finding.severity, f.finding.path) for f in report.findings]


CASES: list[tuple[str, Obj, Found]] = [
    ("a clean cluster", good(), []),
    ("RG001 Volcano, autoscaling off, replicas above minReplicas", unscaled_volcano(),
     [("RG001", Severity.WARNING, "spec.enableInTreeAutoscaling")]),
    ("RG001 not without a gang scheduler (nothing sizes a gang)",
     make_raycluster("rc").group("g", replicas=3, min=1, max=8).obj(), []),
    ("RG001 not when minReplicas == replicas (the floor is the same either way)",
     with_(unscaled_volcano(), f"{GROUPS}.0.minReplicas", 3), []),
    ("RG001 not when minReplicas is unset (no floor written)",
     with_(unscaled_volcano(), f"{GROUPS}.0.minReplicas", None), []),
    ("RG001 in a RayJob's rayClusterSpec (its labels are the RayCluster's)",
     with_(embedded("RayJob", unscaled_volcano()), "metadata.labels", VOLCANO_QUEUE),
     [("RG001", Severity.WARNING, "spec.rayClusterSpec.enableInTreeAutoscaling")]),
    ("RG001 in a RayCronJob's jobTemplate",
     with_(cron(unscaled_volcano()), "metadata.labels", VOLCANO_QUEUE),
     [("RG001", Severity.WARNING, "spec.jobTemplate.rayClusterSpec.enableInTreeAutoscaling")]),
    ("RG002 multi-host overflow",
     with_(good(), f"{GROUPS}.1.numOfHosts", 4),
     [("RG002", Severity.WARNING, f"{GROUPS}[1].numOfHosts")]),
    ("RG002 not for a fixed multi-host group",
     with_(good(), f"{GROUPS}.0.numOfHosts", 4), []),
    ("RG003 volcano + autoscaling",
     with_(good(), "metadata.labels", {"volcano.sh/queue-name": "q"}),
     [("RG003", Severity.WARNING, "spec.autoscalerOptions.resources")]),
    ("RG003 accepted by annotation",
     with_(with_(good(), "metadata.labels", {"volcano.sh/queue-name": "q"}),
           "metadata.annotations", {"raygate.io/check-ignore": "RG003"}), []),
    ("RG003 a RayService's labels are its RayCluster's (KubeRay copies them)",
     with_(embedded("RayService", good()), "metadata.labels", {"volcano.sh/queue-name": "q"}),
     [("RG003", Severity.WARNING, "spec.rayClusterConfig.autoscalerOptions.resources")]),
    ("RG004 min above max",
     with_(good(), f"{GROUPS}.1.minReplicas", 9),
     [("RG004", Severity.ERROR, f"{GROUPS}[1].minReplicas")]),
    ("RG004 in a RayService's rayClusterConfig",
     embedded("RayService", with_(good(), f"{GROUPS}.1.minReplicas", 9)),
     [("RG004", Severity.ERROR, "spec.rayClusterConfig.workerGroupSpecs[1].minReplicas")]),
    ("RG005 replicas above max",
     with_(good(), f"{GROUPS}.1.replicas", 9),
     [("RG005", Severity.WARNING, f"{GROUPS}[1].replicas")]),
    ("RG005 replicas below min",
     with_(good(), f"{GROUPS}.0.replicas", 1),
     [("RG005", Severity.WARNING, f"{GROUPS}[0].replicas")]),
    ("RG006 an empty groupName",
     with_(good(), f"{GROUPS}.1.groupName", ""),
     [("RG006", Severity.ERROR, f"{GROUPS}[1].groupName")]),
    ("RG006 said once when the CRD's `required` says it first",
     with_(good(), f"{GROUPS}.1.groupName", None),
     [("RG105", Severity.ERROR, f"{GROUPS}[1].groupName")]),
    ("RG007 duplicate groupName",
     with_(good(), f"{GROUPS}.1.groupName", "base"),
     [("RG007", Severity.ERROR, f"{GROUPS}[1].groupName")]),
    ("RG007 headgroup is reserved",
     with_(good(), f"{GROUPS}.1.groupName", "headgroup"),
     [("RG007", Severity.ERROR, f"{GROUPS}[1].groupName")]),
    ("RG008 floor group tolerating GPU taints",
     with_(good(), f"{GROUPS}.0.template.spec.tolerations", TOLERATE_GPU),
     [("RG008", Severity.WARNING, f"{GROUPS}[0].template.spec.tolerations")]),
    ("RG008 a tolerate-everything toleration counts",
     with_(good(), f"{GROUPS}.0.template.spec.tolerations", [{"operator": "Exists"}]),
     [("RG008", Severity.WARNING, f"{GROUPS}[0].template.spec.tolerations")]),
    ("RG008 not for the overflow group",
     with_(good(), f"{GROUPS}.1.template.spec.tolerations", TOLERATE_GPU), []),
    ("RG008 a CPU-only head tolerating GPU taints (the head is always floor)",
     with_(good(), f"{HEAD}.tolerations", TOLERATE_GPU),
     [("RG008", Severity.WARNING, f"{HEAD}.tolerations")]),
    ("RG008 not for a GPU head",
     with_(with_(good(), f"{HEAD}.tolerations", TOLERATE_GPU), f"{HEAD}.containers.0.resources",
           {"limits": {"nvidia.com/gpu": "1"}}), []),
    ("RG010 volcano scheduler without a queue",
     with_(with_(good(), "spec.enableInTreeAutoscaling", True),
           f"{GROUPS}.0.template.spec.schedulerName", "volcano"),
     [("RG003", Severity.WARNING, "spec.autoscalerOptions.resources"),
      ("RG010", Severity.INFO, "metadata.labels")]),
    ("RG010 kueue hints without a queue",
     with_(good(), "metadata.annotations", {"kueue.x-k8s.io/elastic-job": "true"}),
     [("RG010", Severity.INFO, "metadata.labels")]),
    ("RG011 minReplicas -1 (the CRD has no minimum for it)",
     with_(good(), f"{GROUPS}.1.minReplicas", -1),
     [("RG011", Severity.ERROR, f"{GROUPS}[1].minReplicas")]),
    ("RG011 negative replicas, said once (not RG005 as well)",
     with_(good(), f"{GROUPS}.1.replicas", -3),
     [("RG011", Severity.ERROR, f"{GROUPS}[1].replicas")]),
    ("RG105 a missing headGroupSpec (the CRD requires it)",
     with_(good(), "spec.headGroupSpec", None),
     [("RG105", Severity.ERROR, "spec.headGroupSpec")]),
    ("RG105 a string for an integer",
     with_(good(), f"{GROUPS}.1.maxReplicas", "eight"),
     [("RG105", Severity.ERROR, f"{GROUPS}[1].maxReplicas")]),
    ("RG105 an unknown field",
     with_(good(), f"{GROUPS}.1.maxReplica", 8),
     [("RG105", Severity.ERROR, f"{GROUPS}[1].maxReplica")]),
    ("RG105 a RayService without rayClusterConfig",
     with_(embedded("RayService", good()), "spec.rayClusterConfig", None),
     [("RG105", Severity.ERROR, "spec.rayClusterConfig")]),
    ("RG105 no name",
     with_(good(), "metadata.name", None),
     [("RG105", Severity.ERROR, "metadata.name")]),
    ("RG012 Kueue, autoscaling, no elastic-job annotation", kueue_autoscaled(),
     [("RG012", Severity.ERROR, "metadata.annotations")]),
    ("RG012 not with the elastic-job annotation",
     with_(kueue_autoscaled(), "metadata.annotations", {"kueue.x-k8s.io/elastic-job": "true"}),
     []),
    ("RG012 not without autoscaling",
     with_(kueue_autoscaled(), "spec.enableInTreeAutoscaling", False), []),
    ("RG013 a CPU-only head selecting GPU nodes (GKE's accelerator label)",
     with_(good(), f"{HEAD}.nodeSelector", {"cloud.google.com/gke-accelerator": "nvidia-l4"}),
     [("RG013", Severity.ERROR, f"{HEAD}.nodeSelector")]),
    ("RG013 a CPU-only floor group selecting GPU nodes (the configured GPU label)",
     with_(good(), f"{GROUPS}.0.template.spec.nodeSelector", {"nvidia.com/gpu.present": "true"}),
     [("RG013", Severity.ERROR, f"{GROUPS}[0].template.spec.nodeSelector")]),
    ("RG013 not for the overflow group (surplus may use GPU nodes)",
     with_(good(), f"{GROUPS}.1.template.spec.nodeSelector",
           {"cloud.google.com/gke-accelerator": "nvidia-l4"}), []),
    ("RG013 not for another value of the configured label",
     with_(good(), f"{GROUPS}.0.template.spec.nodeSelector", {"nvidia.com/gpu.present": "false"}),
     []),
    ("RG013 a CPU-only head requiring GPU nodes by node affinity (GKE's accelerator label)",
     with_(good(), f"{HEAD}.affinity", requiring([gke_accelerator("Exists")])),
     [("RG013", Severity.ERROR, f"{HEAD}.{REQUIRED}")]),
    ("RG013 a floor group requiring the configured GPU label in every term",
     with_(good(), f"{GROUPS}.0.template.spec.affinity",
           requiring([gpu_present("true")], [gke_accelerator("In", "nvidia-l4"),
                                             {"key": "zone", "operator": "In", "values": ["a"]}])),
     [("RG013", Severity.ERROR, f"{GROUPS}[0].template.spec.{REQUIRED}")]),
    ("RG013 not when one term lets CPU nodes in",
     with_(good(), f"{GROUPS}.0.template.spec.affinity",
           requiring([gpu_present("true")],
                     [{"key": "pool", "operator": "In", "values": ["cpu"]}])),
     []),
    ("RG013 not for the configured label at another value, or only maybe",
     with_(good(), f"{GROUPS}.0.template.spec.affinity",
           requiring([gpu_present("true", "false")])), []),
    ("RG013 not for a preferred node affinity",
     with_(good(), f"{GROUPS}.0.template.spec.affinity", {"nodeAffinity": {
         "preferredDuringSchedulingIgnoredDuringExecution": [
             {"weight": 1, "preference": {"matchExpressions": [gpu_present("true")]}}]}}), []),
    ("RG013 not for the overflow group's required GPU affinity",
     with_(good(), f"{GROUPS}.1.template.spec.affinity", requiring([gpu_present("true")])), []),
    # KubeRay 1.7's gang on Kubernetes' own PodGroups (kubernetes-was).
    ("RG001 a Kubernetes gang sizes minCount from replicas too",
     with_(make_raycluster("rc").group("g", replicas=3, min=1, max=8).obj(),
           "metadata.labels", KUBERNETES_GANG),
     [("RG001", Severity.WARNING, "spec.enableInTreeAutoscaling")]),
    ("RG015 a Kubernetes gang is never made for an autoscaled cluster",
     with_(good(), "metadata.labels", KUBERNETES_GANG),
     [("RG015", Severity.WARNING, "spec.enableInTreeAutoscaling")]),
    ("RG016 the CPU group should scale first (KubeRay 1.7's priority)", two_cpu_groups(),
     [("RG016", Severity.INFO, f"{GROUPS}[0].priority")]),
    ("RG016 not once the CPU group's priority is the higher",
     with_(two_cpu_groups(), f"{GROUPS}.0.priority", 5), []),
    ("RG017 all-or-nothing with an overflow group to hold",
     with_(good(), "metadata.annotations", {"raygate.io/scale-up": "all-or-nothing"}), []),
    ("RG017 a value raygate does not know",
     with_(good(), "metadata.annotations", {"raygate.io/scale-up": "all_or_nothing"}),
     [("RG017", Severity.WARNING, "metadata.annotations")]),
    ("RG017 nothing to hold without autoscaling",
     with_(make_raycluster("rc").group("g", replicas=3, min=1, max=8).obj(),
           "metadata.annotations", {"raygate.io/scale-up": "all-or-nothing"}),
     [("RG017", Severity.WARNING, "metadata.annotations")]),
    ("RG017 nothing to hold when only a GPU group may grow",
     with_(make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2)
           .group("gpu", replicas=0, min=0, max=4, gpu="1").obj(),
           "metadata.annotations", {"raygate.io/scale-up": "all-or-nothing"}),
     [("RG017", Severity.WARNING, "metadata.annotations")]),
    ("a RayJob on an existing cluster embeds none: nothing to lint",
     with_(with_(embedded("RayJob", good()), "spec.rayClusterSpec", None),
           "spec.clusterSelector", {"ray.io/cluster": "shared"}), []),
    ("the CRD's defaults apply before its `required` (maxReplicas has one)",
     with_(make_raycluster("rc").autoscaling().group("g", min=0).obj(),
           f"{GROUPS}.0.minReplicas", None), []),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rules(obj: Obj, expected: Found, tmp_path: Path) -> None:
    assert check(tmp_path, obj) == expected


def test_rg009_gpu_floor_above_the_gpu_nodes_raygate_sees(tmp_path: Path) -> None:
    path = tmp_path / "rc.json"
    path.write_text(json.dumps(make_raycluster("rc").autoscaling().group(
        "gpu", replicas=4, min=4, max=4, gpu="1").obj()))
    clusters = check_files([str(path)], PolicyConfig()).clusters
    facts = ClusterFacts(gpu_nodes=2, volcano_installed=False, kueue_installed=False)
    assert [(f.id, f.path) for f in lint(clusters, facts, PolicyConfig())] == [
        ("RG009", f"{GROUPS}[0].minReplicas")]
    assert lint(clusters, None, PolicyConfig()) == []  # offline: nothing to compare with
    facts = ClusterFacts(gpu_nodes=4, volcano_installed=False, kueue_installed=False)
    assert lint(clusters, facts, PolicyConfig()) == []


def test_rg014_no_gpu_node_label_no_native_rule(tmp_path: Path) -> None:
    path = tmp_path / "rc.json"
    path.write_text(json.dumps(good()))
    no_labels = PolicyConfig(gpu_node_labels={})
    clusters = check_files([str(path)], no_labels).clusters
    assert [(f.id, f.path) for f in lint(clusters, None, no_labels)
            if f.id == "RG014"] == [("RG014", "policy.gpuNodeLabels")]
    assert [f for f in lint(clusters, None, PolicyConfig()) if f.id == "RG014"] == []


def test_rg003_reports_the_configured_autoscaler_resources(tmp_path: Path) -> None:
    cluster = with_(good(), "metadata.labels", {"volcano.sh/queue-name": "q"})
    cluster["spec"]["autoscalerOptions"] = {"resources": {"requests": {"cpu": "1",
                                                                       "memory": "1Gi"}}}
    path = tmp_path / "rc.yaml"
    path.write_text(json.dumps(cluster))
    (found,) = check_files([str(path)], PolicyConfig()).findings
    assert "1000m CPU, 1024Mi memory" in found.finding.message


def test_an_unset_maxreplicas_is_the_crds_default_in_messages(tmp_path: Path) -> None:
    """Not Python's None: KubeRay's CRD defaults maxReplicas to 2147483647."""
    unset = with_(unscaled_volcano(), f"{GROUPS}.0.maxReplicas", None)
    below = with_(with_(good(), f"{GROUPS}.1.maxReplicas", None), f"{GROUPS}.1.minReplicas", 3)
    path = tmp_path / "rc.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [unset, below]}))
    messages = [(f.finding.id, f.finding.message)
                for f in check_files([str(path)], PolicyConfig()).findings]
    assert [rule for rule, _ in messages] == ["RG001", "RG005"]
    assert all("2147483647" in m and "None" not in m for _, m in messages), messages


def test_every_rule_has_a_case() -> None:
    # RG009 and RG014 need facts or a config of their own: tested apart, above; RG018 a
    # live cluster: tests/check/test_check_scale_gates.py.
    ids = {case_id for _, _, expected in CASES for case_id, _, _ in expected} | {
        "RG009", "RG014", "RG018"}
    assert {i for i in ids if i < "RG100"} == {f"RG{n:03d}" for n in range(1, len(RULES) + 1)}


def test_deploy_manifests_pass_clean() -> None:
    examples = sorted(str(p) for p in (ROOT / "deploy").glob("*/example-*.yaml"))
    assert examples
    out = io.StringIO()
    assert run_check(examples, "text", True, PolicyConfig(), out=out) == EXIT_CLEAN
    assert out.getvalue() == (f"{len(examples)} RayClusters in {len(examples)} files "
                              "against KubeRay v1.7.0: no findings\n")


def test_raygates_own_other_manifests_are_left_alone() -> None:
    """deploy/'s Services, Deployments, RBAC, ...: named in the summary, no finding (a
    `v1 Service` is no misspelled RayService), deploy/monitoring's Prometheus rule files
    and Grafana dashboard too (another tool's documents, no Kubernetes objects)."""
    manifests = sorted(str(p) for p in (ROOT / "deploy").glob("*/*.yaml")
                       if not p.name.startswith("example-") and p.name != "kustomization.yaml")
    manifests += [str(ROOT / "deploy" / "monitoring" / "raygate-dashboard.json")]
    report = check_files(manifests, PolicyConfig())
    assert report.findings == []
    assert report.exit_code(strict=True) == EXIT_NOTHING
    assert report.skipped["Service"] >= 1 and not report.checked
    assert (report.skipped["Prometheus rule file"], report.skipped["Grafana dashboard"]) == (1, 1)
