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

The control plane (etcd, kube-apiserver, kube-controller-manager) is
``testbed.control_plane.ControlPlane``; everything after it is an add-on
(``testbed.addon.AddOn``; the ones above are in ``testbed.components``), and so are the
components scenarios start on demand (Volcano, Kueue, Karpenter, a Ray head...):
``Testbed.add`` starts one, ``Testbed.addons`` holds them, ``Testbed.stop`` stops them
last started first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from testbed import components
from testbed.addon import AddOn
from testbed.common import DEPLOY, RAYGATE_NAMESPACE, REPO, TestbedError, binary, write_kubeconfig
from testbed.control_plane import CONTROL_PLANE, ControlPlane
from testbed.pki import make_pki
from testbed.processes import Process, StartError

__all__ = ["CONTROL_PLANE", "DEPLOY", "RAYGATE_NAMESPACE", "REPO", "Testbed", "TestbedError",
           "binary", "running_testbed"]

A = TypeVar("A", bound=AddOn)


class Testbed(ControlPlane):
    """One cluster in ``workdir``: ``start()``, use, ``stop()`` (or ``running_testbed``)."""

    def __init__(self, workdir: Path, *, raygate: bool = True,
                 control_plane_only: bool = False,
                 etcd_quota_bytes: int | None = None) -> None:
        """``control_plane_only``: etcd, kube-apiserver and the CRDs, nothing applied and
        nothing else running (a blank cluster to check manifests against).
        ``etcd_quota_bytes``: etcd's ``--quota-backend-bytes`` (its default is 2 GiB)."""
        super().__init__(workdir, etcd_quota_bytes=etcd_quota_bytes)
        self.control_plane_only = control_plane_only
        self.with_raygate = raygate
        self.addons: list[AddOn] = []
        """The add-ons started (``add``), in start order."""

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
        self._stop_processes({name for addon in self.addons for name in addon.process_names})
        for addon in reversed(self.addons):
            addon.stop()
        self._stop_control_plane()

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

    # --- deploy/'s scheduler setup ------------------------------------------------------

    def _apply_scheduler_setup(self) -> None:
        """deploy/kube-scheduler-second's manifests, and the namespace ``ray``."""
        self.kubectl("apply", "-k", str(components.SCHEDULER_SETUP))
        # Its webhook configuration calls the Service raygate-webhook, which nothing
        # answers here: every pod creation would wait for the call to fail. raygate's
        # own, called by URL, comes with raygate (``start_raygate``).
        self.kubectl("delete", "mutatingwebhookconfiguration", "raygate-ray-pods")
        self.kubectl("create", "namespace", "ray")

    def scheduler_configuration(self) -> dict[str, Any]:
        """The KubeSchedulerConfiguration shipped in deploy/, the extender's address and
        the kubeconfig path rewritten for this testbed."""
        return components.ray_scheduler_configuration(self)


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
