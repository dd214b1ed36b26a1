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
    http_addr: str = "0.0.0.0:8888"
    """Where kube-scheduler, Volcano and HTTP clients reach raygate."""
    grpc_addr: str = "0.0.0.0:9090"
    """The gRPC API (health today; admission status later)."""
    snapshots: tuple[str, ...] = ()
    demo: bool = False
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
