"""``raygate uninstall`` (raygate.server.uninstall): the JSON Patches it builds, applied by
a real RFC 6902 implementation (jsonpatch), and its run against an in-memory API whose
objects those patches change. The double gives what the real API server cannot be made
to give on demand (another writer between a read and a patch, a refusal, a Deployment's
pods that take their time); e2e/test_uninstall.py runs the same command against the real
kube-apiserver, under the chart's hook account."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jsonpatch
import msgspec
import pytest

from raygate.policy.native import GATE, gate_removal
from raygate.server.kube.transport import ApiError, NotServed
from raygate.server.uninstall import Options, Uninstall
from raygate.server.uninstall_clusters import scale_gate_removal

Obj = dict[str, Any]
OTHER = {"name": "example.com/quota"}


def gate(name: str) -> Obj:
    return {"name": name}


@pytest.mark.parametrize(("gates", "left"), [
    ([GATE], []),
    (["example.com/a", GATE, "example.com/b"], ["example.com/a", "example.com/b"]),
    ([GATE, "example.com/a"], ["example.com/a"]),
])
def test_the_gate_removal_removes_raygates_gate_and_nothing_else(
        gates: list[str], left: list[str]) -> None:
    pod = {"metadata": {"uid": "u1", "labels": {"ray.io/cluster": "rc"}},
           "spec": {"schedulingGates": [gate(g) for g in gates]}}
    patched = jsonpatch.apply_patch(pod, gate_removal("u1", gates))
    assert patched["spec"]["schedulingGates"] == [gate(g) for g in left]
    assert patched["metadata"] == pod["metadata"]  # no rule, no label: nothing of raygate's
    for stale in (gate_removal("u0", gates), gate_removal("u1", ["example.com/x", *gates])):
        with pytest.raises(jsonpatch.JsonPatchTestFailed):
            jsonpatch.apply_patch(pod, stale)


def cluster(*groups: list[Obj] | None, uid: str = "c1") -> Obj:
    return {"metadata": {"uid": uid}, "spec": {"workerGroupSpecs": [
        {"groupName": f"g{i}", **({"scaleStrategy": {"scaleGate": entries}}
                                  if entries is not None else {})}
        for i, entries in enumerate(groups)]}}


RG_A, RG_B = gate("raygate.io/scale-up"), gate("raygate.io/other")


@pytest.mark.parametrize(("groups", "left"), [
    ([[RG_A]], [[]]),
    ([[OTHER, RG_A, OTHER, RG_B]], [[OTHER, OTHER]]),
    ([None, [RG_A, OTHER], [OTHER]], [None, [OTHER], [OTHER]]),
    ([[OTHER], None], None),  # nothing of raygate's: no patch at all
    ([None], None),  # the field pruned (KubeRay 1.6's CRD): no patch
    ([["raygate.io/plain-string", 7, {"nam": "raygate.io/x"}]], None),  # not entries
    # Keyed by `type`, as kuberay#5094's last revision (the testbed's stand-in) has it.
    ([[{"type": "kueue.k8s.io/quota-exceeded"}, {"type": "raygate.io/no-node-coming"}]],
     [[{"type": "kueue.k8s.io/quota-exceeded"}]]),
])
def test_the_scale_gate_removal_removes_raygates_entries_only(
        groups: list[list[Obj] | None], left: list[list[Obj] | None] | None) -> None:
    body = cluster(*groups)
    ops = scale_gate_removal("c1", [g for g in groups])
    if left is None:
        assert ops == []
        return
    patched = jsonpatch.apply_patch(body, ops)
    assert patched == cluster(*left)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):  # another RayCluster of that name
        jsonpatch.apply_patch(cluster(*groups, uid="c0"), ops)


# --- the run, against objects in memory ------------------------------------------------------


class Api:
    """The calls of ``UninstallApi`` on dicts; each write is recorded, patches applied by
    jsonpatch, a failed ``test`` answered 422 as the API server does."""

    def __init__(self) -> None:
        self.webhooks = {"raygate-ray-pods"}
        self.deployments: dict[tuple[str, str], int] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.budgets: dict[tuple[str, str], Obj] = {}
        self.clusters: dict[tuple[str, str], Obj] | None = {}
        self.calls: list[str] = []
        self.before_patch: Callable[[str], None] = lambda name: None
        self.refuse: set[str] = set()
        self.pods_per_list: list[int] = []
        """Pods of a stopped Deployment each list finds, in turn (then none)."""

    def _write(self, call: str) -> None:
        self.calls.append(call)
        if call in self.refuse:
            raise ApiError(403, "Forbidden", f"{call} is forbidden")

    def delete_webhook_configuration(self, name: str) -> bool:
        self._write(f"delete webhook {name}")
        found = name in self.webhooks
        self.webhooks.discard(name)
        return found

    def scale_to_zero(self, namespace: str, name: str) -> str | None:
        self._write(f"scale {namespace}/{name}")
        if (namespace, name) not in self.deployments:
            return None
        self.deployments[namespace, name] = 0
        return f"app.kubernetes.io/name={name}"

    def list_raw(self, path: str, limit: int = 500,
                 query: Sequence[tuple[str, str]] = ()) -> Iterator[msgspec.Raw]:
        if path == "/api/v1/pods":
            items = [p for p in self.pods.values() if p["status"]["phase"] == "Pending"]
        elif path.startswith("/api/v1/namespaces/"):  # a stopped Deployment's pods
            items = [{}] * (self.pods_per_list.pop(0) if self.pods_per_list else 0)
        else:
            if self.clusters is None:
                raise NotServed(404, "NotFound", "the server could not find the resource")
            items = list(self.clusters.values())
        return iter([msgspec.Raw(msgspec.json.encode(i)) for i in items])

    def get(self, path: str, query: list[tuple[str, str]]) -> bytes:
        *_, namespace, _, name = path.split("/")
        if (namespace, name) not in self.pods:
            raise NotServed(404, "NotFound", f"pods {name} not found")
        return msgspec.json.encode(self.pods[namespace, name])

    def patch_pod(self, namespace: str, name: str, ops: list[Obj]) -> None:
        self.before_patch(name)
        self._write(f"patch pod {namespace}/{name}")
        self.pods[namespace, name] = _patched(self.pods[namespace, name], ops)

    def list_budgets(self, label_selector: str) -> list[tuple[str, str, str]]:
        assert label_selector == "app.kubernetes.io/managed-by=raygate"
        return [(ns, name, "") for ns, name in self.budgets]

    def delete_budget(self, namespace: str, name: str) -> None:
        self._write(f"delete budget {namespace}/{name}")
        self.budgets.pop((namespace, name), None)

    def patch_raycluster(self, namespace: str, name: str, ops: list[Obj]) -> None:
        assert self.clusters is not None
        self._write(f"patch raycluster {namespace}/{name}")
        self.clusters[namespace, name] = _patched(self.clusters[namespace, name], ops)


def _patched(obj: Obj, ops: list[Obj]) -> Obj:
    try:
        result: Obj = jsonpatch.apply_patch(copy.deepcopy(obj), ops)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise ApiError(422, "Invalid", f"the test failed: {exc}") from None
    return result


def pod(name: str, *gates: str, uid: str = "", phase: str = "Pending") -> Obj:
    return {"metadata": {"name": name, "namespace": "ray", "uid": uid or f"uid-{name}"},
            "spec": {"schedulingGates": [gate(g) for g in gates]}, "status": {"phase": phase}}


def raycluster(name: str, scheduler: str = "", groups: Sequence[list[Obj] | None] = ()) -> Obj:
    template = {"spec": {"schedulerName": scheduler} if scheduler else {}}
    body = cluster(*groups, uid=f"uid-{name}")
    body["metadata"].update(name=name, namespace="ray")
    body["spec"]["headGroupSpec"] = {"template": template}
    for group in body["spec"]["workerGroupSpecs"]:
        group["template"] = template
    return body


def run(api: Api, **options: Any) -> tuple[int, str, str, Uninstall]:
    out, err = io.StringIO(), io.StringIO()
    now = [0.0]
    command = Uninstall(api, Options(**options), out, err, clock=lambda: now[0],
                        sleep=lambda s: now.__setitem__(0, now[0] + s))
    summary = command.run()
    return summary.failures, out.getvalue(), err.getvalue(), command


@pytest.fixture
def cluster_api() -> Api:
    api = Api()
    api.deployments["raygate-system", "ray-scheduler"] = 2
    api.pods.update({("ray", p["metadata"]["name"]): p for p in (
        pod("held-1", GATE), pod("held-2", "example.com/a", GATE), pod("free", "example.com/a"),
        pod("running", phase="Running"))})
    api.budgets.update({("ray", "rc-head-1"): {}, ("ray", "rc-g0-2"): {}})
    api.clusters = {("ray", "rc"): raycluster("rc", "ray-scheduler", [[RG_A, OTHER]]),
                    ("ray", "plain"): raycluster("plain", "", [None])}
    return api


def test_a_run_takes_back_everything_in_order_and_a_second_finds_nothing(
        cluster_api: Api) -> None:
    api = cluster_api
    failures, out, err, _ = run(api, stop=(("raygate-system", "ray-scheduler"),))
    assert (failures, err) == (0, "")
    assert api.calls == [
        "delete webhook raygate-ray-pods",  # no new gate, before anything is released
        "scale raygate-system/ray-scheduler",
        "patch pod ray/held-1", "patch pod ray/held-2",
        "delete budget ray/rc-head-1", "delete budget ray/rc-g0-2",
        "patch raycluster ray/rc"]
    assert [g["name"] for p in api.pods.values() for g in p["spec"]["schedulingGates"]] == [
        "example.com/a", "example.com/a"]
    assert api.budgets == {} and api.webhooks == set()
    assert api.deployments["raygate-system", "ray-scheduler"] == 0
    assert api.clusters is not None
    assert api.clusters["ray", "rc"]["spec"]["workerGroupSpecs"][0]["scaleStrategy"] == {
        "scaleGate": [OTHER]}
    assert "WARNING: 1 RayCluster(s) name schedulerName ray-scheduler" in out
    assert "  ray/rc (head, group g0)\n" in out and "ray/plain" not in out
    assert out.splitlines()[-1] == (
        "raygate uninstall: done: webhook configuration raygate-ray-pods deleted, "
        "1 deployment stopped, 2 pods released from raygate.io/placement, 2 budgets deleted, "
        "1 scale gate removed from 1 RayCluster, 1 RayCluster naming ray-scheduler")

    api.calls.clear()
    failures, out, err, _ = run(api, stop=(("raygate-system", "ray-scheduler"),))
    assert failures == 0
    assert api.calls == ["delete webhook raygate-ray-pods", "scale raygate-system/ray-scheduler"]
    assert "webhook configuration raygate-ray-pods absent" in out
    assert "0 pods released" in out and "0 budgets deleted" in out


def test_a_dry_run_writes_nothing_and_says_what_it_would_do(cluster_api: Api) -> None:
    failures, out, _, _ = run(cluster_api, stop=(("raygate-system", "ray-scheduler"),),
                              dry_run=True)
    assert failures == 0 and cluster_api.calls == []
    assert out.splitlines()[-1] == (
        "raygate uninstall: dry run: webhook configuration raygate-ray-pods would be deleted, "
        "1 deployment would be stopped, 2 pods would be released from raygate.io/placement, "
        "2 budgets would be deleted, 1 scale gate would be removed from 1 RayCluster, "
        "1 RayCluster naming ray-scheduler")


def test_a_pod_another_writer_changed_is_read_again(cluster_api: Api) -> None:
    """raygate's own leader released held-1 between the list and the patch (its test
    fails: 422): read again, nothing left to do. held-2's gate moved: tried again at its
    new index."""
    api = cluster_api

    def another_writer(name: str) -> None:
        gates = api.pods["ray", name]["spec"]["schedulingGates"]
        if name == "held-1" and gates:
            gates.clear()
        elif name == "held-2" and gates[0]["name"] != GATE:
            gates.reverse()
    api.before_patch = another_writer
    failures, out, _, command = run(api)
    assert failures == 0
    assert "pod ray/held-1: released by another writer, or gone" in out
    assert "pod ray/held-2: released" in out
    assert api.pods["ray", "held-2"]["spec"]["schedulingGates"] == [gate("example.com/a")]
    assert command.summary.released == 1


def test_refusals_are_said_and_counted_and_the_rest_goes_on(cluster_api: Api) -> None:
    api = cluster_api
    api.refuse = {"delete webhook raygate-ray-pods", "patch pod ray/held-1",
                  "delete budget ray/rc-head-1"}
    failures, out, err, _ = run(api)
    assert failures == 3
    assert err.splitlines() == [
        "raygate uninstall: 403 Forbidden: delete webhook raygate-ray-pods is forbidden",
        "raygate uninstall: releasing pod ray/held-1: 403 Forbidden: patch pod ray/held-1 "
        "is forbidden",
        "raygate uninstall: deleting poddisruptionbudget ray/rc-head-1: 403 Forbidden: "
        "delete budget ray/rc-head-1 is forbidden"]
    assert api.budgets.keys() == {("ray", "rc-head-1")}
    assert "INCOMPLETE, 3 failures (above): run it again" in out.splitlines()[-1]


def test_a_cluster_without_kuberays_crd_or_without_raygate_is_fine() -> None:
    api = Api()
    api.webhooks.clear()
    api.clusters = None
    failures, out, _, _ = run(api, stop=(("raygate-system", "raygate"),))
    assert failures == 0
    assert "deployment raygate-system/raygate: not there" in out
    assert "0 RayClusters naming ray-scheduler" in out.splitlines()[-1]


@pytest.mark.parametrize(("lists", "said"), [
    ([2, 1], "its pods are gone"),
    ([1] * 500, "WARNING: deployment raygate-system/ray-scheduler: 1 pod(s) still there "
                "after 5s; going on"),
])
def test_stop_waits_for_raygates_pods_then_goes_on(cluster_api: Api, lists: list[int],
                                                     said: str) -> None:
    cluster_api.pods_per_list = lists
    failures, out, _, _ = run(cluster_api, stop=(("raygate-system", "ray-scheduler"),),
                              stop_timeout=5.0)
    assert failures == 0 and said in out
    assert out.index(said) < out.index("pod ray/held-1: released")


@pytest.mark.parametrize(("argv", "said"), [
    (["--stop", "raygate"], "give --stop as NAMESPACE/DEPLOYMENT"),
    (["--stop", "a/b/c"], "give --stop as NAMESPACE/DEPLOYMENT"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "kubeconfig /nonexistent/kubeconfig"),
])
def test_the_command_refuses_what_it_cannot_use(argv: list[str], said: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from raygate.server.cli import main

    assert main(["uninstall", *argv]) == 2
    assert said in capsys.readouterr().err
