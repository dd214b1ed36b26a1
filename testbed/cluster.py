"""A real Kubernetes control plane on loopback, with KubeRay, kwok and raygate.

What runs, in order (every binary built by ``testbed.build`` from its Go module):

- etcd;
- kube-apiserver: generated certificates, RBAC, service-account tokens;
- kube-controller-manager with only the controllers a cluster without kubelets needs
  (service accounts, namespaces, garbage collection of objects whose owner is gone, the
  PodDisruptionBudgets' status);
- the manifests of ``deploy/kube-scheduler-second`` applied with the built kubectl:
  raygate's namespace, ServiceAccounts, RBAC and the scheduler's ConfigMap;
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.api import Api
from testbed.build import COMPONENTS, cache_root
from testbed.pki import Pki, make_pki
from testbed.processes import Process, StartError, free_port, wait_for
from testbed.webhook import NATIVE_PLACEMENT_OFF, webhook_configuration

__all__ = ["DEPLOY", "REPO", "Testbed", "TestbedError", "binary", "running_testbed"]

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
SCHEDULER_SETUP = DEPLOY / "kube-scheduler-second"
RAYGATE_NAMESPACE = "raygate-system"
# What the testbed installs and waits for before anything starts.
CRDS = ("crd/rayclusters.ray.io", "crd/rayjobs.ray.io", "crd/rayservices.ray.io",
        "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io",
        "crd/podgroups.scheduling.volcano.sh", "crd/queues.scheduling.volcano.sh",
        "crd/workloads.kueue.x-k8s.io", "crd/clusterqueues.kueue.x-k8s.io")
# Start order; stop goes the other way (whatever was restarted in between).
STOP_ORDER = ["etcd", "kube-apiserver", "kube-controller-manager", "ray-scheduler",
              "default-scheduler", "kuberay-operator", "kwok", "raygate"]


class TestbedError(Exception):
    """The testbed cannot start: a component is not built, or one did not come up."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name


def binary(component: str, name: str) -> Path:
    path = COMPONENTS[component].path(name)
    if not path.is_file():
        raise TestbedError(f"{path} is missing: build the testbed first (`make testbed`; "
                           f"the cache is {cache_root()})")
    return path


def _kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "testbed",
        "clusters": [{"name": "testbed",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "testbed", "user": user}],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "testbed"}}],
    }))
    path.chmod(0o600)
    return path


@dataclass
class Ports:
    etcd: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    ray_scheduler: int = field(default_factory=free_port)
    default_scheduler: int = field(default_factory=free_port)
    kuberay_metrics: int = field(default_factory=free_port)
    kuberay_health: int = field(default_factory=free_port)
    raygate_http: int = field(default_factory=free_port)
    raygate_grpc: int = field(default_factory=free_port)
    raygate_webhook: int = field(default_factory=free_port)


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
        self.pki: Pki | None = None
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.started_at = 0.0
        self.restarts: list[tuple[float, str, int | None]] = []
        """(seconds since start, component, its exit code) of every restart."""
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
        _kubeconfig(self.admin_kubeconfig, self.server, self.pki.ca_cert, {
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
            self.kubectl("apply", "-k", str(SCHEDULER_SETUP))
            # Its webhook configuration calls the Service raygate-webhook, which nothing
            # answers here: every pod creation would wait for the call to fail. raygate's
            # own, called by URL, comes with raygate (``start_raygate``).
            self.kubectl("delete", "mutatingwebhookconfiguration", "raygate-ray-pods")
            self.kubectl("create", "namespace", "ray")
            self._start_schedulers()
            self._start_kuberay()
            self._start_kwok()
            if self.with_raygate:
                self.start_raygate()
        except BaseException:
            self.stop()
            raise
        self._supervisor.start()
        self._say(f"up in {time.monotonic() - self.started_at:.1f} s; "
                  f"KUBECONFIG={self.admin_kubeconfig}")
        return self

    def stop(self) -> None:
        """Stop every component, last started first; their logs stay in ``logs/``."""
        self._stopping.set()
        # Add-ons (Volcano, Kueue) first: they started after everything here.
        for name in sorted(self.processes, key=lambda n: -STOP_ORDER.index(n)
                           if n in STOP_ORDER else -len(STOP_ORDER)):
            self.processes[name].stop()

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
            # Eviction API refuses every pod the budget selects ("still being processed").
            "--controllers=serviceaccount,serviceaccount-token,garbage-collector-controller,"
            "namespace,root-ca-certificate-publisher-controller,pod-garbage-collector-controller,"
            "disruption-controller",
            f"--service-account-private-key-file={self.pki.service_account_key}",
            f"--root-ca-file={self.pki.ca_cert}",
            "--leader-elect=false", "--v=1",
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
        return _kubeconfig(self.workdir / f"{namespace}.{name}.kubeconfig", self.server,
                           self.pki.ca_cert, {"token": token})

    def scheduler_configuration(self) -> dict[str, Any]:
        """The KubeSchedulerConfiguration shipped in deploy/, the extender's address and
        the kubeconfig path rewritten for this testbed."""
        documents = yaml.safe_load_all((SCHEDULER_SETUP / "scheduler.yaml").read_text())
        configmap = next(d for d in documents if d and d.get("kind") == "ConfigMap"
                         and d["metadata"]["name"] == "ray-scheduler-config")
        config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
        for extender in config.get("extenders", []):
            extender["urlPrefix"] = f"{self.raygate_url}/scheduler"
        kubeconfig = self.service_account_kubeconfig("ray-scheduler")
        config["clientConnection"] = {**config.get("clientConnection", {}),
                                      "kubeconfig": str(kubeconfig)}
        return config

    def _start_schedulers(self) -> None:
        config = self.scheduler_configuration()
        kubeconfig = config["clientConnection"]["kubeconfig"]
        path = self.workdir / "ray-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        self.start_scheduler("ray-scheduler", path, kubeconfig, self.ports.ray_scheduler)
        default = self.workdir / "default-scheduler.yaml"
        default.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.admin_kubeconfig)},
            "leaderElection": {"leaderElect": False}}))
        self.start_scheduler("default-scheduler", default, str(self.admin_kubeconfig),
                             self.ports.default_scheduler)

    def start_scheduler(self, name: str, config: Path, kubeconfig: str, port: int) -> None:
        process = self.run(name, [
            binary("kubernetes", "kube-scheduler"), f"--config={config}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # Tests scrape its metrics without a token.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--cert-dir={self.workdir / (name + '-certs')}", "--v=2",
        ])
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        wait_for(name, lambda: urllib.request.urlopen(
            f"https://127.0.0.1:{port}/healthz", context=insecure, timeout=2).status == 200,
            60, process)

    def _start_kuberay(self, batch_scheduler: str = "") -> None:
        process = self.run("kuberay-operator", [
            binary("kuberay", "kuberay-operator"),
            f"--metrics-addr=127.0.0.1:{self.ports.kuberay_metrics}",
            f"--health-probe-bind-address=127.0.0.1:{self.ports.kuberay_health}",
            "--enable-leader-election=false",
            *([f"--batch-scheduler={batch_scheduler}"] if batch_scheduler else []),
        ], env={"KUBECONFIG": str(self.admin_kubeconfig)})
        wait_for("kuberay-operator", lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{self.ports.kuberay_health}/readyz", timeout=2).status == 200,
            60, process)

    def restart_kuberay(self, batch_scheduler: str = "") -> None:
        """Start the operator again with ``--batch-scheduler`` (``volcano``, say) or
        without: KubeRay reads it at start, for every RayCluster it manages."""
        self.processes.pop("kuberay-operator").stop()
        self._start_kuberay(batch_scheduler)

    def _start_kwok(self) -> None:
        stages = COMPONENTS["kwok"].path("stages")
        self.run("kwok", [
            binary("kwok", "kwok"), f"--kubeconfig={self.admin_kubeconfig}",
            "--manage-all-nodes", "--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
            f"--config={stages / 'node' / 'fast'}",
            f"--config={stages / 'node' / 'heartbeat'}",
            f"--config={stages / 'pod' / 'fast' / 'pod-ready.yaml'}",
            f"--config={stages / 'pod' / 'fast' / 'pod-complete.yaml'}",
            # A deleted pod goes after its grace period (at most), as a kubelet's does;
            # the fast stage would force-delete it at once.
            f"--config={stages / 'pod' / 'general' / 'pod-delete.yaml'}",
        ])

    # --- raygate ------------------------------------------------------------------------

    def start_raygate(self) -> Process:
        """raygate as an operator deploys it: the ``raygate`` ServiceAccount of deploy/,
        the settings of deploy/base/configmap.yaml, authz on, and the Ray-pod webhook of
        deploy/native-placement (every namespace but raygate's, kube-system and those
        labelled ``NATIVE_PLACEMENT_OFF``: the gate on each new CPU-only Ray pod)."""
        assert self.pki is not None
        configmap = yaml.safe_load((DEPLOY / "base" / "configmap.yaml").read_text())
        config = self.workdir / "raygate.yaml"
        config.write_text(configmap["data"]["raygate.yaml"])
        kubeconfig = self.service_account_kubeconfig("raygate")
        process = self.run("raygate", [
            sys.executable, "-m", "raygate", "serve", f"--kubeconfig={kubeconfig}",
            f"--config={config}", f"--http-addr=127.0.0.1:{self.ports.raygate_http}",
            f"--grpc-addr=127.0.0.1:{self.ports.raygate_grpc}", "--authz=on",
            f"--webhook-addr=127.0.0.1:{self.ports.raygate_webhook}",
            f"--webhook-cert={self.pki.apiserver_cert}",
            f"--webhook-key={self.pki.apiserver_key}",
            # The Deployment waits 5 s for endpoints controllers; there are none here.
            "--shutdown-delay-seconds=0",
        ], env={"PYTHONPATH": str(REPO),
                # The downward API's, as in the Deployment: its leader election holds the
                # Lease in raygate's namespace, where deploy/'s Role grants it.
                "POD_NAME": "raygate-testbed", "POD_NAMESPACE": RAYGATE_NAMESPACE})
        wait_for("raygate /readyz", lambda: urllib.request.urlopen(
            f"{self.raygate_url}/readyz", timeout=2).status == 200, 60, process)
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(webhook_configuration(
            "raygate-ray-pods", f"https://127.0.0.1:{self.ports.raygate_webhook}",
            self.pki.ca_cert, {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": ["kube-system", RAYGATE_NAMESPACE]},
                {"key": NATIVE_PLACEMENT_OFF, "operator": "NotIn", "values": ["true"]}]})))
        return process

    def kill_raygate(self) -> None:
        """SIGKILL raygate; it stays down (not supervised) until ``start_raygate()``."""
        self.processes.pop("raygate").kill()

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
