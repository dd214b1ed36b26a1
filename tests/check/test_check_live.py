"""`raygate check --kubeconfig` against the API-server double: RayClusters read from the
cluster, GPU nodes and Volcano found there, the RayCluster schema the cluster serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raygate.server.check.report import EXIT_CLEAN, EXIT_NOTHING, EXIT_UNUSABLE
from raygate.server.cli import main
from testkit.builders import make_raycluster
from tests.check.manifests import GROUPS, good, two_cpu_groups, with_


def test_live_check_against_the_api_server_double(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`raygate check --kubeconfig`: RayClusters read from the cluster (namespaced, paged),
    GPU nodes counted for RG009, Volcano detected by discovery for RG010."""
    from testkit.apiserver import CRDS, ApiServerDouble

    rayclusters, podgroups = CRDS[0], CRDS[1]
    double = ApiServerDouble().start()
    try:
        double.install(rayclusters)
        kubeconfig = double.kubeconfig(tmp_path / "kubeconfig")
        assert main(["check", "--kubeconfig", str(kubeconfig)]) == EXIT_NOTHING
        assert capsys.readouterr().out == "0 Ray objects in the cluster: no findings\n"
        for i in range(3):
            double.create({"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": f"gpu-{i}"},
                           "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
        gpu_group = make_raycluster("train").autoscaling().group(
            "gpu", replicas=4, min=4, max=4, gpu="1").obj()
        double.create(gpu_group)
        other = with_(good(), "metadata.namespace", "other")
        double.create(with_(other, f"{GROUPS}.1.minReplicas", 9))

        assert main(["check", "--kubeconfig", str(kubeconfig), "--namespace", "ray",
                     "--output", "json"]) == EXIT_CLEAN
        reply = json.loads(capsys.readouterr().out)
        (finding,) = reply["findings"]
        assert (finding["id"], finding["object"]) == ("RG009", "RayCluster ray/train")
        assert "raygate sees 3 GPU nodes" in finding["message"]
        assert reply["summary"]["text"] == "1 RayCluster in the cluster: 1 warning"

        double.install(podgroups)  # Volcano shows up: queue labels are now expected
        assert main(["check", "--kubeconfig", str(kubeconfig), "--output", "json"]) == 1
        found = {(f["id"], f["object"]) for f in json.loads(capsys.readouterr().out)["findings"]}
        assert ("RG004", "RayCluster other/rc") in found
        assert ("RG010", "RayCluster ray/train") in found
        assert ("RG003", "RayCluster ray/train") in found
    finally:
        double.stop()
    assert main(["check"]) == EXIT_UNUSABLE
    assert "give manifest FILEs or --kubeconfig/--context for a live cluster, one of them" \
        in capsys.readouterr().err
    assert main(["check", "--kubeconfig", "k", "rc.yaml"]) == EXIT_UNUSABLE
    assert "not both" in capsys.readouterr().err


LIVE_SCHEMAS = [
    ("1.7", None, True, "against KubeRay v1.7.0's RayCluster CRD, which it serves"),
    # KubeRay 1.6 has no priority: RG016's fix asks for a field its API server prunes.
    ("1.6", None, False, "against KubeRay v1.6.1's RayCluster CRD, which it serves"),
    ("1.6", "1.7", True, "against KubeRay v1.7.0"),  # --kuberay-version still decides
    ("other", None, True, "against the RayCluster CRD it serves"),  # no release raygate ships
    (None, None, True, "in the cluster: "),  # the CRD cannot be read: no schema said
]
"""(the CRD the cluster serves, --kuberay-version, RG016 said, the summary says)"""


@pytest.mark.parametrize("case", LIVE_SCHEMAS, ids=[f"{c[0]}-{c[1]}" for c in LIVE_SCHEMAS])
def test_live_check_reads_the_served_raycluster_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
    case: tuple[str | None, str | None, bool, str]
) -> None:
    """`raygate check --kubeconfig` takes the RayCluster schema from the cluster's own CRD,
    not 1.7's: the summary names it, and a finding on a field it lacks is left out."""
    served, given, rg016, against = case
    from raygate.server.check.schema import raycluster_schema
    from testkit.apiserver import CRDS, ApiServerDouble, Collection

    definitions = Collection("CustomResourceDefinition", "apiextensions.k8s.io", "v1",
                             "customresourcedefinitions")
    double = ApiServerDouble().start()
    try:
        double.install(CRDS[0])
        double.install(definitions)
        if served is not None:
            schema = raycluster_schema("1.7" if served == "other" else served)
            if served == "other":
                schema = {**schema, "description": "a KubeRay raygate does not ship"}
            double.create({"apiVersion": "apiextensions.k8s.io/v1",
                           "kind": "CustomResourceDefinition",
                           "metadata": {"name": "rayclusters.ray.io"},
                           "spec": {"versions": [{"name": "v1", "schema": {
                               "openAPIV3Schema": schema}}]}})
        double.create(two_cpu_groups())
        argv = ["check", "--kubeconfig", str(double.kubeconfig(tmp_path / "kubeconfig"))]
        main([*argv, *(["--kuberay-version", given] if given else [])])
    finally:
        double.stop()
    out = capsys.readouterr().out
    assert ("RG016" in out) is rg016
    assert against in out.splitlines()[-1]
