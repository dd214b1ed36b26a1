"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (generated
certificates, RBAC, service-account tokens) and kube-controller-manager with only the
controllers a cluster without kubelets needs (service accounts, namespaces, garbage
collection of objects whose owner is gone, the PodDisruptionBudgets' status), each
supervised (started again when it exits), and the ways to reach it: kubectl, a JSON client
(``api``), a ServiceAccount's kubeconfig.

It knows no add-on: ``testbed.cluster.Testbed`` is this control plane with its add-ons
(``testbed.addon.AddOn``), and an add-on starts on a ``ControlPlane``.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from testbed.api import KubeApi
from testbed.build import COMPONENTS
from testbed.common import RAYGATE_NAMESPACE, Ports, TestbedError, binary, write_kubeconfig
from testbed.pki import Pki
from testbed.processes import Process, wait_for

__all__ = ["CONTROL_PLANE", "CRDS", "ControlPlane"]

# What the testbed installs and waits for before anything starts.
CRDS = ("crd/rayclusters.ray.io", "crd/rayjobs.ray.io", "crd/rayservices.ray.io",
        "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io",
        "crd/podgroups.scheduling.volcano.sh", "crd/queues.scheduling.volcano.sh",
        "crd/workloads.kueue.x-k8s.io", "crd/clusterqueues.kueue.x-k8s.io")
# The control plane, in start order: it stops last, the other way round.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager")


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager in ``workdir`` (``Testbed.start``
    starts them, in that order), and every process run under its supervisor."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name

    def __init__(self, workdir: Path, *, etcd_quota_bytes: int | None = None) -> None:
        """``etcd_quota_bytes``: etcd's ``--quota-backend-bytes`` (its default is 2 GiB)."""
        self.workdir = workdir
        self.etcd_quota_bytes = etcd_quota_bytes
        self.logs = workdir / "logs"
        self.ports = Ports()
        self.processes: dict[str, Process] = {}
        """Every process running under the supervisor, by name: the add-ons' and others."""
        self.pki: Pki | None = None
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.started_at = 0.0
        self.restarts: list[tuple[float, str, int | None]] = []
        """(seconds since start, component, its exit code) of every restart."""
        self.feature_gates: dict[str, bool] = {}
        """``--feature-gates`` of kube-apiserver, kube-controller-manager and every
        kube-scheduler, read when each starts (empty: the release's defaults).
        ``Testbed.set_feature_gates`` changes them on a running testbed."""
        self.runtime_config: dict[str, bool] = {}
        """kube-apiserver's ``--runtime-config`` (API groups/versions on or off)."""
        self._stopping = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="testbed-supervisor",
                                            daemon=True)

    # --- addresses ----------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def raygate_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.raygate_http}"

    @property
    def raygate_grpc(self) -> str:
        return f"127.0.0.1:{self.ports.raygate_grpc}"

    # --- life cycle ---------------------------------------------------------------------

    def _stop_processes(self, keep: set[str]) -> None:
        """Stop the processes a scenario ran itself (``run``), but those in ``keep`` and
        the control plane's."""
        for name in [n for n in self.processes if n not in keep and n not in CONTROL_PLANE]:
            self.processes[name].stop()

    def _stop_control_plane(self) -> None:
        for name in reversed(CONTROL_PLANE):  # kube-apiserver: 3 s, see restart_apiserver
            if name in self.processes:
                self.processes[name].stop(timeout=3 if name == "kube-apiserver" else 15)

    def _supervise(self) -> None:
        """Start again a component that exited, as the kubelet restarts a control-plane
        container: kube-scheduler, for one, exits when it cannot renew its leader lease
        (while kube-apiserver restarts, say)."""
        while not self._stopping.wait(0.5):
            for name, process in list(self.processes.items()):
                replaced = self.processes.get(name) is not process
                if process.alive or replaced or self._stopping.is_set():
                    continue
                self.restarts.append((time.monotonic() - self.started_at, name,
                                      process.returncode))
                self._say(f"{name} exited ({process.returncode}); starting it again")
                process.start()

    def _say(self, message: str) -> None:
        print(f"testbed: {message}", file=sys.stderr, flush=True)

    def run(self, name: str, argv: list[Any], env: dict[str, str] | None = None) -> Process:
        """Start a component under the supervisor (restarted when it exits)."""
        process = Process(name, argv, self.logs, env=env).start()
        self.processes[name] = process
        return process

    # --- etcd and kube-apiserver --------------------------------------------------------

    def gate_flags(self) -> list[str]:
        """``--feature-gates=…`` as ``feature_gates`` says, or nothing."""
        if not self.feature_gates:
            return []
        return ["--feature-gates=" + ",".join(
            f"{name}={str(on).lower()}" for name, on in sorted(self.feature_gates.items()))]

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        process = self.run("etcd", [
            binary("etcd", "etcd"), "--name=testbed", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}", "--log-level=warn",
            # Compaction every minute of what is older: old watch positions expire
            # (410 Gone), as they do in a cluster that runs for hours.
            "--auto-compaction-mode=periodic", "--auto-compaction-retention=1m",
            "--unsafe-no-fsync",  # a test cluster: speed over durability
            *([f"--quota-backend-bytes={self.etcd_quota_bytes}"]
              if self.etcd_quota_bytes else []),
        ])
        wait_for("etcd", lambda: json.loads(
            urllib.request.urlopen(f"{client}/health", timeout=2).read())["health"] == "true",
            30, process)

    def _start_apiserver(self) -> None:
        assert self.pki is not None
        pki = self.pki
        argv: list[Any] = [
            binary("kubernetes", "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            # The `kubernetes` Service's endpoints may not be a loopback address; nothing
            # here reaches the API server through that Service.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.ports.apiserver}",
            f"--tls-cert-file={pki.apiserver_cert}", f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            # kubeadm's default, which deploy/kube-scheduler-default's pinned ClusterIP
            # (10.96.0.88) is written for.
            "--service-cluster-ip-range=10.96.0.0/12",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # No node lifecycle controller runs (there are no kubelets): a new node would
            # keep the not-ready taint that this plugin adds until that controller lifts it.
            "--disable-admission-plugins=TaintNodesByCondition",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--profiling=false", "--v=1",
            *self.gate_flags(),
            *([("--runtime-config=" + ",".join(
                f"{api}={str(on).lower()}" for api, on in sorted(self.runtime_config.items())))]
              if self.runtime_config else []),
        ]
        process = self.run("kube-apiserver", argv)
        context = self.admin_ssl_context()
        wait_for("kube-apiserver /readyz", lambda: urllib.request.urlopen(
            f"{self.server}/readyz", context=context, timeout=2).status == 200, 90, process)

    def admin_ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port and etcd: every watch
        its clients hold ends, and the watch cache starts empty. (kube-apiserver 1.37 logs
        "apiserver is exiting" a second after SIGTERM and then does not exit: it is killed
        after 3 s, as a kubelet would after the grace period.)"""
        self.processes.pop("kube-apiserver").stop(timeout=3)
        self._start_apiserver()

    # --- controllers and credentials ------------------------------------------------------

    def _start_controller_manager(self) -> None:
        assert self.pki is not None
        process = self.run("kube-controller-manager", [
            binary("kubernetes", "kube-controller-manager"),
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--authentication-kubeconfig={self.admin_kubeconfig}",
            f"--authorization-kubeconfig={self.admin_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={self.ports.controller_manager}",
            # The ServiceAccount admission plugin needs each namespace's `default`
            # ServiceAccount; pods (and raygate's PodDisruptionBudgets) of a deleted
            # RayCluster go with it; pods bound to a node that no longer exists are cleaned
            # up; the disruption controller computes a budget's status, without which the
            # Eviction API refuses every pod the budget selects ("still being processed");
            # the resource claim controller makes a pod's ResourceClaims from its templates;
            # with GenericWorkload on, the PodGroup protection controller lifts the finalizer
            # the API server puts on every PodGroup once no pod names it (it is skipped
            # while the gate is off); the ValidatingAdmissionPolicies' type checking
            # (deploy/'s write bounds: their status.typeChecking).
            "--controllers=serviceaccount,serviceaccount-token,garbage-collector-controller,"
            "namespace,root-ca-certificate-publisher-controller,pod-garbage-collector-controller,"
            "disruption-controller,resourceclaim-controller,podgroup-protection-controller,"
            "validatingadmissionpolicy-status-controller",
            f"--service-account-private-key-file={self.pki.service_account_key}",
            f"--root-ca-file={self.pki.ca_cert}",
            "--leader-elect=false", "--v=1", *self.gate_flags(),
        ])
        wait_for("kube-controller-manager (the default ServiceAccount)",
                 lambda: self.kubectl("get", "serviceaccount", "default", "-n", "default",
                                      check=False).returncode == 0, 60, process)

    def _install_crds(self) -> None:
        """KubeRay's CRDs, cert-manager's (deploy/native-placement asks it for the
        webhook's certificate; no cert-manager controller runs here), Volcano's and
        Kueue's (installed before raygate starts, as in a cluster that runs them: raygate
        looks for a CRD that is missing only once a minute; Kueue's conversion webhook is
        added when Kueue starts)."""
        for component in ("kuberay", "cert-manager", "volcano", "kueue"):
            crds = COMPONENTS[component].path("crds")
            if not crds.is_dir():
                raise TestbedError(f"{crds} is missing: build the testbed first "
                                   "(`make testbed`)")
            # Server-side apply: KubeRay's CRDs are larger than client-side apply's
            # last-applied annotation allows.
            self.kubectl("apply", "--server-side", "-f", str(crds))
        # (`kubectl wait` fails at once on a CRD whose status is not written yet.)
        wait_for("the CRDs established", lambda: self.kubectl(
            "wait", "--for=condition=Established", "--timeout=10s", *CRDS,
            check=False).returncode == 0, 60)

    def service_account_kubeconfig(self, name: str, namespace: str = RAYGATE_NAMESPACE) -> Path:
        """A kubeconfig with a TokenRequest token of a ServiceAccount (as a pod gets)."""
        assert self.pki is not None
        argv = ["create", "token", name, "-n", namespace, "--duration=24h"]
        token = self.kubectl(*argv).stdout.strip()
        return write_kubeconfig(self.workdir / f"{namespace}.{name}.kubeconfig", self.server,
                                self.pki.ca_cert, {"token": token})

    # --- kubectl ------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(binary("kubernetes", "kubectl")), f"--kubeconfig={self.admin_kubeconfig}",
             *args], input=input, capture_output=True, text=True, timeout=120, check=False)
        if check and result.returncode != 0:
            raise TestbedError(f"kubectl {' '.join(args)}: exit {result.returncode}\n"
                               f"{result.stderr.strip()}")
        return result

    def api(self) -> KubeApi:
        """A JSON client of kube-apiserver, as the admin; it retries no status (a scenario
        sees every answer), only a dropped connection."""
        return KubeApi(self.server, self.admin_ssl_context(), timeout=30.0,
                       retry_statuses=frozenset())

    def logs_tail(self) -> str:
        return "\n\n".join(process.tail() for process in self.processes.values())
