"""`raygate check`'s RG018: each scale gate on a live RayCluster's worker groups, raygate's
(what it means, where to ask why and since when) or another controller's (its writer's to
lift), as information that never fails the check. Live through the API-server double
serving KubeRay 1.6.1's RayCluster CRD with the testbed's stand-in ``scaleGate``
(``testbed.kuberay_standin``); e2e/test_troubleshooting.py runs it on the real API
server."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from raygate.policy.admission.gates import SCALE_GATE_RULES
from raygate.policy.config import PolicyConfig
from raygate.policy.lint.model import ClusterFacts, Finding, Severity
from raygate.policy.lint.rules import IGNORE_ANNOTATION, lint
from raygate.policy.lint.scale_gates import MEANINGS
from raygate.server.check.manifests import lint_cluster
from raygate.server.check.report import EXIT_CLEAN
from raygate.server.check.schema import raycluster_schema
from raygate.server.cli import main
from raygate.server.wire.raycluster import RayClusterManifest
from testbed.kuberay_standin import SCALE_GATE
from testkit.builders import Obj
from tests.check.manifests import GROUPS, good, with_

NO_NODE = "raygate.io/no-node-coming"
KUEUE = "kueue.k8s.io/quota-exceeded"
LIVE = ClusterFacts(gpu_nodes=0, volcano_installed=False, kueue_installed=False)


def gated(obj: Obj, group: int, *entries: Obj) -> Obj:
    return with_(obj, f"{GROUPS}.{group}.scaleStrategy", {"scaleGate": list(entries)})


@dataclass(frozen=True)
class Case:
    id: str
    obj: Obj
    found: list[tuple[str, str]]
    """(path, the words the message starts with) of each RG018."""
    facts: ClusterFacts | None = field(default=LIVE)


AT = f"{GROUPS}[1].scaleStrategy.scaleGate"
CASES = [
    Case("no gates", good(), []),
    Case("raygate's: what it means", gated(good(), 1, {"type": NO_NODE}), [
        (f"{AT}[0]", f"worker group 'over' carries raygate's scale gate {NO_NODE}: the node "
                     "autoscaler (Karpenter, Cluster Autoscaler) said no node comes")]),
    Case("another controller's, keyed by name (earlier revisions of the field)",
         gated(good(), 1, {"name": KUEUE}), [
             (f"{AT}[0]", f"worker group 'over' carries scale gate {KUEUE}, another "
                          "controller's")]),
    Case("a raygate.io/ gate this raygate does not know",
         gated(good(), 1, {"type": "raygate.io/newer"}), [
             (f"{AT}[0]", "worker group 'over' carries raygate's scale gate raygate.io/newer: "
                          "one this raygate does not know")]),
    Case("each in order; an entry that names none is skipped, its index kept",
         gated(gated(good(), 1, {"reason": "x"}, {"type": KUEUE}), 0, {"type": NO_NODE}), [
             (f"{GROUPS}[0].scaleStrategy.scaleGate[0]",
              f"worker group 'base' carries raygate's scale gate {NO_NODE}"),
             (f"{AT}[1]", f"worker group 'over' carries scale gate {KUEUE}")]),
    Case("offline: none (a manifest carries no controller's gate)",
         gated(good(), 1, {"type": NO_NODE}), [], None),
    Case("accepted by the check-ignore annotation",
         with_(gated(good(), 1, {"type": NO_NODE}), "metadata.annotations",
               {IGNORE_ANNOTATION: "RG018"}), []),
]


def rg018(obj: Obj, facts: ClusterFacts | None) -> list[Finding]:
    cluster = lint_cluster(msgspec.convert(obj, RayClusterManifest, strict=False))
    return [f for f in lint([cluster], facts, PolicyConfig()) if f.id == "RG018"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_gate_is_one_finding(case: Case) -> None:
    found = rg018(case.obj, case.facts)
    assert [(f.path, f.message[:len(start)]) for f, (_, start) in zip(
        found, case.found, strict=True)] == case.found
    assert all(f.severity is Severity.INFO for f in found)


def test_the_fix_says_where_to_ask_or_whose_it_is() -> None:
    ours, theirs = rg018(gated(good(), 1, {"type": NO_NODE}, {"type": KUEUE}), LIVE)
    assert ours.fix == (
        "raygate lifts it when its reason ends; why and since when: `raygate explain "
        "ray/POD` of a pending worker of the group, or the admission status "
        "(/v1/namespaces/ray/rayclusters/rc/admission, its group's scaleGates)")
    assert theirs.fix.startswith("its writer lifts it (raygate never touches it)")


def test_every_gate_of_raygates_has_its_meaning() -> None:
    assert set(MEANINGS) == {rule.gate for rule in SCALE_GATE_RULES}


def standin_schema() -> dict[str, Any]:
    """KubeRay 1.6.1's RayCluster schema with the testbed's stand-in ``scaleGate``."""
    schema = copy.deepcopy(raycluster_schema("1.6"))
    group = schema["properties"]["spec"]["properties"]["workerGroupSpecs"]["items"]
    group["properties"]["scaleStrategy"]["properties"]["scaleGate"] = SCALE_GATE
    return schema


@pytest.mark.parametrize(("served", "said"), [
    (standin_schema, True),
    # KubeRay 1.7 has no scaleGate (its API server prunes it): a finding on it is left out.
    (lambda: raycluster_schema("1.7"), False),
])
def test_live_gates_inform_and_never_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], served: Any, said: bool) -> None:
    from testkit.apiserver import CRDS, ApiServerDouble, Collection

    double = ApiServerDouble().start()
    try:
        double.install(CRDS[0])
        double.install(Collection("CustomResourceDefinition", "apiextensions.k8s.io", "v1",
                                  "customresourcedefinitions"))
        double.create({"apiVersion": "apiextensions.k8s.io/v1",
                       "kind": "CustomResourceDefinition",
                       "metadata": {"name": "rayclusters.ray.io"},
                       "spec": {"versions": [{"name": "v1", "schema": {
                           "openAPIV3Schema": served()}}]}})
        double.create(gated(good(), 1, {"type": NO_NODE}, {"type": KUEUE}))
        argv = ["check", "--kubeconfig", str(double.kubeconfig(tmp_path / "kubeconfig"))]
        assert main([*argv, "--strict"]) == EXIT_CLEAN
        text = capsys.readouterr().out
        assert main([*argv, "--output", "json"]) == EXIT_CLEAN
        reply = json.loads(capsys.readouterr().out)
    finally:
        double.stop()
    assert [(f["id"], f["severity"], f["path"]) for f in reply["findings"]] == ([
        ("RG018", "info", f"{AT}[0]"), ("RG018", "info", f"{AT}[1]")] if said else [])
    assert reply["summary"]["info"] == (2 if said else 0)
    if said:
        assert text.splitlines()[0] == f"RG018 info    RayCluster ray/rc  {AT}[0]"
        assert text.splitlines()[-1].endswith("against the RayCluster CRD it serves: 2 info")
