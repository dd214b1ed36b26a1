"""The testbed for the end-to-end scenarios: one real control plane per session
(``make e2e`` builds its components first), a Scenario per test, the report at the end.

A failed test prints the tail of every component's log; the logs stay under the
session's temporary folder (the path is printed).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from e2e import report
from e2e.scenario import Scenario
from testbed import native_gangs as gangs_gate
from testbed.cluster import REPO, Testbed, running_testbed
from testbed.default_setup import start_default_setup
from testbed.karpenter import Karpenter, start_karpenter
from testbed.kueue import start_kueue
from testbed.volcano import start_volcano

REPORT = Path(os.environ.get("RAYGATE_E2E_REPORT", REPO / "docs" / "e2e-report.md"))


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    workdir = tmp_path_factory.mktemp("testbed")
    with running_testbed(workdir) as started:
        yield started


@pytest.fixture(scope="session")
def volcano(testbed: Testbed) -> Testbed:
    """Volcano's controllers and scheduler on the session's testbed, from the first
    scenario that needs them on (they stop with the testbed)."""
    start_volcano(testbed)
    return testbed


@pytest.fixture(scope="session")
def kueue(testbed: Testbed) -> Testbed:
    """Kueue's manager (its RayJob, RayService and RayCluster integrations, their webhooks)
    on the session's testbed, from the first scenario that needs it on (it stops with the
    testbed)."""
    start_kueue(testbed)
    return testbed


@pytest.fixture(scope="module")
def karpenter(testbed: Testbed) -> Iterator[Karpenter]:
    """Karpenter's kwok provider (its CRDs, node class and instance types, no NodePool) on
    the session's testbed, for one module's scenarios: it acts on every unschedulable pod
    in the cluster (writing its events on them), so it stops when they are done."""
    started = start_karpenter(testbed)
    # raygate looks again once a minute for a kind it did not find served: restarted now,
    # it follows NodeClaims from its first list, as where Karpenter was installed first.
    testbed.restart_raygate()
    yield started
    started.wait_claims_gone()  # the scenarios' nodes, deleted while later ones ran
    started.stop()


@pytest.fixture(scope="module")
def native_gangs(testbed: Testbed) -> Iterator[Testbed]:
    """Kubernetes' own gang scheduling (the ``GenericWorkload`` gate, the
    ``scheduling.k8s.io/v1beta1`` API) for one module's scenarios: kube-apiserver,
    kube-controller-manager and both kube-schedulers started again with the gate, then
    KubeRay and raygate (which would find the API only within a minute by itself). After
    them, the KubeRay-1.7 stand-in (``testbed.native_gangs.stamp_pods``) goes and the
    control plane starts again with the defaults, so every other scenario tests the
    default configuration. What each switch cost goes into the report."""
    on = gangs_gate.enable(testbed)
    yield testbed
    gangs_gate.remove_stamps(testbed)
    off = gangs_gate.disable(testbed)
    report.add("gangs-native-0-switch", (
        "### The `GenericWorkload` switch\n\n"
        f"kube-apiserver (the gate and `--runtime-config={gangs_gate.API}=true`), "
        "kube-controller-manager, `ray-scheduler` and `default-scheduler` started again "
        f"with the gate, then the KubeRay operator and raygate: {on:.1f} s on, {off:.1f} s "
        "back to the defaults.\n"))


@pytest.fixture(scope="session")
def default_setup(testbed: Testbed) -> Testbed:
    """deploy/kube-scheduler-default's marker webhook (for namespaces that carry
    ``testbed.default_setup.NAMESPACE_LABEL``) and its scheduler on the session's
    testbed, from the first scenario that needs them on (they stop with the testbed)."""
    start_default_setup(testbed)
    return testbed


@pytest.fixture(scope="session")
def reader_token(testbed: Testbed) -> str:
    """A ServiceAccount token allowed to read every RayCluster's admission status: bound
    to deploy/'s ``raygate-status-reader`` ClusterRole, as the docs tell operators to."""
    testbed.kubectl("create", "serviceaccount", "e2e-reader", "-n", "raygate-system")
    testbed.kubectl("create", "clusterrolebinding", "e2e-reader",
                    "--clusterrole=raygate-status-reader",
                    "--serviceaccount=raygate-system:e2e-reader")
    return testbed.kubectl("create", "token", "e2e-reader", "-n", "raygate-system").stdout.strip()


@pytest.fixture
def scenario(testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[Scenario]:
    """A namespace and node set of the test's own (named after it)."""
    name = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    made = Scenario(testbed, name)
    yield made
    made.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if report.write(REPORT):
        print(f"\nscenario report: {REPORT}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None],
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    result = yield
    if result.failed and call.when == "call":
        testbed = getattr(item, "funcargs", {}).get("testbed")
        if isinstance(testbed, Testbed):
            result.sections.append(("component logs", f"(all logs: {testbed.logs})\n"
                                    f"{testbed.logs_tail()}"))
    return result
