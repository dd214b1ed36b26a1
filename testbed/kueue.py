"""Kueue on the testbed: its controller manager (one binary, ``kueue``), with its Ray
integrations on as Kueue ships them (``ray.io/rayjob``, ``ray.io/rayservice``,
``ray.io/raycluster``), as ``deploy/kueue`` expects it installed next to ``ray-scheduler``.

Its CRDs are installed with the testbed's own; ``start_kueue`` starts the add-on ``Kueue``
on a running testbed (the first Kueue scenario does); it stops with the testbed. What it sets up, as
Kueue's own manifests (``config/default``) do in a cluster, minus the Service and the pod:

- the ``kueue-system`` namespace and the Secret ``kueue-webhook-server-cert``, seeded with
  a CA and a serving certificate made here. Kueue's internal certificate management stays
  on (as it ships): it checks that Secret, finds it valid and injects the CA into the
  webhook configurations and CRDs. Its certificates are written to ``webhook.certDir``
  too, where a pod would have the Secret mounted;
- the conversion webhook of the five CRDs Kueue converts (v1beta1 <-> v1beta2);
- the mutating and validating webhook configurations of Kueue's manifests, the
  RayJob's, RayService's and RayCluster's webhooks and Kueue's own objects' only (no pod,
  Job or Deployment webhooks: no scenario runs those, and a pod webhook would sit in front
  of every pod of every scenario). Each calls the manager on loopback by URL (there is no
  Service);
- the manager under the admin's kubeconfig (so no RBAC of Kueue's: ``config/components/
  rbac`` grants its account rayjobs, rayservices and rayclusters and their status, which
  the admin has), leader election off, the visibility API off (an aggregated API server
  needs a Service), ``ElasticJobsViaWorkloadSlices`` on (the gate raygate's docs tell
  operators to turn on for autoscaled RayClusters).

With the RayJob and RayService integrations on, Kueue queues a RayJob (or RayService) as
one Workload the RayJob owns, and leaves the RayCluster KubeRay makes for it alone (its
parent is managed: ``jobframework``'s ``IsOwnerManagedByKueue``).
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed.addon import AddOn, answers
from testbed.api import ApiError
from testbed.build import COMPONENTS
from testbed.cluster import Testbed
from testbed.common import TestbedError, binary
from testbed.control_plane import ControlPlane
from testbed.pki import certificate_builder, key_pem, new_key
from testbed.processes import free_port, wait_for

__all__ = ["NAMESPACE", "Kueue", "WebhookCerts", "configuration", "make_certs", "start_kueue"]

NAMESPACE = "kueue-system"
SECRET = "kueue-webhook-server-cert"
SERVICE = "kueue-webhook-service"
# Kueue's certificate rotator (open-policy-agent/cert-controller) verifies the CA for this
# DNS name and the serving certificate for the Service's, and renews either when it
# expires within 90 days: both outlive that, so the rotator keeps what is seeded here.
CA_NAME = "kueue-ca"
SERVING_NAME = f"{SERVICE}.{NAMESPACE}.svc"
# The CRDs whose conversion Kueue's manager serves (config/components/crd/patches).
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
FIELD_MANAGER = "testbed-kueue"


@dataclass(frozen=True)
class WebhookCerts:
    """PEM bytes, under the Secret's key names."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes

    def secret_data(self) -> dict[str, str]:
        return {name: base64.b64encode(value).decode() for name, value in (
            ("ca.crt", self.ca_crt), ("ca.key", self.ca_key),
            ("tls.crt", self.tls_crt), ("tls.key", self.tls_key))}


def _signed(subject: str, issuer: x509.Name, key: rsa.RSAPrivateKey,
            signer: rsa.RSAPrivateKey, *, days: int, ca: bool,
            sans: list[x509.GeneralName]) -> x509.Certificate:
    usage = x509.KeyUsage(digital_signature=True, key_encipherment=not ca, key_cert_sign=ca,
                          crl_sign=False, content_commitment=False, data_encipherment=False,
                          key_agreement=False, encipher_only=False, decipher_only=False)
    builder = (certificate_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]),
                                   issuer, key, days=days)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(usage, critical=True)
               .add_extension(x509.SubjectAlternativeName(sans), critical=False))
    if not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def make_certs() -> WebhookCerts:
    """A CA and a serving certificate for the Service's name and 127.0.0.1 (the webhook
    configurations and CRDs call the manager there)."""
    ca_key = new_key()
    ca = _signed(CA_NAME, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)]),
                 ca_key, ca_key, days=3650, ca=True, sans=[x509.DNSName(CA_NAME)])
    key = new_key()
    serving = _signed(SERVING_NAME, ca.subject, key, ca_key, days=365, ca=False,
                      sans=[x509.DNSName(SERVING_NAME),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    pem = serialization.Encoding.PEM
    return WebhookCerts(ca.public_bytes(pem), key_pem(ca_key), serving.public_bytes(pem),
                        key_pem(key))


def _crds(base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's CRDs, the conversion webhook added to those it converts."""
    crds = []
    for path in sorted(COMPONENTS["kueue"].path("crds").glob("*.yaml")):
        crd: dict[str, Any] = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": f"{base_url}/convert", "caBundle": ca_bundle},
                "conversionReviewVersions": ["v1"]}}
        crds.append(crd)
    return crds


RAY_KINDS = (["rayjobs"], ["rayservices"], ["rayclusters"])
"""Kueue's Ray integrations, as its Configuration turns them on (``FRAMEWORKS``)."""
FRAMEWORKS = ["ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster"]


def _kept(webhook: dict[str, Any]) -> bool:
    """The RayJob's, RayService's and RayCluster's webhooks and those of Kueue's own
    objects."""
    rules = webhook.get("rules") or []
    return bool(rules) and all(
        rule["apiGroups"] == ["kueue.x-k8s.io"]
        or (rule["apiGroups"] == ["ray.io"] and rule["resources"] in RAY_KINDS)
        for rule in rules)


def _webhook_configurations(base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's two webhook configurations, named as its kustomization names them
    (``kueue-`` prefix: the rotator injects its CA into exactly those names)."""
    manifests = COMPONENTS["kueue"].path("webhook") / "manifests.yaml"
    configurations = []
    for document in yaml.safe_load_all(manifests.read_text()):
        webhooks = [w for w in document["webhooks"] if _kept(w)]
        for webhook in webhooks:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca_bundle}
        if not webhooks:
            raise TestbedError(f"{manifests}: no Ray or Kueue webhook in "
                               f"{document['metadata']['name']}")
        document["metadata"] = {"name": f"kueue-{document['metadata']['name']}"}
        document["webhooks"] = webhooks
        configurations.append(document)
    return configurations


def _apply(testbed: ControlPlane, documents: list[dict[str, Any]]) -> None:
    # Server-side, forcing conflicts: the CRDs exist already (the testbed installs them,
    # without conversion, under kubectl's field manager); this takes those fields over.
    testbed.kubectl("apply", "--server-side", "--force-conflicts",
                    f"--field-manager={FIELD_MANAGER}", "-f", "-",
                    input=yaml.safe_dump_all(documents))


def configuration(cert_dir: Path, health: int, metrics: int, webhook: int) -> dict[str, Any]:
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE,
                                   "webhookSecretName": SECRET},
        "integrations": {"frameworks": FRAMEWORKS},
        "featureGates": {"VisibilityOnDemand": False, "ElasticJobsViaWorkloadSlices": True},
    }


def _webhook_answers(testbed: ControlPlane) -> bool:
    """A server-side dry run through Kueue's ResourceFlavor webhooks."""
    try:
        testbed.api().request("POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
                              {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                               "metadata": {"name": "testbed-probe"}},
                              query=[("dryRun", "All")])
    except ApiError:
        return False
    return True


def _write_certs(cert_dir: Path, certs: WebhookCerts) -> None:
    """Where a pod would have the Secret mounted."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(certs.tls_crt)
    (cert_dir / "tls.key").write_bytes(certs.tls_key)
    (cert_dir / "tls.key").chmod(0o600)


class Kueue(AddOn):
    """Kueue's manager, its Secret, CRDs and webhook configurations applied first; ready
    once it is and its webhooks answer."""

    name = "kueue"
    timeout = 60.0  # for its webhooks, once /readyz answers
    readiness = "Kueue's webhooks answering"

    def __init__(self) -> None:
        super().__init__()
        self.health, self.metrics, self.webhook = free_port(), free_port(), free_port()

    def launch(self, testbed: ControlPlane) -> None:
        if testbed.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
            testbed.kubectl("create", "namespace", NAMESPACE)
        certs = make_certs()
        cert_dir = testbed.workdir / "kueue-certs"
        _write_certs(cert_dir, certs)
        base_url = f"https://127.0.0.1:{self.webhook}"
        ca_bundle = base64.b64encode(certs.ca_crt).decode()
        _apply(testbed, [{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                          "metadata": {"name": SECRET, "namespace": NAMESPACE},
                          "data": certs.secret_data()},
                         *_crds(base_url, ca_bundle),
                         *_webhook_configurations(base_url, ca_bundle)])
        config = testbed.workdir / "kueue.yaml"
        config.write_text(yaml.safe_dump(
            configuration(cert_dir, self.health, self.metrics, self.webhook)))
        process = self.run(self.name, [binary("kueue", "kueue"), f"--config={config}",
                                       f"--kubeconfig={testbed.admin_kubeconfig}"])
        wait_for("kueue /readyz", self._up, 90, process)

    def _up(self) -> bool:
        return answers(f"http://127.0.0.1:{self.health}/readyz")

    def ready(self) -> bool:
        return self._up() and _webhook_answers(self.testbed)


def start_kueue(testbed: Testbed) -> None:
    """Start Kueue on ``testbed``; returns once it is ready and its webhooks answer."""
    testbed.add(Kueue())
