"""Kubernetes' own gang scheduling on a running testbed: the ``scheduling.k8s.io/v1beta1``
Workload and PodGroup API and kube-scheduler's ``GangScheduling`` plugin and workload-aware
preemption, all behind the beta feature gate ``GenericWorkload`` (off by default in 1.37).

``enable`` restarts kube-apiserver (the gate, and ``--runtime-config`` for the beta API
group), kube-controller-manager and every kube-scheduler with the gate, then raygate (it
looks for a kind it did not find served only once a minute); ``disable`` goes back to the
defaults the same way. There is no ``GangScheduling`` or ``WorkloadAwarePreemption`` gate in
1.37.2: naming one makes the component exit ("unrecognized feature gate").
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import yaml

from testbed.processes import wait_for

if TYPE_CHECKING:
    from testbed.cluster import Testbed

__all__ = ["API", "GATES", "POLICY", "RUNTIME_CONFIG", "disable", "enable", "remove_stamps",
           "served", "stamp_pods"]

API = "scheduling.k8s.io/v1beta1"
GATES = {"GenericWorkload": True}
RUNTIME_CONFIG = {API: True}


def served(testbed: Testbed) -> bool:
    """Does kube-apiserver serve PodGroups now?"""
    found = testbed.kubectl("get", "--raw", f"/apis/{API}", check=False)
    return found.returncode == 0 and '"podgroups"' in found.stdout


def enable(testbed: Testbed) -> float:
    """The gate on; returns the seconds the switch took (raygate's restart included)."""
    started = time.monotonic()
    testbed.set_feature_gates(GATES, RUNTIME_CONFIG)
    if not served(testbed):
        raise RuntimeError(f"{API} is not served with {GATES} and --runtime-config")
    testbed.restart_raygate()
    return time.monotonic() - started


def disable(testbed: Testbed) -> float:
    """Back to the release's defaults; returns the seconds the switch took."""
    started = time.monotonic()
    testbed.set_feature_gates({}, {})
    testbed.restart_raygate()
    return time.monotonic() - started


# --- KubeRay 1.7's pod stamp, stood in for -------------------------------------------------

POLICY = "testbed-kuberay-was-podgroup"
STAMP_LABEL = "testbed.raygate.dev/kuberay-was-stamp"


def policy() -> dict[str, Any]:
    """A MutatingAdmissionPolicy that names, in every new Ray pod (label
    ``ray.io/cluster``) of a bound namespace, the PodGroup ``<cluster>-cluster`` in
    ``spec.schedulingGroup.podGroupName``: what KubeRay 1.7's ``kubernetes-was`` writes
    into the head and each worker, which KubeRay 1.6.1 (the testbed's) does not."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY, "labels": {STAMP_LABEL: "true"}},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"]}]},
            "matchConditions": [{"name": "ray-pod", "expression":
                                 "has(object.metadata.labels) && "
                                 "'ray.io/cluster' in object.metadata.labels"}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{spec: Object.spec{schedulingGroup: "
                              "Object.spec.schedulingGroup{podGroupName: "
                              "object.metadata.labels['ray.io/cluster'] + '-cluster'}}}"}}],
        },
    }


def binding(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": f"{POLICY}-{namespace}"[:253], "labels": {STAMP_LABEL: "true"}},
        "spec": {"policyName": POLICY, "matchResources": {"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": namespace}}}},
    }


def stamp_pods(testbed: Testbed, namespace: str) -> None:
    """From now on, every new Ray pod in ``namespace`` names its RayCluster's PodGroup;
    returns once the API server applies the policy (a dry-run pod shows it)."""
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([policy(), binding(namespace)]))
    probe = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stamp-probe", "namespace": namespace,
                     "labels": {"ray.io/cluster": "probe"}},
        "spec": {"containers": [{"name": "probe", "image": "example.invalid/probe:1"}]}})

    def stamped() -> bool:
        made = testbed.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                               input=probe, check=False)
        group = json.loads(made.stdout or "{}").get("spec", {}).get("schedulingGroup") or {}
        return bool(made.returncode == 0 and group.get("podGroupName") == "probe-cluster")

    wait_for(f"the PodGroup stamp in force in {namespace}", stamped, 30)


def remove_stamps(testbed: Testbed) -> None:
    """The policy and its bindings go."""
    testbed.kubectl("delete", "mutatingadmissionpolicybindings,mutatingadmissionpolicies",
                    "-l", f"{STAMP_LABEL}=true", "--ignore-not-found")
