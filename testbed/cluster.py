"""A real Kubernetes control plane on loopback, with KubeRay, kwok and raygate.

What runs, in order (every binary built by ``testbed.build`` from its Go module):

- etcd;
- kube-apiserver: generated certificates, RBAC, service-account tokens;
- kube-controller-manager with only the controllers a cluster without kubelets needs
  (service accounts, namespaces, garbage collection of objects whose owner is gone, the
  PodDisruptionBudgets' status);
- the manifests of ``deploy/kube-scheduler-second`` applied with the built kubectl:
  raygate's namespace, ServiceAccounts, RBAC, write bounds and the scheduler's ConfigMap;
- kube-scheduler as ``ray-scheduler`` with exactly the KubeSchedulerConfiguration of that
  ConfigMap (the extender's address and the kubeconfig path rewritten, nothing else),
  under the ``ray-scheduler`` ServiceAccount's token;
- the stock kube-scheduler as ``default-scheduler`` (no extender), as every cluster has;
- the KubeRay operator, with the CRDs of the same release;
- kwok, which keeps nodes Ready and runs bound pods (there is no kubelet);
- raygate, under the ``raygate`` ServiceAccount's token, with the settings of
  ``deploy/base/configmap.yaml``.

Nodes and pods are simulated: nodes are created through the API with the capacity a
test asks for, and kwok marks a bound pod Running and Ready.

Everything after kube-controller-manager is an add-on (``testbed.addon.AddOn``; the ones
above are in ``testbed.components``), and so are the components scenarios start on
demand (Volcano, Kueue, Karpenter, a Ray head...): ``Testbed.add`` starts one,
``Testbed.addons`` holds them, ``Testbed.stop`` stops them last started first.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from testbed import components
from testbed.addon import AddOn
from testbed.api import Api
from testbed.build import COMPONENTS
from testbed.common import (
    DEPLOY,
    RAYGATE_NAMESPACE,
    REPO,
    Ports,
    TestbedError,
    binary,
    write_kubeconfig,
)
from testbed.pki import Pki, make_pki
from testbed.processes import Process, StartError, wait_for

__all__ = ["DEPLOY", "RAYGATE_NAMESPACE", "REPO", "Testbed", "TestbedError", "binary",
           "running_testbed"]

A = TypeVar("A", bound=AddOn)

# What the testbed installs and waits for before anything starts.
CRDS = ("crd/rayclusters.ray.io", "crd/rayjobs.ray.io", "crd/rayservices.ray.io",
        "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io",
        "crd/podgroups.scheduling.volcano.sh", "crd/queues.scheduling.volcano.sh",
        "crd/workloads.kueue.x-k8s.io", "crd/clusterqueues.kueue.x-k8s.io")
# The control plane, in start order: it stops last, the other way round.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager")


class Testbed:
    """One cluster in ``workdir``: ``start()``, use, ``stop()`` (or ``running_testbed``)."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name

    def __init__(self, workdir: Path, *, raygate: bool = True,
                 control_plane_only: bool = False,
                 etcd_quota_bytes: int | None = None) -> None:
        """``control_plane_only``: etcd, kube-apiserver and the CRDs, nothing applied and
        nothing else running (a blank cluster to check manifests against).
        ``etcd_quota_bytes``: etcd's ``--quota-backend-bytes`` (its default is 2 GiB)."""
        self.workdir = workdir
        self.control_plane_only = control_plane_only
        self.etcd_quota_bytes = etcd_quota_bytes
        self.logs = workdir / "logs"
        self.ports = Ports()
        self.with_raygate = raygate
        self.processes: dict[str, Process] = {}
        """Every process running under the supervisor, by name: the add-ons' and others."""
        self.addons: list[AddOn] = []
        """The add-ons started (``add``), in start order."""
        self.pki: Pki | None = None
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.started_at = 0.0
        self.restarts: list[tuple[float, str, int | None]] = []
        """(seconds since start, component, its exit code) of every restart."""
        self.feature_gates: dict[str, bool] = {}
        """``--feature-gates`` of kube-apiserver, kube-controller-manager and every
        kube-scheduler, read when each starts (empty: the release's defaults).
        ``set_feature_gates`` changes them on a running testbed."""
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

    def start(self) -> Testbed:
        self.started_at = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = make_pki(self.workdir / "pki")
        write_kubeconfig(self.admin_kubeconfig, self.server, self.pki.ca_cert, {
            "client-certificate": str(self.pki.admin_cert),
            "client-key": str(self.pki.admin_key)})
        try:
            self._start_etcd()
            self._start_apiserver()
            if self.control_plane_only:
                self._install_crds()
                return self
            self._start_controller_manager()
            self._install_crds()
            self._apply_scheduler_setup()
            for addon in self._standard_addons():
                self.add(addon)
        except BaseException:
            self.stop()
            raise
        self._supervisor.start()
        self._say(f"up in {time.monotonic() - self.started_at:.1f} s; "
                  f"KUBECONFIG={self.admin_kubeconfig}")
        return self

    def stop(self) -> None:
        """Stop every component, last started first; their logs stay in ``logs/``: the
        processes a scenario ran itself (``run``), the add-ons, then the control plane."""
        self._stopping.set()
        owned = {name for addon in self.addons for name in addon.process_names}
        for name in [n for n in self.processes if n not in owned and n not in CONTROL_PLANE]:
            self.processes[name].stop()
        for addon in reversed(self.addons):
            addon.stop()
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

    # --- add-ons ------------------------------------------------------------------------

    def add(self, addon: A) -> A:
        """Start ``addon`` on this testbed; returns it once it is ready. It stops with the
        testbed (before the add-ons started earlier), or before with its ``stop()``. It
        takes the place of an add-on of the same name."""
        self.addons = [a for a in self.addons if a.name != addon.name or a is addon]
        if addon not in self.addons:
            self.addons.append(addon)
        addon.start(self)
        return addon

    def addon(self, kind: type[A]) -> A | None:
        """The last added add-on of ``kind``, if any."""
        return next((a for a in reversed(self.addons) if isinstance(a, kind)), None)

    def _standard_addons(self) -> list[AddOn]:
        """The schedulers, KubeRay, kwok, and raygate unless left out."""
        return [*components.schedulers(self), components.KubeRay(), components.Kwok(),
                *([components.Raygate()] if self.with_raygate else [])]

    def start_scheduler(self, name: str, config: Path, kubeconfig: str, port: int) -> None:
        """A kube-scheduler named ``name`` reading ``config``, as an add-on."""
        self.add(components.KubeScheduler(name, config, kubeconfig, port))

    def restart_kuberay(self, batch_scheduler: str = "") -> None:
        """Start the operator again with ``--batch-scheduler`` (``volcano``, say) or
        without: KubeRay reads it at start, for every RayCluster it manages."""
        kuberay = self.addon(components.KubeRay) or components.KubeRay()
        kuberay.stop()
        kuberay.batch_scheduler = batch_scheduler
        self.add(kuberay)

    def start_raygate(self) -> Process:
        """raygate (``testbed.components.Raygate``), or again after ``kill_raygate``."""
        return self.add(self.addon(components.Raygate) or components.Raygate()).started()

    def restart_raygate(self) -> Process:
        """Stop raygate as a rollout does (it releases its Lease) and start it again."""
        raygate = self.addon(components.Raygate)
        if raygate is not None:
            raygate.stop()
        return self.start_raygate()

    def kill_raygate(self) -> None:
        """SIGKILL raygate; it stays down (not supervised) until ``start_raygate()``."""
        self.processes.pop("raygate").kill()

    # --- feature gates --------------------------------------------------------------------

    def gate_flags(self) -> list[str]:
        """``--feature-gates=…`` as ``feature_gates`` says, or nothing."""
        if not self.feature_gates:
            return []
        return ["--feature-gates=" + ",".join(
            f"{name}={str(on).lower()}" for name, on in sorted(self.feature_gates.items()))]

    def set_feature_gates(self, gates: dict[str, bool],
                          runtime_config: dict[str, bool] | None = None) -> None:
        """Run the control plane with ``gates`` (and kube-apiserver with
        ``runtime_config``): kube-apiserver, kube-controller-manager and every
        kube-scheduler add-on are started again with them, as an operator rolls a flag
        out; ``{}`` goes back to the defaults. etcd, and what the cluster holds, stay;
        every watch ends once. The KubeRay operator starts again too: after a second
        API server restart within a minute or two its informers were seen lagging by
        ~10 s (client-go's growing backoff), so that it created a head Service twice,
        failed, and made a RayCluster's pods 10 s late. raygate is not restarted
        (``restart_raygate``: it finds an API group turned on within a minute by
        itself)."""
        self.feature_gates = dict(gates)
        self.runtime_config = dict(runtime_config or {})
        schedulers = [a for a in self.addons if isinstance(a, components.KubeScheduler)]
        for scheduler in schedulers:
            scheduler.stop()  # (each releases its leader Lease on SIGTERM)
        self.processes.pop("kube-controller-manager").stop()
        self.restart_apiserver()
        self._start_controller_manager()
        for scheduler in schedulers:
            self.add(scheduler)
        kuberay = self.addon(components.KubeRay)
        if kuberay is not None:
            self.restart_kuberay(kuberay.batch_scheduler)

    # --- etcd and kube-apiserver --------------------------------------------------------

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

    # --- controllers --------------------------------------------------------------------

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

    def _apply_scheduler_setup(self) -> None:
        """deploy/kube-scheduler-second's manifests, and the namespace ``ray``."""
        self.kubectl("apply", "-k", str(components.SCHEDULER_SETUP))
        # Its webhook configuration calls the Service raygate-webhook, which nothing
        # answers here: every pod creation would wait for the call to fail. raygate's
        # own, called by URL, comes with raygate (``start_raygate``).
        self.kubectl("delete", "mutatingwebhookconfiguration", "raygate-ray-pods")
        self.kubectl("create", "namespace", "ray")

    def service_account_kubeconfig(self, name: str, namespace: str = RAYGATE_NAMESPACE) -> Path:
        """A kubeconfig with a TokenRequest token of a ServiceAccount (as a pod gets)."""
        assert self.pki is not None
        argv = ["create", "token", name, "-n", namespace, "--duration=24h"]
        token = self.kubectl(*argv).stdout.strip()
        return write_kubeconfig(self.workdir / f"{namespace}.{name}.kubeconfig", self.server,
                                self.pki.ca_cert, {"token": token})

    def scheduler_configuration(self) -> dict[str, Any]:
        """The KubeSchedulerConfiguration shipped in deploy/, the extender's address and
        the kubeconfig path rewritten for this testbed."""
        return components.ray_scheduler_configuration(self)

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

    def api(self) -> Api:
        """A JSON client of kube-apiserver, as the admin."""
        return Api(self.admin_kubeconfig)

    def logs_tail(self) -> str:
        return "\n\n".join(process.tail() for process in self.processes.values())


@contextmanager
def running_testbed(workdir: Path, **options: Any) -> Iterator[Testbed]:
    testbed = Testbed(workdir, **options)
    try:
        testbed.start()
    except StartError as exc:
        raise TestbedError(str(exc)) from None
    try:
        yield testbed
    finally:
        testbed.stop()
