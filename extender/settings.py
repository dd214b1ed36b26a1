"""Settings of the ``raygate serve`` process, and the config file.

The config file is YAML with a ``policy:`` section (``plugin.config.PolicyConfig``, keys
in camelCase). Flags select the sources and the listen addresses. Every problem is
reported with its path, and raygate refuses to start on any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from plugin.config import ConfigError, PolicyConfig, policy_config_from_mapping

__all__ = ["ServeSettings", "load_config_file", "parse_addr"]


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``raygate serve`` runs with (the contract between the settings sources
    and the servers; defaults here are the documented defaults)."""

    # Where cluster state comes from (at most one of snapshots / demo / kubeconfig).
    snapshots: tuple[str, ...] = ()
    demo: bool = False
    kubeconfig: str = ""
    context: str = ""
    config_file: str = ""
    """The YAML file these settings were read from, if any; its ``policy:`` is reloaded."""

    # Listeners.
    http_addr: str = "0.0.0.0:8888"
    """Where kube-scheduler, Volcano and HTTP clients reach raygate."""
    grpc_addr: str = "0.0.0.0:9090"
    webhook_addr: str = ""
    """The HTTPS listener of the Ray-pod marker webhook; empty: not served."""

    # TLS on the HTTP and gRPC listeners (both files, or neither: plain text).
    tls_cert: str = ""
    tls_key: str = ""
    client_ca: str = ""
    """When set, clients must present a certificate signed by one of these CAs (mTLS)."""

    # Who may read admission status and explanations.
    authz: str = "auto"
    """on | off | auto: TokenReview + SubjectAccessReview when following a cluster from
    inside it (in-cluster config), off for --demo, snapshots and kubeconfigs."""
    authz_cache_seconds: float = 10.0

    # Limits and lifecycle.
    max_body_bytes: int = 64 * 1024 * 1024
    """A 5,000-node NodeList (nodeCacheCapable: false) is about 36 MB."""
    header_timeout_seconds: float = 10.0
    """A client must send its request head and body within this long."""
    predicate_concurrency: int = 64
    """Volcano predicate calls served at once; more get 503 at once."""
    shutdown_delay_seconds: float = 0.0
    """After SIGTERM, /readyz answers 503 this long before the listeners close (let
    endpoints controllers take the pod out of Services first)."""
    shutdown_grace_seconds: float = 20.0
    """In-flight requests get this long to finish after the listeners close."""

    log_level: str = "info"
    log_format: str = "auto"
    policy: PolicyConfig = field(default_factory=PolicyConfig)


def parse_addr(addr: str, flag: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` to (host, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError([f"{flag}: expected HOST:PORT, got {addr!r}"])
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def load_config_file(path: str) -> PolicyConfig:
    try:
        data: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from None
    if data is None:
        return PolicyConfig()
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping at the top level"])
    unknown = [f"{path}: {key}: unknown section" for key in data if key != "policy"]
    if unknown:
        raise ConfigError(unknown)
    return policy_config_from_mapping(data.get("policy") or {}, f"{path}: policy")
