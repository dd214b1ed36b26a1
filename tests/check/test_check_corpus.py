"""`raygate check` on a corpus no one here wrote: KubeRay's own samples
(`ray-operator/config/samples/` at v1.6.1 and v1.7.0, vendored in tests/fixtures/), each
release checked against each KubeRay version `--kuberay-version` offers.

The expectations are the table in docs/tools.md ("KubeRay's samples"), held to it by
``test_the_docs_table_says_the_same``: every file not named there is a Ray manifest that
passes clean. One folder run per case keeps the 350 file checks well under a second each.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from raygate.policy.config import PolicyConfig
from raygate.server.check.report import EXIT_CLEAN, EXIT_FOUND
from raygate.server.check.run import check_files
from raygate.server.check.schema import VERSIONS
from tests.docs import doc

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "kuberay-samples"
RELEASES = ("v1.6.1", "v1.7.0")

# Files with no Ray object at all (Ingresses, Gateways, MetalLB's pools, agent-sandbox's
# templates): left alone, their kinds named in the summary, no finding.
NOT_RAY = {
    "v1.6.1": {"gateway-api/istio-class.yaml", "gateway-api/metallb-config.yaml",
               "ingress-rayclient-tls.yaml", "ray-cluster-agc-gatewayapi.yaml",
               "ray-cluster-alb-ingress.yaml"},
    "v1.7.0": {"agent-sandbox/sandbox.yaml", "gateway-api/istio-class.yaml",
               "ingress-rayclient-tls.yaml", "ray-cluster-agc-gatewayapi.yaml",
               "ray-cluster-alb-ingress.yaml"},
}

Expected = dict[str, list[tuple[str, str]]]
"""file -> (finding ID, field path) of each finding, in order."""

# Fields KubeRay 1.7 added: its own samples use them, KubeRay 1.6's CRD does not know them
# (the API server of a cluster running 1.6 refuses them under strict field validation).
NEW_IN_1_7: Expected = {
    "ray-cluster.autoscaler-v2-overwrite-cmd.yaml": [
        ("RG105", "spec.autoscalerOptions.args"), ("RG105", "spec.autoscalerOptions.command")],
    "ray-cluster.embedded-gcs-ft.yaml": [
        ("RG105", "spec.gcsFaultToleranceOptions.backend"),
        ("RG105", "spec.gcsFaultToleranceOptions.redisAddress"),
        ("RG105", "spec.gcsFaultToleranceOptions.storage")],
    "ray-cluster.historyserver.yaml": [("RG105", "spec.historyServerOptions")],
    "ray-cluster.mtls.yaml": [("RG105", "spec.tlsOptions")],
    "ray-cluster.network-policy-deny-all.yaml": [("RG105", "spec.networkPolicy")],
    "ray-cronjob-timezone.sample.yaml": [("RG105", "spec.timeZone")],
}

# (release, version): what each file of the release gets against that version's CRDs.
EXPECTED: dict[tuple[str, str], Expected] = {
    ("v1.6.1", "1.6"): {},
    ("v1.6.1", "1.7"): {},  # 1.7 takes every 1.6 manifest
    ("v1.7.0", "1.6"): NEW_IN_1_7,
    ("v1.7.0", "1.7"): {},
}


def test_every_release_and_version_has_its_expectations() -> None:
    assert set(EXPECTED) == {(r, v) for r in RELEASES for v in VERSIONS}


@pytest.mark.parametrize(("release", "version"), sorted(EXPECTED))
def test_kuberay_samples(release: str, version: str) -> None:
    root = CORPUS / release
    files = {str(p.relative_to(root)) for p in root.rglob("*.yaml")}
    report = check_files([str(root)], PolicyConfig(), kuberay=version)
    found: Expected = defaultdict(list)
    for at in report.findings:
        found[str(Path(at.file).relative_to(root))].append((at.finding.id, at.finding.path))
    assert dict(found) == EXPECTED[release, version]
    assert not report.unreadable
    assert report.files == len(files)
    assert report.exit_code(strict=True) == (EXIT_FOUND if EXPECTED[release, version]
                                             else EXIT_CLEAN)
    with_ray = {f for f in files
                if check_files([str(root / f)], PolicyConfig(), kuberay=version).checked}
    assert files - with_ray == NOT_RAY[release]


def test_the_docs_table_says_the_same() -> None:
    """docs/tools.md's table of samples names each file with findings and their IDs."""
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `([^`]+\.yaml)` \| ([^|]*) \|", doc("tools.md"),
                                            re.M)}
    for expected in EXPECTED.values():
        for file, findings in expected.items():
            ids = sorted({rule for rule, _ in findings})
            assert file in rows, f"docs/tools.md: no row for {file}"
            assert sorted(re.findall(r"RG\d{3}", rows[file])) == ids, file
    for files in NOT_RAY.values():
        for file in files:
            assert file in rows, f"docs/tools.md: no row for {file}"


def test_the_rule_table_is_one_table() -> None:
    """Every rule's row sits in docs/tools.md's one table of rules: a paragraph between two
    rows ends a Markdown table, and the rows after it render as plain text."""
    lines = doc("tools.md").splitlines()
    start = lines.index("| ID | severity | finds | why that severity |")
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    in_table = {m[1] for line in lines[start + 2:end] if (m := re.match(r"\| (RG\d{3}) \|", line))}
    rows = set(re.findall(r"^\| (RG\d{3}) \|", doc("tools.md"), re.M))
    assert in_table == rows
    assert {"RG001", "RG009", "RG010", "RG017", "RG105"} <= rows
