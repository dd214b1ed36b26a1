"""docs/troubleshooting.md's steps on the real components: every captured block of the
page (``e2e.doc_capture``) run once the scenario has built its situation, its output
held to what kube-apiserver, kube-scheduler, KubeRay and raygate print now
(``RAYGATE_CAPTURE_DOCS=1``: the page rewritten from this run instead).

The cluster: the quickstart's RayCluster ``ray-demo`` in ``ray``
(deploy/kube-scheduler-second/example-raycluster.yaml), its worker groups tolerating the
GPU taint, as a team writes them to let surplus workers use idle GPUs; a CPU node
``cpu-1`` with room for the head and one worker, a GPU node ``gpu-1`` with room for four.
The head and one floor worker run on ``cpu-1``, the other floor worker waits (its rule
keeps it off ``gpu-1``), two overflow workers run on ``gpu-1``. Then, in the page's
order: the floor's budgets refuse a drain; the webhook's configuration and counters; a CA
bundle that is not the webhook's (the pod created meanwhile gets no rule, and the
extender refuses it the GPU node in its stead); the CA put back, that pod replaced; a CPU
node ``cpu-2`` for the waiting floor worker; an all-or-nothing scale-up that does not
fit, held at raygate's gate, and the scale gate raygate writes for it into the group
(``raygate.io/scale-up-cannot-fit``: no node autoscaler runs here), as the RayCluster, the
admission API, explain and ``raygate check`` show it.

The testbed is this module's own: the page shows a whole cluster (every node counted in
a scheduler's message, every admission in raygate's counters), so no other scenario's
nodes or pods may be in it. Its webhook configuration is deploy/native-placement's with
the selectors as shipped (the testbed's adds one for its baselines); only its address
and CA differ, as no Service fronts raygate here. The RayCluster is created suspended and
resumed once raygate's cache has it: otherwise its pods may reach the webhook first now
and then (two watches, in no set order), wait at the gate for it a moment, and add a
gate to the counters the page shows.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import report
from e2e.doc_capture import CAPTURE, Page
from e2e.objects import TOLERATE_GPU, node
from e2e.scenario import wait_until
from raygate.client import connect
from raygate.contract.admission_status import AdmissionStatus
from raygate.contract.errors import RaygateError
from raygate.policy.admission.gates import CANNOT_FIT
from raygate.policy.native import GATE, LABEL_ROLE
from testbed.cluster import DEPLOY, REPO, Testbed, binary, running_testbed
from testbed.kuberay_standin import GATE_KEY
from testbed.pki import make_pki
from testbed.webhook import NATIVE_PLACEMENT, webhook_configuration

pytestmark = pytest.mark.e2e

PAGE = REPO / "docs" / "troubleshooting.md"
NS = "ray"
PODS = f"/api/v1/namespaces/{NS}/pods"
CLUSTER = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/ray-demo"
NOT_MATCHED = "didn't match Pod's node affinity/selector"
TOOLS = ("bash", "curl", "jq", "openssl", "base64", "grep")
"""What the page's commands run besides the testbed's kubectl (an operator's shell)."""
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A testbed of this module's own (the page shows the whole cluster)."""
    with running_testbed(tmp_path_factory.mktemp("troubleshooting")) as started:
        yield started


@pytest.fixture(scope="module")
def page(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Page:
    """The page, its commands run as an operator's terminal runs them: the testbed's
    kubectl first on PATH, its admin kubeconfig; ``localhost:8888`` and ``:8889`` (the
    page's port-forwards to raygate) are raygate's HTTP address, ``localhost:8443`` its
    webhook's."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    assert not absent, f"the page's commands need {', '.join(absent)} on PATH"
    assert testbed.pki is not None
    set_webhook_ca(testbed, testbed.pki.ca_cert)
    path = [str(binary("kubernetes", "kubectl").parent), str(Path(sys.executable).parent),
            os.environ.get("PATH", "")]
    env = {**os.environ, "KUBECONFIG": str(testbed.admin_kubeconfig),
           "PATH": os.pathsep.join(path)}
    http = testbed.raygate_url.removeprefix("http://")
    return Page(PAGE, env, tmp_path_factory.mktemp("terminal"), {
        "localhost:8888": http, "localhost:8889": http,
        "localhost:8443": f"127.0.0.1:{testbed.ports.raygate_webhook}"})


@pytest.fixture(scope="module")
def reader(testbed: Testbed) -> str:
    """A token of the quickstart's reader of the admission API (docs/deploy.md), whose
    commands make it."""
    testbed.kubectl("-n", NS, "create", "serviceaccount", "reader")
    testbed.kubectl("create", "clusterrolebinding", "ray-reader",
                    "--clusterrole=raygate-status-reader", f"--serviceaccount={NS}:reader")
    return testbed.kubectl("-n", NS, "create", "token", "reader").stdout.strip()


def admission(testbed: Testbed, token: str) -> AdmissionStatus | None:
    """raygate's admission status of ray-demo (None while its cache lacks it)."""
    with connect(testbed.raygate_url, token=lambda: token) as client:
        try:
            return client.get(NS, "ray-demo")
        except RaygateError:
            return None


def set_webhook_ca(testbed: Testbed, ca: Path) -> None:
    """deploy/native-placement's webhook configuration, its selectors as shipped, calling
    raygate's webhook address and trusting ``ca``."""
    shipped = next(d for d in yaml.safe_load_all((NATIVE_PLACEMENT / "webhook.yaml")
                                                 .read_text())
                   if d and d["kind"] == "MutatingWebhookConfiguration")
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(webhook_configuration(
        "raygate-ray-pods", f"https://127.0.0.1:{testbed.ports.raygate_webhook}", ca,
        shipped["webhooks"][0]["namespaceSelector"])))


def decided(testbed: Testbed) -> bool:
    """Whether a Ray pod created now is decided by raygate's webhook: a server-side dry
    run (nothing created, no place held) reached it and came back labelled."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": "ray-demo-overflow-worker-", "labels": {
            "ray.io/is-ray-node": "yes", "ray.io/cluster": "ray-demo",
            "ray.io/node-type": "worker", "ray.io/group": "overflow"}},
        "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]}}
    made = testbed.api().request("POST", PODS, probe, query=[("dryRun", "All")])
    return LABEL_ROLE in made["metadata"]["labels"]


def pods(testbed: Testbed, selector: str = "") -> list[Obj]:
    return [p for p in testbed.api().items(PODS, labelSelector=selector)
            if not p["metadata"].get("deletionTimestamp")]


def waiting(testbed: Testbed, selector: str, says: str) -> list[Obj]:
    """The unbound pods of ``selector`` whose PodScheduled condition says ``says``."""
    return [p for p in pods(testbed, selector) if not p["spec"].get("nodeName") and any(
        c["type"] == "PodScheduled" and says in c.get("message", "")
        for c in p["status"].get("conditions") or [])]


def on(testbed: Testbed, selector: str, node_name: str) -> list[Obj]:
    return [p for p in pods(testbed, selector) if p["spec"].get("nodeName") == node_name
            and p["status"].get("phase") == "Running"]


def add_node(testbed: Testbed, name: str, cpu: str, gpus: int = 0) -> None:
    body = node(name, "troubleshooting", cpu=1, gpus=gpus, memory="64Gi")
    for resources in (body["status"]["capacity"], body["status"]["allocatable"]):
        resources["cpu"] = cpu
    testbed.api().create("/api/v1/nodes", body)


def start_ray_demo(testbed: Testbed, token: str) -> None:
    """The quickstart's example, its worker groups tolerating the GPU taint: created
    suspended, resumed once raygate's cache has it."""
    cluster: Obj = yaml.safe_load(
        (DEPLOY / "kube-scheduler-second" / "example-raycluster.yaml").read_text())
    for group in cluster["spec"]["workerGroupSpecs"]:
        group["template"]["spec"]["tolerations"] = [TOLERATE_GPU]
    cluster["spec"]["suspend"] = True
    testbed.kubectl("create", "-f", "-", input=yaml.safe_dump(cluster))
    wait_until("ray-demo in raygate's cache", lambda: admission(testbed, token), timeout=30)
    testbed.api().json_patch(CLUSTER, [{"op": "replace", "path": "/spec/suspend",
                                        "value": False}])


def scale_overflow(testbed: Testbed, replicas: int) -> None:
    testbed.api().json_patch(CLUSTER, [{"op": "replace", "value": replicas,
                                        "path": "/spec/workerGroupSpecs/1/replicas"}])


def test_the_pages_steps_on_the_real_components(testbed: Testbed, page: Page,
                                                reader: str) -> None:
    # Each block of the page runs where the scenario has built its situation; a block
    # added to the page (a `kubectl describe` of a held pod, say) is one step here.
    started = time.monotonic()
    layout(testbed, reader)
    for step in ("pods", "rule", "pending", "budgets", "webhook"):
        page.step(step)
    ca_not_the_webhooks(testbed)
    page.step("not-called")
    assert testbed.pki is not None
    set_webhook_ca(testbed, testbed.pki.ca_cert)
    wait_until("the webhook deciding again", lambda: decided(testbed), timeout=30)
    page.step("fixed")
    add_node(testbed, "cpu-2", "250m")
    wait_until("the undecided floor worker running on cpu-2", lambda: [
        p for p in on(testbed, "ray.io/group=baseline", "cpu-2")
        if LABEL_ROLE not in p["metadata"]["labels"]], timeout=60)
    page.step("caught-up")
    page.step("scale-up")
    wait_until("the 3 new overflow workers held at raygate's gate, the batch's reason "
               "given", lambda: held(testbed, reader) == 3, timeout=60)
    page.step("gated")
    wait_until("raygate's Events of the held scale-up", lambda: told(testbed), timeout=30)
    page.step("held-events")
    wait_until("raygate's scale gate on the overflow group, present in its admission "
               "status", lambda: scale_gated(testbed, reader), timeout=30)
    for step in ("scale-gate", "marker", "extender"):
        page.step(step)
    assert page.missing() == [], "blocks of the page no step ran"
    done = "captured anew" if CAPTURE else "matched"
    report.add("troubleshooting", (
        "### docs/troubleshooting.md, step by step\n\n"
        f"{len(page.ran)} captured blocks of the page ({', '.join(page.ran)}) run on this "
        f"module's own testbed and {done}: {time.monotonic() - started:.1f} s.\n"))


def held(testbed: Testbed, token: str) -> int:
    """How many overflow workers raygate's gate holds for a scale-up that does not fit,
    as the admission API says it."""
    gated = {p["metadata"]["name"] for p in pods(testbed, "ray.io/group=overflow")
             if GATE in {g["name"] for g in p["spec"].get("schedulingGates") or []}}
    status = admission(testbed, token)
    said = {p.name for p in (status.pods if status else [])
            if "held together until all fit" in p.reason}
    return len(gated) if gated == said else 0


def scale_gated(testbed: Testbed, token: str) -> bool:
    """raygate's gate for the held scale-up is on the overflow group, and the admission
    status shows it there (its cache saw the write)."""
    group = testbed.api().get(CLUSTER)["spec"]["workerGroupSpecs"][1]
    entries = group.get("scaleStrategy", {}).get("scaleGate") or []
    status = admission(testbed, token)
    shown = [(g.name, g.present) for s in (status.groups if status else [])
             for g in s.scale_gates if s.name == "overflow"]
    return (entries == [{GATE_KEY: CANNOT_FIT}]
            and shown == [(CANNOT_FIT, True)])


def layout(testbed: Testbed, token: str) -> None:
    """The head and a floor worker on cpu-1, the other floor worker waiting (refused
    gpu-1 by its rule), two overflow workers on gpu-1, the budgets' status written."""
    add_node(testbed, "cpu-1", "1250m")
    add_node(testbed, "gpu-1", "1", gpus=1)
    start_ray_demo(testbed, token)
    wait_until("the head and a floor worker on cpu-1, the other floor worker refused "
               "gpu-1 by its rule", lambda: len(on(testbed, "ray.io/node-type=head", "cpu-1"))
               == len(on(testbed, "ray.io/group=baseline", "cpu-1")) == 1
               and waiting(testbed, "ray.io/group=baseline", NOT_MATCHED), timeout=60)
    scale_overflow(testbed, 2)
    wait_until("two overflow workers on gpu-1", lambda: len(
        on(testbed, "ray.io/group=overflow", "gpu-1")) == 2, timeout=60)
    budgets = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
    wait_until("raygate's budgets and their status", lambda: sorted(
        (b["spec"]["minAvailable"], b.get("status", {}).get("currentHealthy"))
        for b in testbed.api().items(budgets)) == [(1, 1), (2, 1)], timeout=60)


def ca_not_the_webhooks(testbed: Testbed) -> None:
    """Another CA in the webhook's caBundle (as after a certificate made anew without its
    CA being injected); the waiting floor worker deleted and made again meanwhile."""
    other = make_pki(testbed.workdir / "another-ca")
    set_webhook_ca(testbed, other.ca_cert)
    wait_until("kube-apiserver calling the webhook with the other CA (no decision)",
               lambda: not decided(testbed), timeout=30)
    before = {p["metadata"]["name"] for p in pods(testbed, "ray.io/group=baseline")}
    testbed.kubectl("-n", NS, "delete", "pods", "-l", "ray.io/group=baseline",
                    "--field-selector=status.phase=Pending")
    wait_until("its replacement, undecided, refused gpu-1 by raygate's extender", lambda: [
        p for p in waiting(testbed, "ray.io/group=baseline", "raygate: floor-avoids-gpu")
        if p["metadata"]["name"] not in before
        and LABEL_ROLE not in p["metadata"]["labels"]], timeout=60)



def told(testbed: Testbed) -> bool:
    """raygate said the scale-up is held, on the RayCluster and on each of its pods."""
    said = [(e["regarding"]["kind"], e["reason"]) for e in testbed.api().items(
        f"/apis/events.k8s.io/v1/namespaces/{NS}/events")
        if e.get("reportingController") == "raygate.io/raygate"]
    return ("RayCluster", "ScaleUpHeld") in said and said.count(("Pod", "Held")) == 3
