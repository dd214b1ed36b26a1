"""`raygate check`: every rule, table-driven, through the real loader and CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from raygate.extender.check import load_manifests, run_check
from raygate.extender.cli import main
from raygate.plugin.config import PolicyConfig
from raygate.plugin.lint import RULES, ClusterFacts, Severity, lint
from tests.builders import Obj, make_raycluster

ROOT = Path(__file__).resolve().parent.parent


def with_(obj: Obj, path: str, value: object) -> Obj:
    """Set a dotted path (list indexes as numbers) in a manifest."""
    *parents, last = path.split(".")
    target: Any = obj
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return obj


def good() -> Obj:
    return make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
        .group("over", replicas=0, min=0, max=8).obj()


Found = list[tuple[str, Severity, str]]


def check(tmp_path: Path, *objects: Obj, facts: ClusterFacts | None = None) -> Found:
    path = tmp_path / "rc.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    return [(f.id, f.severity, f.path) for f in lint(load_manifests([str(path)]), facts,
                                                     PolicyConfig())]


GROUPS = "spec.workerGroupSpecs"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
CASES: list[tuple[str, Obj, list[tuple[str, Severity, str]]]] = [
    ("a clean cluster", good(), []),
    ("RG001 autoscaling off with a scalable group",
     with_(good(), "spec.enableInTreeAutoscaling", False),
     [("RG001", Severity.ERROR, "spec.enableInTreeAutoscaling")]),
    ("RG001 not for fixed groups",
     make_raycluster("rc").group("g", replicas=2, min=2, max=2).obj(), []),
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
    ("RG004 min above max",
     with_(good(), f"{GROUPS}.1.minReplicas", 9),
     [("RG004", Severity.ERROR, f"{GROUPS}[1].minReplicas")]),
    ("RG005 replicas above max",
     with_(good(), f"{GROUPS}.1.replicas", 9),
     [("RG005", Severity.ERROR, f"{GROUPS}[1].replicas")]),
    ("RG005 replicas below min",
     with_(good(), f"{GROUPS}.0.replicas", 1),
     [("RG005", Severity.ERROR, f"{GROUPS}[0].replicas")]),
    ("RG006 missing groupName",
     with_(good(), f"{GROUPS}.1.groupName", None),
     [("RG006", Severity.ERROR, f"{GROUPS}[1].groupName")]),
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
    ("RG010 volcano scheduler without a queue",
     with_(with_(good(), "spec.enableInTreeAutoscaling", True),
           f"{GROUPS}.0.template.spec.schedulerName", "volcano"),
     [("RG003", Severity.WARNING, "spec.autoscalerOptions.resources"),
      ("RG010", Severity.INFO, "metadata.labels")]),
    ("RG010 kueue hints without a queue",
     with_(good(), "metadata.annotations", {"kueue.x-k8s.io/elastic-job": "true"}),
     [("RG010", Severity.INFO, "metadata.labels")]),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rules(obj: Obj, expected: list[tuple[str, Severity, str]], tmp_path: Path) -> None:
    assert check(tmp_path, obj) == expected


def test_rg009_gpu_floor_above_the_gpu_nodes_raygate_sees(tmp_path: Path) -> None:
    cluster = make_raycluster("rc").autoscaling().group("gpu", replicas=4, min=4, max=4,
                                                        gpu="1").obj()
    facts = ClusterFacts(gpu_nodes=2, volcano_installed=False, kueue_installed=False)
    assert check(tmp_path, cluster, facts=facts) == [
        ("RG009", Severity.WARNING, f"{GROUPS}[0].minReplicas")]
    assert check(tmp_path, cluster) == []  # offline: nothing to compare with
    facts = ClusterFacts(gpu_nodes=4, volcano_installed=False, kueue_installed=False)
    assert check(tmp_path, cluster, facts=facts) == []


def test_rg003_reports_the_configured_autoscaler_resources(tmp_path: Path) -> None:
    cluster = with_(good(), "metadata.labels", {"volcano.sh/queue-name": "q"})
    cluster["spec"]["autoscalerOptions"] = {"resources": {"requests": {"cpu": "1",
                                                                       "memory": "1Gi"}}}
    path = tmp_path / "rc.yaml"
    path.write_text(json.dumps(cluster))
    (finding,) = lint(load_manifests([str(path)]), None, PolicyConfig())
    assert "1000m CPU, 1024Mi memory" in finding.message


def test_every_rule_has_a_case() -> None:
    ids = {case_id for _, _, expected in CASES for case_id, _, _ in expected} | {"RG009"}
    assert ids == {f"RG{n:03d}" for n in range(1, len(RULES) + 1)}


def test_deploy_manifests_pass_clean() -> None:
    examples = sorted(str(p) for p in (ROOT / "deploy").glob("*/example-*.yaml"))
    assert examples
    out = io.StringIO()
    assert run_check(examples, "text", True, PolicyConfig(), out=out) == 0
    assert out.getvalue() == "no findings\n"


def test_cli_json_output_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = tmp_path / "error.json"
    error.write_text(json.dumps(with_(good(), f"{GROUPS}.1.minReplicas", 9)))
    warning = tmp_path / "warning.json"
    warning.write_text(json.dumps(with_(good(), f"{GROUPS}.1.numOfHosts", 2)))
    assert main(["check", "--output", "json", str(error)]) == 1
    (finding,) = json.loads(capsys.readouterr().out)
    assert finding == {"id": "RG004", "severity": "error", "object": "RayCluster ray/rc",
                       "path": f"{GROUPS}[1].minReplicas",
                       "message": "worker group 'over' has minReplicas 9 > maxReplicas 8",
                       "fix": "make minReplicas <= maxReplicas"}
    assert main(["check", str(warning)]) == 0
    assert "RG002 warning" in capsys.readouterr().out
    assert main(["check", "--strict", str(warning)]) == 1
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_live_check_against_the_api_server_double(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`raygate check --kubeconfig`: RayClusters read from the cluster (namespaced, paged),
    GPU nodes counted for RG009, Volcano detected by discovery for RG010."""
    from tests.apiserver import CRDS, ApiServerDouble

    rayclusters, podgroups = CRDS[0], CRDS[1]
    double = ApiServerDouble().start()
    try:
        double.install(rayclusters)
        for i in range(3):
            double.create({"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": f"gpu-{i}"},
                           "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
        gpu_group = make_raycluster("train").autoscaling().group(
            "gpu", replicas=4, min=4, max=4, gpu="1").obj()
        double.create(gpu_group)
        other = with_(good(), "metadata.namespace", "other")
        double.create(with_(other, f"{GROUPS}.1.minReplicas", 9))
        kubeconfig = double.kubeconfig(tmp_path / "kubeconfig")

        assert main(["check", "--kubeconfig", str(kubeconfig), "--namespace", "ray",
                     "--output", "json"]) == 0
        (finding,) = json.loads(capsys.readouterr().out)
        assert (finding["id"], finding["object"]) == ("RG009", "RayCluster ray/train")
        assert "raygate sees 3 GPU nodes" in finding["message"]

        double.install(podgroups)  # Volcano shows up: queue labels are now expected
        assert main(["check", "--kubeconfig", str(kubeconfig), "--output", "json"]) == 1
        found = {(f["id"], f["object"]) for f in json.loads(capsys.readouterr().out)}
        assert ("RG004", "RayCluster other/rc") in found
        assert ("RG010", "RayCluster ray/train") in found
        assert ("RG003", "RayCluster ray/train") in found
    finally:
        double.stop()
    assert main(["check"]) == 2
    assert "give manifest FILEs, or --kubeconfig" in capsys.readouterr().err
