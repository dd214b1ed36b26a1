"""`helm uninstall` strands nothing (issue #38). The chart is installed with the real helm
into a control plane of its own (e2e/uninstall.py says why), raygate runs as the chart's
ray-scheduler pod would run it, gating through the chart's own webhook configuration. A
RayCluster that opted into the all-or-nothing scale-up has three workers held at raygate's
gate (no node has room for them), raygate has written the head's PodDisruptionBudget, and
its worker group carries a scale gate of raygate's beside another writer's. Then `helm
uninstall`, and nothing of raygate's is left: no pod gated, no budget, no scale gate of
raygate's (the other writer's stays), no webhook configuration, no hook account; and the
hook's log names the RayCluster that names ray-scheduler.

No kubelet runs here (kwok would mark the hook's pod Succeeded without running anything),
so the test plays the kubelet for two pods:

- the hook's: it runs the pod's container command locally (`raygate uninstall
  --stop=raygate-system/ray-scheduler`, the image's entry point) with a token of the
  pod's ServiceAccount bound to the pod (TokenRequest), then marks the pod Succeeded; the
  real job controller completes the Job and helm goes on;
- raygate's: a stand-in pod that the ray-scheduler Deployment's selector selects; when
  the hook scales the Deployment to 0, the test stops raygate's process and deletes the
  stand-in, as a kubelet ends a pod. The hook waits for that before it releases anything.

KubeRay 1.6.1's CRD prunes ``scaleStrategy.scaleGate``, the field raygate's scale gates
write: the testbed's stand-in of it (``testbed.kuberay_standin``, keyed by ``type``) is
used.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import report
from e2e.chart import CHART, NAMESPACE, VALUES, Obj, documents, helm_template, pods, tool
from e2e.lagging import metric
from e2e.objects import Group, raycluster
from e2e.scenario import wait_until
from e2e.uninstall import HOOK, ChartRaygate, chart_testbed, play_kubelet, widen_scale_strategy
from raygate.policy.native import GATE
from raygate.policy.scale_up import ALL_OR_NOTHING, ANNOTATION
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e

HOOK_ANNOTATION = "helm.sh/hook"
RAYGATE_SCALE_GATE = {"type": "raygate.io/scale-up"}  # keyed as the stand-in CRD has it
OTHER_SCALE_GATE = {"type": "example.com/keep"}
WORKERS = 3


def hooks(objects: list[Obj]) -> dict[str, Obj]:
    return {o["kind"]: o for o in objects
            if HOOK_ANNOTATION in o["metadata"].get("annotations", {})}


@pytest.mark.parametrize("values", VALUES)
def test_the_hook_runs_the_command_under_an_account_of_its_own(values: str) -> None:
    """pre-delete; its account, roles and bindings before the Job and gone once it
    succeeded; rights to exactly what the command does (of webhook configurations only
    raygate's, of Deployments only the one that runs raygate); off with uninstall.enabled."""
    objects = documents(helm_template(values))
    (serving,) = [name for name, t in pods(objects).items()
                  if any(c["name"] == "raygate" for c in t["spec"]["containers"])]
    found = hooks(objects)
    assert sorted(found) == ["ClusterRole", "ClusterRoleBinding", "Job", "Role",
                             "RoleBinding", "ServiceAccount"]
    for kind, obj in found.items():
        annotations = obj["metadata"]["annotations"]
        assert annotations[HOOK_ANNOTATION] == "pre-delete" and obj["metadata"]["name"] == HOOK
        first = kind != "Job"
        assert int(annotations["helm.sh/hook-weight"]) == (-10 if first else 0)
        assert annotations["helm.sh/hook-delete-policy"] == (
            "before-hook-creation,hook-succeeded" if first else "before-hook-creation")
    assert found["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
         "verbs": ["list", "delete"]},
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list", "patch"]},
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["mutatingwebhookconfigurations"], "resourceNames": ["raygate-ray-pods"],
         "verbs": ["delete"]}]
    assert found["Role"]["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments/scale"],
                                       "resourceNames": [serving], "verbs": ["patch"]}]
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert found[binding]["subjects"] == [
            {"kind": "ServiceAccount", "name": HOOK, "namespace": NAMESPACE}]
    pod = found["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == HOOK
    (container,) = pod["containers"]
    assert container["args"] == ["uninstall", f"--stop={NAMESPACE}/{serving}"]
    assert not hooks(documents(helm_template(values, "--set", "uninstall.enabled=false")))


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with chart_testbed(tmp_path_factory.mktemp("uninstall")) as started:
        yield started


def helm(bed: Testbed, *argv: str) -> list[str]:
    return [str(tool("helm", "helm")), *argv, "--kubeconfig", str(bed.admin_kubeconfig),
            "--namespace", NAMESPACE]


def gated(bed: Testbed) -> list[str]:
    items = json.loads(bed.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    return [p["metadata"]["name"] for p in items
            if GATE in [g["name"] for g in p["spec"].get("schedulingGates", [])]]


def raygate_budgets(bed: Testbed) -> list[str]:
    return bed.kubectl("get", "pdb", "-A", "-l", "app.kubernetes.io/managed-by=raygate",
                       "-o", "name").stdout.split()


def held_raycluster() -> Obj:
    # Autoscaled, minReplicas 0: every worker surplus, held with its batch.
    body = raycluster("work", "ray", "uninstall", [Group("overflow", WORKERS, "1", max=WORKERS)])
    body["metadata"]["annotations"] = {ANNOTATION: ALL_OR_NOTHING}
    body["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {
        "scaleGate": [RAYGATE_SCALE_GATE, OTHER_SCALE_GATE]}
    return body


def stand_in(bed: Testbed, raygate: ChartRaygate) -> threading.Thread:
    """raygate's pod, for the hook to wait for: deleted, raygate stopped, once the
    ray-scheduler Deployment is scaled to 0."""
    bed.kubectl("run", "ray-scheduler-stand-in", "-n", NAMESPACE, "--image=example.invalid/x",
                "--labels=app.kubernetes.io/name=ray-scheduler")

    def kubelet() -> None:
        wait_until("ray-scheduler scaled to 0", lambda: bed.kubectl(
            "get", "deploy", "ray-scheduler", "-n", NAMESPACE, "-o",
            "jsonpath={.spec.replicas}", check=False).stdout == "0", timeout=120)
        raygate.stop()
        bed.kubectl("delete", "pod", "ray-scheduler-stand-in", "-n", NAMESPACE, "--wait=false")
    thread = threading.Thread(target=kubelet, daemon=True)
    thread.start()
    return thread


def test_helm_uninstall_leaves_no_pod_gated_and_nothing_raygate_wrote(
        bed: Testbed, tmp_path: Path) -> None:
    started = time.monotonic()
    widen_scale_strategy(bed)
    subprocess.run(helm(bed, "install", "raygate", str(CHART), "--create-namespace"),
                   check=True, capture_output=True, timeout=120)
    raygate = ChartRaygate(bed)
    raygate.start()
    bed.kubectl("create", "namespace", "ray")
    bed.kubectl("apply", "-f", "-", input=json.dumps(held_raycluster()))
    wait_until(f"{WORKERS} workers held by the all-or-nothing batch, and raygate's budget",
               lambda: metric(bed.raygate_url, "raygate_scale_up_held_pods") == WORKERS
               and len(gated(bed)) == WORKERS and raygate_budgets(bed), timeout=60)
    held_at = time.monotonic() - started
    kubelet = stand_in(bed, raygate)

    uninstall = subprocess.Popen(helm(bed, "uninstall", "raygate", "--timeout=2m"),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ran, hook_pod = play_kubelet(bed)
    helm_output, _ = uninstall.communicate(timeout=120)
    kubelet.join(timeout=10)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert uninstall.returncode == 0, helm_output

    assert gated(bed) == []
    assert raygate_budgets(bed) == []
    spec = json.loads(bed.kubectl("get", "raycluster", "work", "-n", "ray", "-o", "json")
                      .stdout)["spec"]
    assert spec["workerGroupSpecs"][0]["scaleStrategy"]["scaleGate"] == [OTHER_SCALE_GATE]
    for kind in ("mutatingwebhookconfiguration", "clusterrole", "clusterrolebinding"):
        left = bed.kubectl("get", kind, "-o", "name").stdout.split()
        assert not [o for o in left if "raygate" in o], left
    assert bed.kubectl("get", "serviceaccount", HOOK, "-n", NAMESPACE,
                       check=False).returncode != 0

    out = ran.stdout
    said = ["mutatingwebhookconfiguration raygate-ray-pods: deleted",
            "deployment raygate-system/ray-scheduler: its pods are gone",
            "pod ray/work-overflow-", "poddisruptionbudget ray/work-head-",
            "raycluster ray/work: 1 scale gate(s) of raygate removed",
            "  ray/work (head, group overflow)\n"]
    positions = [out.find(s) for s in said]
    assert -1 not in positions and positions == sorted(positions), out
    assert out.splitlines()[-1] == (
        "raygate uninstall: done: webhook configuration raygate-ray-pods deleted, "
        f"1 deployment stopped, {WORKERS} pods released from raygate.io/placement, "
        "1 budget deleted, 1 scale gate removed from 1 RayCluster, "
        "1 RayCluster naming ray-scheduler")
    _report(hook_pod, out, held_at, time.monotonic() - started)


def _report(hook_pod: dict[str, Any], out: str, held_at: float, total: float) -> None:
    (container,) = hook_pod["spec"]["containers"]
    report.add("uninstall", (
        "### `helm uninstall` strands nothing\n\n"
        f"The chart installed with the real helm, raygate (as the chart's account, behind "
        f"the chart's webhook configuration) holding {WORKERS} workers of an all-or-nothing "
        f"scale-up at its gate after {held_at:.1f} s, its head budget written, a scale gate "
        "of raygate's beside another writer's. `helm uninstall`: the pre-delete hook's Job "
        f"ran `raygate {' '.join(container['args'])}` under its own account (the test played "
        "the kubelet for its pod and for raygate's); then no pod gated, no budget and no "
        "scale gate of raygate's, no webhook configuration, no hook account. "
        f"{total:.1f} s in all. The hook's log:\n\n```\n{out}```\n"))
