"""`raygate explain`'s scale gates: the pod's group's, as its RayCluster's admission status
shows them (which, writer, why, since when, wanted, present), in the reply over HTTP, gRPC
and the CLI's table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

import grpc
import httpx
import pytest

from raygate.cli import main
from raygate.contract.admission_status import ScaleGate
from raygate.contract.explain import ExplainReply
from raygate.contract.messages import from_proto
from raygate.contract.proto.raygate.v1 import explain_pb2 as pb
from raygate.contract.proto.raygate.v1 import explain_pb2_grpc
from raygate.policy.admission.gates import FOREIGN, STALE, THRASH_GUARD
from raygate.server.fronts.explain.service import explain_pod, find_pod
from testkit.builders import T0, T0_EPOCH, Obj, make_node, make_pod, make_raycluster
from tests.conftest import ServerThread, snapshot_of

KUEUE = "kueue.k8s.io/quota-exceeded"
AT_T0 = datetime.fromtimestamp(T0_EPOCH, UTC)
THRASH_REASON = "1 pod(s) preempted inside the thrash-guard window and 1 pending"


def cluster(*, over: tuple[str, ...] = (), base: tuple[str, ...] = ()) -> Obj:
    """Two worker groups, each with the scale-gate entries given (keyed by ``type``)."""
    made = make_raycluster("rc").autoscaling().group("base", replicas=1, min=1, max=1) \
        .group("over", replicas=2, min=0, max=8).obj()
    for spec, names in zip(made["spec"]["workerGroupSpecs"], (base, over), strict=True):
        if names:
            spec["scaleStrategy"] = {"scaleGate": [{"type": name} for name in names]}
    return made


NODES = [make_node("cpu-1").obj(), make_node("gpu-1").gpus(8).obj()]
# Group "over" lost a pod to preemption inside the thrash-guard window, and one pends:
# raygate wants its thrash-guard gate, since the preemption.
VICTIM = make_pod("v").ray("rc", "over").on("gpu-1").preempted(T0).obj()
PENDING = make_pod("o1").ray("rc", "over").obj()
RUNNING = make_pod("o0").ray("rc", "over").on("cpu-1").obj()
BASE = make_pod("b0").ray("rc", "base").on("cpu-1").obj()
HEAD = make_pod("h").head("rc").on("cpu-1").obj()
THRASH = (THRASH_GUARD, "raygate", THRASH_REASON, AT_T0, True, False)


@dataclass(frozen=True)
class Case:
    id: str
    pod: str
    shown: list[tuple[str, str, str, datetime | None, bool, bool]]
    """(name, writer, reason, since, wanted, present) of each gate, in order."""
    objects: list[Obj] = field(default_factory=lambda: [
        *NODES, cluster(), VICTIM, PENDING, RUNNING, BASE, HEAD])


CASES = [
    Case("a pending worker of a gated group: raygate's gate, not written yet", "o1", [THRASH]),
    Case("written, beside another controller's", "o1",
         [(*THRASH[:5], True), (KUEUE, "other", FOREIGN, None, False, True)],
         [*NODES, cluster(over=(KUEUE, THRASH_GUARD)), VICTIM, PENDING, RUNNING]),
    Case("a running worker: its group's gates all the same", "o0", [THRASH]),
    Case("a worker of a group with none", "b0", []),
    Case("another group's foreign gate is not this pod's", "b0", [],
         [*NODES, cluster(over=(KUEUE,)), BASE]),
    Case("raygate's gate that no reason holds for: being removed", "b0",
         [(THRASH_GUARD, "raygate", STALE, None, False, True)],
         [*NODES, cluster(base=(THRASH_GUARD,)), BASE]),
    Case("the head: none (no worker group)", "h", [],
         [*NODES, cluster(over=(KUEUE,)), HEAD]),
    Case("a RayCluster raygate does not know: none", "o1", [], [*NODES, PENDING]),
    Case("no Ray pod: none", "plain", [], [*NODES, cluster(over=(KUEUE,)),
                                           make_pod("plain").obj()]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_reply_carries_the_pods_groups_scale_gates(case: Case) -> None:
    snap = snapshot_of(*case.objects)
    pod = find_pod(snap, "ray", case.pod)
    assert pod is not None
    reply = explain_pod(snap, pod, T0_EPOCH + 60)
    assert [(g.name, g.writer, g.reason, g.since, g.wanted, g.present)
            for g in reply.scale_gates] == case.shown


def test_http_grpc_and_the_table_show_the_same_gates(
        server: ServerThread, client: httpx.Client, capsys: pytest.CaptureFixture[str],
) -> None:
    server.publish(*NODES, cluster(over=(KUEUE, THRASH_GUARD)), VICTIM, PENDING)
    body = client.get("/v1/namespaces/ray/pods/o1/explain").json()
    assert body["scaleGates"] == [
        {"name": THRASH_GUARD, "writer": "raygate", "reason": THRASH_REASON,
         "since": T0, "wanted": True, "present": True},
        {"name": KUEUE, "writer": "other", "reason": FOREIGN, "since": None,
         "wanted": False, "present": True}]
    with grpc.insecure_channel(f"127.0.0.1:{server.server.grpc_port}") as channel:
        message = explain_pb2_grpc.ExplainStub(channel).Explain(
            pb.ExplainRequest(namespace="ray", name="o1"), timeout=10)
    assert [(g.name, g.since.seconds, g.HasField("since")) for g in message.scale_gates] == [
        (THRASH_GUARD, int(T0_EPOCH), True), (KUEUE, 0, False)]
    over_grpc = from_proto(message, ExplainReply).scale_gates
    assert over_grpc == [ScaleGate(**{k: v for k, v in g.items()}) for g in (
        {**body["scaleGates"][0], "since": AT_T0}, body["scaleGates"][1])]
    assert main(["explain", "ray/o1", "--server", server.url]) == 0
    table = capsys.readouterr().out
    assert (f"  scale gate {THRASH_GUARD} (raygate, since {T0}): {THRASH_REASON}\n"
            f"  scale gate {KUEUE} (other): {FOREIGN}\n") in table
    grpc_url = f"grpc://127.0.0.1:{server.server.grpc_port}"
    assert main(["explain", "ray/o1", "--server", grpc_url, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["scaleGates"] == body["scaleGates"]
