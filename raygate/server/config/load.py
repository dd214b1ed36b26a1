"""All sources together: flags over environment over the config file over defaults,
each value with where it came from, every problem reported at once."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from raygate.contract.command import ConfigError
from raygate.policy.config import policy_config_to_mapping
from raygate.server.config.file import ConfigFile, read_config_file
from raygate.server.config.settings import (
    BY_NAME,
    ENV_CONFIG,
    ENV_CONTEXT,
    ENV_DEMO,
    ENV_KUBECONFIG,
    ENV_SNAPSHOT,
    IN_CLUSTER_ENV,
    SETTINGS,
    InvalidValue,
    ServeSettings,
    problem,
)

OriginKind = Literal["flag", "env", "file", "default"]


@dataclass(frozen=True)
class Origin:
    """Where a value came from: ``kind``, and ``where`` names the flag, variable or key."""

    kind: OriginKind
    where: str = ""

    def comment(self) -> str:
        return f"{self.kind} {self.where}" if self.kind in ("flag", "env") else self.kind


@dataclass(frozen=True)
class Loaded:
    settings: ServeSettings
    origins: Mapping[str, Origin]
    """Per ``ServeSettings`` field; ``policy.<camelCaseKey>`` per policy key."""
    file: ConfigFile | None


def _parse_bool(value: str) -> bool | None:
    return {"true": True, "1": True, "yes": True,
            "false": False, "0": False, "no": False, "": False}.get(value.strip().lower())


def _sources(flags: Mapping[str, Any], env: Mapping[str, str], values: dict[str, Any],
             origins: dict[str, Origin], problems: list[str]) -> None:
    """Where cluster state comes from: a flag, else the environment; never the file."""
    given = {name: flags[name] for name in ("snapshots", "demo", "kubeconfig") if flags.get(name)}
    if given:
        flag = {"snapshots": "--snapshot", "demo": "--demo", "kubeconfig": "--kubeconfig"}
        for name, value in given.items():
            values[name] = tuple(value) if name == "snapshots" else value
            origins[name] = Origin("flag", flag[name])
    else:
        chosen = []
        if env.get(ENV_SNAPSHOT):
            values["snapshots"] = tuple(p for p in env[ENV_SNAPSHOT].split(os.pathsep) if p)
            origins["snapshots"] = Origin("env", ENV_SNAPSHOT)
            chosen.append(ENV_SNAPSHOT)
        if ENV_DEMO in env:
            demo = _parse_bool(env[ENV_DEMO])
            if demo is None:
                problems.append(problem(ENV_DEMO, "true or false", env[ENV_DEMO]))
            elif demo:
                values["demo"] = True
                origins["demo"] = Origin("env", ENV_DEMO)
                chosen.append(ENV_DEMO)
        if env.get(ENV_KUBECONFIG):
            values["kubeconfig"] = env[ENV_KUBECONFIG]
            origins["kubeconfig"] = Origin("env", ENV_KUBECONFIG)
            chosen.append(ENV_KUBECONFIG)
        if len(chosen) > 1:
            problems.append(f"{' and '.join(chosen)}: give one source of cluster state")
    if flags.get("context"):
        values["context"], origins["context"] = flags["context"], Origin("flag", "--context")
    elif env.get(ENV_CONTEXT):
        values["context"], origins["context"] = env[ENV_CONTEXT], Origin("env", ENV_CONTEXT)


def load_settings(flags: Mapping[str, Any], environ: Mapping[str, str]) -> Loaded:
    """``ServeSettings`` from the flags given on the command line (``ServeSettings`` field
    -> value, absent when not given; ``config_file`` for ``--config``), the environment
    and the config file. Raises ``ConfigError`` with every problem found."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    _sources(flags, environ, values, origins, problems)

    config_file = flags.get("config_file") or environ.get(ENV_CONFIG) or ""
    file: ConfigFile | None = None
    if config_file:
        values["config_file"] = config_file
        origins["config_file"] = (Origin("flag", "--config") if flags.get("config_file")
                                  else Origin("env", ENV_CONFIG))
        file = read_config_file(config_file)
        problems.extend(file.problems)

    for s in SETTINGS:
        if s.name in flags:
            raw, text, origin = flags[s.name], True, Origin("flag", s.flag)
        elif s.env in environ:
            raw, text, origin = environ[s.env], True, Origin("env", s.env)
        elif file is not None and s.name in file.server:
            values[s.name], origins[s.name] = file.server[s.name], Origin("file")
            continue
        else:
            continue
        try:
            values[s.name] = s.convert(raw, text)
            origins[s.name] = origin
        except InvalidValue as exc:
            problems.append(problem(origin.where, str(exc), raw))

    policy = file.policy if file is not None else None
    if policy is not None:
        values["policy"] = policy
    settings = ServeSettings(**values)
    for f in fields(ServeSettings):
        origins.setdefault(f.name, Origin("default"))
    for key in policy_config_to_mapping(settings.policy):
        in_file = file is not None and key in file.policy_keys
        origins[f"policy.{key}"] = Origin("file" if in_file else "default")
    problems.extend(_check_together(settings, origins))
    if problems:
        raise ConfigError(problems)
    return Loaded(settings, origins, file)


def _label(name: str, origins: Mapping[str, Origin], file: str) -> str:
    origin = origins[name]
    if origin.kind == "file":
        return f"{file}: {BY_NAME[name].file_key}"
    if origin.kind == "default":
        return BY_NAME[name].flag
    return origin.where


def _all_ways(name: str) -> str:
    s = BY_NAME[name]
    return f"{s.flag}, {s.env} or {s.file_key}"


def _check_together(settings: ServeSettings, origins: Mapping[str, Origin]) -> list[str]:
    """Checks of the values that won, and of settings that only make sense together."""
    problems: list[str] = []

    def label(name: str) -> str:
        return _label(name, origins, settings.config_file)

    for name in ("tls_cert", "tls_key", "client_ca", "webhook_cert", "webhook_key"):
        path = getattr(settings, name)
        if path:
            try:
                with open(path, "rb") as f:
                    f.read(1)
            except OSError as exc:
                problems.append(f"{label(name)}: cannot read {path!r}: {exc.strerror or exc}")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        have, missing = (("tls_cert", "tls_key") if settings.tls_cert
                         else ("tls_key", "tls_cert"))
        problems.append(f"{label(have)}: set, but not its pair ({_all_ways(missing)}): "
                        "give the certificate and the key, or neither")
    tls = bool(settings.tls_cert and settings.tls_key)
    if settings.client_ca and not tls:
        problems.append(f"{label('client_ca')}: needs TLS (a certificate and a key): client "
                        "certificates are asked for in the TLS handshake")
    if settings.webhook_addr and not (settings.webhook_cert and settings.webhook_key):
        problems.append(f"{label('webhook_addr')}: needs a certificate and key "
                        f"({_all_ways('webhook_cert')}, {_all_ways('webhook_key')}): the "
                        "API server calls webhooks over HTTPS only")
    if settings.authz == "on" and (settings.demo or settings.snapshots):
        problems.append(f"{label('authz')}: on needs an API server to ask (TokenReview, "
                        "SubjectAccessReview); --demo and --snapshot have none")
    problems.extend(_lease_timing(settings, label))
    return problems


def _lease_timing(settings: ServeSettings, label: Callable[[str], str]) -> list[str]:
    """A leader must stop acting before another can take the Lease (renew deadline <
    lease), and have more than one attempt before its deadline; the bounds are the
    ``kubernetes`` client's (its Config exits the process on others)."""
    lease = settings.leader_election_lease_seconds
    renew = settings.leader_election_renew_deadline_seconds
    retry = settings.leader_election_retry_seconds
    problems = []
    if retry < 1:
        problems.append(f"{label('leader_election_retry_seconds')}: expected at least 1, "
                        f"got {retry:g}")
    if renew <= 1.2 * retry:
        problems.append(f"{label('leader_election_renew_deadline_seconds')}: must be more "
                        f"than 1.2 × the retry period ({retry:g}), got {renew:g}")
    if lease <= renew:
        problems.append(f"{label('leader_election_lease_seconds')}: must be more than the "
                        f"renew deadline ({renew:g}), got {lease}")
    return problems


def in_cluster(settings: ServeSettings, environ: Mapping[str, str]) -> bool:
    """Whether raygate follows its cluster with in-cluster config, decided as
    ``raygate.server.kube.client.load_connection`` decides it."""
    if settings.demo or settings.snapshots or settings.kubeconfig or settings.context:
        return False
    # The kubelet sets KUBERNETES_SERVICE_HOST in every container (the `kubernetes`
    # Service); load_connection takes the in-cluster config exactly when it is set.
    return bool(environ.get(IN_CLUSTER_ENV))


def authz_enabled(settings: ServeSettings, environ: Mapping[str, str]) -> bool:
    """``auto`` is on only in-cluster: there the callers are pods with service-account
    tokens; with a kubeconfig raygate runs on someone's machine, and --demo/--snapshot
    have no API server to ask."""
    if settings.authz == "auto":
        return in_cluster(settings, environ)
    return settings.authz == "on"
