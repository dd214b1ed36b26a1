"""The common part of the write bounds' scenarios (e2e/test_write_bounds*.py): the policies
as the chart renders them, applied and type-checked by the real kube-apiserver; raygate's
own transport under a ServiceAccount's token; a pod read as raygate's cache reads it; a
refused write's message."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, cast

import msgspec
import pytest

from e2e.chart import Obj, documents, helm_template
from raygate.policy.model import PodView
from raygate.server.cache.convert import PodViews
from raygate.server.kube.client import KubeTransport, load_connection
from raygate.server.kube.transport import ApiError
from raygate.server.wire import kube
from testbed.api import ApiError as TestbedApiError
from testbed.api import KubeApi
from testbed.cluster import RAYGATE_NAMESPACE, Testbed

__all__ = ["POLICIES", "account", "apply_bounds", "grant_raycluster_writes", "pod",
           "refused", "view"]

POLICIES = ("raygate-pod-writes", "raygate-budget-writes", "raygate-raycluster-writes")
_POD = msgspec.json.Decoder(kube.Pod)
_POD_VIEWS = PodViews()


def apply_bounds(bed: Testbed, values: str) -> list[Obj]:
    """The chart's write bounds for ``values`` applied to ``bed`` (unchanged where
    deploy/'s kustomize applied the same objects); each policy's status once the API
    server's status controller has type-checked its generation."""
    rendered = helm_template(values, "--show-only", "templates/write-bounds.yaml")
    assert sorted(o["metadata"]["name"] for o in documents(rendered)
                  if o["kind"] == "ValidatingAdmissionPolicy") == sorted(POLICIES)
    bed.kubectl("apply", "-f", "-", input=rendered)
    api = bed.api()
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"

    def checked() -> list[Obj] | None:
        found = [api.get(path + name) for name in POLICIES]
        if all(p.get("status", {}).get("observedGeneration") == p["metadata"]["generation"]
               for p in found):
            return found
        return None

    deadline = time.monotonic() + 60
    while (policies := checked()) is None:
        assert time.monotonic() < deadline, "the policies' type checking never came"
        time.sleep(0.5)
    return policies


def account(bed: Testbed, name: str) -> tuple[KubeTransport, KubeApi]:
    """raygate's own transport, and a plain client, as ServiceAccount ``name`` of
    raygate's namespace (a TokenRequest token, as its pod gets)."""
    kubeconfig = bed.service_account_kubeconfig(name, RAYGATE_NAMESPACE)
    plain = KubeApi.from_kubeconfig(kubeconfig, timeout=30.0, retry_statuses=frozenset())
    return KubeTransport(load_connection(str(kubeconfig))), plain


def grant_raycluster_writes(bed: Testbed, name: str) -> Callable[[], None]:
    """Let ServiceAccount ``name`` patch RayClusters (raygate's ClusterRole does not yet:
    issue #40), so that what refuses its RayCluster writes is the policy, not RBAC; the
    grant's removal."""
    role = f"e2e-raycluster-writer-{name}"
    bed.kubectl("create", "clusterrole", role, "--verb=patch,update",
                "--resource=rayclusters.ray.io")
    bed.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}",
                f"--serviceaccount={RAYGATE_NAMESPACE}:{name}")

    def revoke() -> None:
        bed.kubectl("delete", f"clusterrolebinding/{role}", f"clusterrole/{role}")
    return revoke


def pod(name: str, gates: list[str], *, affinity: Obj | None = None,
        annotations: dict[str, str] | None = None, containers: int = 1, env: int = 0) -> Obj:
    """A gated pod that is no Ray pod (no ``ray.io/`` labels): the testbed's own raygate
    leaves it to the test, whose patches are raygate's own (``release_patch`` of its
    view). ``containers`` and ``env`` make it large."""
    spec: Obj = {
        "schedulingGates": [{"name": g} for g in gates],
        "containers": [{"name": f"c{c}", "image": "busybox",
                        "env": [{"name": f"E{i}", "value": "x" * 20} for i in range(env)]}
                       for c in range(containers)],
    }
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "e2e-write-bounds"},
                         "annotations": annotations or {}},
            "spec": spec}


def view(api: KubeApi, namespace: str, name: str) -> PodView:
    """The pod as raygate's cache reads it (its decoder and view)."""
    raw = api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return _POD_VIEWS(_POD.decode(json.dumps(raw)))


def refused(write: Callable[[], Any]) -> str:
    """The API server's message for ``write``, which it must refuse (422: a
    ValidatingAdmissionPolicy's denial, reason Invalid)."""
    with pytest.raises((ApiError, TestbedApiError)) as caught:
        write()
    exc = caught.value
    code = exc.code if isinstance(exc, ApiError) else cast(TestbedApiError, exc).status
    assert code == 422, exc
    return str(exc)
