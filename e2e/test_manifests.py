"""Every manifest in deploy/ is accepted by the real API server: server-side dry runs
against kube-apiserver with KubeRay's CRDs installed, so its schemas, defaulting and
admission decide, not our reading of them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.build import COMPONENTS
from testbed.cluster import DEPLOY, Testbed, running_testbed

pytestmark = pytest.mark.e2e

# The setups: every kustomization but components (deploy/image, which they include).
SETUPS = sorted(p.parent.name for p in DEPLOY.glob("*/kustomization.yaml")
                if "kind: Component" not in p.read_text())
EXAMPLES = sorted(str(p.relative_to(DEPLOY)) for p in DEPLOY.glob("*/example-*.yaml"))


@pytest.fixture(scope="module")
def blank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A cluster with nothing applied: each setup is checked as a first install (the
    testbed proper has deploy/kube-scheduler-second applied, whose Service's ClusterIP
    another setup could not change in place). The namespaces are there, as after a real
    apply (a server dry run creates none), and Volcano's, whose ConfigMap deploy/volcano
    patches."""
    with running_testbed(tmp_path_factory.mktemp("blank"), control_plane_only=True) as bed:
        for namespace in ("raygate-system", "ray", "volcano-system"):
            bed.kubectl("create", "namespace", namespace)
        yield bed


def test_every_setup_is_found() -> None:
    assert SETUPS == ["base", "kube-scheduler-default", "kube-scheduler-second", "kueue",
                      "volcano"]
    assert len(EXAMPLES) == 4


@pytest.mark.parametrize("setup", SETUPS)
def test_setup_is_accepted_by_the_api_server(blank: Testbed, setup: str) -> None:
    result = blank.kubectl("apply", "--dry-run=server", "-k", str(DEPLOY / setup))
    assert "(server dry run)" in result.stdout


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_raycluster_is_accepted_by_the_api_server(blank: Testbed, example: str) -> None:
    result = blank.kubectl("apply", "--dry-run=server", "-f", str(DEPLOY / example))
    assert "raycluster.ray.io/" in result.stdout and "(server dry run)" in result.stdout


def test_the_default_scheduler_setup_parses_in_the_real_kube_scheduler(
        blank: Testbed, tmp_path: Path) -> None:
    """deploy/kube-scheduler-default's KubeSchedulerConfiguration is a file the control
    plane reads, not an object: the real kube-scheduler must accept it as it is."""
    config = DEPLOY / "kube-scheduler-default" / "scheduler-config.yaml"
    kubeconfig = blank.admin_kubeconfig
    text = config.read_text() + f"clientConnection:\n  kubeconfig: {kubeconfig}\n" \
        "leaderElection:\n  leaderElect: false\n"
    patched = tmp_path / "scheduler-config.yaml"
    patched.write_text(text)
    binary = COMPONENTS["kubernetes"].path("kube-scheduler")
    # --write-config-to makes kube-scheduler load, default and validate the file, write
    # the result and exit, without scheduling anything.
    out = tmp_path / "effective.yaml"
    result = subprocess.run([str(binary), f"--config={patched}", f"--write-config-to={out}"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "10.96.0.88" in out.read_text()  # the extender, unscoped (the marker is off)
