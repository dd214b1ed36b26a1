"""The testbed's certificates and keys, made fresh for each cluster.

One CA signs the kube-apiserver's serving certificate and the admin's client certificate
(group ``system:masters``, which kube-apiserver's RBAC authorizer lets do anything); an
RSA key pair signs and verifies service-account tokens. Nothing here is reused across
clusters, so a leaked test key is worth nothing.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "certificate_builder", "key_pem", "make_pki", "new_key"]

# Every name kube-apiserver answers to, in the testbed and as in-cluster clients call it.
APISERVER_DNS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local")
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")  # loopback; the first IP of the service range


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files one cluster uses."""

    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path  # private: kube-apiserver signs tokens with it
    service_account_pub: Path  # public: kube-apiserver verifies them with it


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def key_pem(key: rsa.RSAPrivateKey) -> bytes:
    """PKCS#1 ("RSA PRIVATE KEY"), which every consumer here reads (Kueue's rotator only
    that)."""
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(key_pem(key))
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def certificate_builder(subject: x509.Name, issuer: x509.Name, key: rsa.RSAPrivateKey,
                        days: int = 2) -> x509.CertificateBuilder:
    """A certificate of ``key`` for ``subject``, valid from five minutes ago for ``days``."""
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days)))


def make_pki(directory: Path) -> Pki:
    """Create a CA, the API server's serving and admin client certificates and the
    service-account key pair in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(*(directory / name for name in (
        "ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key",
        "service-account.key", "service-account.pub")))

    ca_key = new_key()
    ca_name = _name("raygate-testbed-ca")
    ca = (certificate_builder(ca_name, ca_name, ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.ca_key, ca_key)

    def leaf(cert_path: Path, key_path: Path, subject: x509.Name,
             usage: x509.ObjectIdentifier, sans: list[x509.GeneralName] | None = None) -> None:
        key = new_key()
        builder = (certificate_builder(subject, ca_name, key)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert_path.write_bytes(builder.sign(ca_key, hashes.SHA256())
                              .public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)

    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in APISERVER_DNS]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in APISERVER_IPS]
    leaf(pki.apiserver_cert, pki.apiserver_key, _name("kube-apiserver"),
         ExtendedKeyUsageOID.SERVER_AUTH, sans)
    leaf(pki.admin_cert, pki.admin_key, _name("testbed-admin", "system:masters"),
         ExtendedKeyUsageOID.CLIENT_AUTH)

    sa_key = new_key()
    _write_key(pki.service_account_key, sa_key)
    pki.service_account_pub.write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki
