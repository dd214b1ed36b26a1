"""Settings of the ``raygate serve`` process: flags, environment, config file, defaults.

Precedence, highest first: a command-line flag, the environment (``RAYGATE_*``), the
YAML config file (``--config FILE`` or ``RAYGATE_CONFIG``), the default. One table,
``SETTINGS``, names each setting's flag, variable and file key; the CLI, the loader,
``--print-config`` and the README are all read off it.

The config file has two sections, both optional, keys in camelCase::

    server:   listeners, TLS, authz, limits, shutdown, logs (read once, at start)
    policy:   plugin.config.PolicyConfig (re-read when the file changes: PolicyReloader)

Where cluster state comes from (``--snapshot``, ``--demo``, ``--kubeconfig``,
``--context``) is a flag or variable only: a file shared by every replica must not decide
it. Every value is validated at start and every problem is reported, each with where the
value came from (``--max-body-bytes: ...``, ``RAYGATE_MAX_BODY_BYTES: ...``,
``raygate.yaml: server.limits.maxBodyBytes: ...``); raygate refuses to start on any.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from raygate.extender.files import file_stamp
from raygate.extender.logs import FORMATS as LOG_FORMATS
from raygate.extender.logs import LEVELS as LOG_LEVELS
from raygate.plugin.config import (
    ConfigError,
    PolicyConfig,
    policy_config_from_mapping,
    policy_config_to_mapping,
)

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
"""Set in every container by the kubelet; the ``kubernetes`` client's in-cluster loader
keys on it (``SERVICE_HOST_ENV_NAME``; tests/test_settings.py holds the two equal)."""

__all__ = [
    "SETTINGS",
    "ConfigFile",
    "Loaded",
    "Origin",
    "PolicyReloader",
    "ServeSettings",
    "Setting",
    "authz_enabled",
    "in_cluster",
    "load_config_file",
    "load_settings",
    "parse_addr",
    "read_config_file",
    "render_config",
]

log = logging.getLogger("raygate.settings")

AUTHZ_MODES = ("on", "off", "auto")
RELOAD_INTERVAL_SECONDS = 2.0


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
    webhook_cert: str = ""
    webhook_key: str = ""
    """The webhook listener's own certificate: the API server calls it over HTTPS,
    while kube-scheduler may call the main port in plain text on localhost."""

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
    authz_audiences: tuple[str, ...] = ()
    """Accept only bearer tokens issued for one of these audiences (TokenReview
    ``spec.audiences``): a token a caller sends raygate is then no key to the API
    server. Empty: the API server's own audience, any service account token."""
    """How long a token's review and a (user, namespace) access answer are reused: the
    API server is asked at most once per this long per caller, not per request."""

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
    """debug | info | warning | error; debug is one line per scheduling decision."""
    log_format: str = "auto"
    """json | text | auto: text on a terminal, JSON lines otherwise (a pod's log)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)


# --- the table of settings ---------------------------------------------------------------


class _Invalid(ValueError):
    """A value that does not fit; the message says what was expected."""


def _split_addr(addr: str) -> tuple[str, int] | None:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_addr(addr: str, flag: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` to (host, port)."""
    parsed = _split_addr(addr)
    if parsed is None:
        raise ConfigError([f"{flag}: expected HOST:PORT, got {addr!r}"])
    return parsed


# A converter takes a value and whether it is text (a flag or a variable: "5" may mean 5)
# or from YAML (typed already: a quoted "5" there is a string, not a number).
Converter = Callable[[object, bool], Any]


def _addr(optional: bool) -> Converter:
    def convert(value: object, text: bool) -> str:
        if isinstance(value, str) and (
                (optional and value == "") or _split_addr(value) is not None):
            return value
        raise _Invalid("HOST:PORT" + (" (or empty: not served)" if optional else ""))
    return convert


def _path(value: object, text: bool) -> str:
    # Whether the file is there and readable is checked on the value that wins only: a
    # path in the file that a flag overrides need not exist.
    if isinstance(value, str):
        return value
    raise _Invalid("a file path (or empty: none)")


def _choice(options: tuple[str, ...]) -> Converter:
    def convert(value: object, text: bool) -> str:
        if isinstance(value, str) and value in options:
            return value
        raise _Invalid(f"one of {', '.join(options)}")
    return convert


def _authz_mode(value: object, text: bool) -> str:
    # YAML 1.1 (PyYAML, and Kubernetes' own YAML) reads a bare on/off as a boolean: take
    # `mode: off` as the operator wrote it rather than refuse it.
    if isinstance(value, bool) and not text:
        return "on" if value else "off"
    return str(_choice(AUTHZ_MODES)(value, text))


def _audiences(value: object, text: bool) -> tuple[str, ...]:
    # A flag or a variable lists them comma-separated; the file as a YAML list (or the
    # same comma-separated string).
    if isinstance(value, str):
        names = value.split(",")
    elif not text and isinstance(value, list) and all(isinstance(v, str) for v in value):
        names = value
    else:
        raise _Invalid("a list of audience names (comma-separated in a flag or variable)")
    return tuple(name.strip() for name in names if name.strip())


def _positive_int(value: object, text: bool) -> int:
    if text and isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _Invalid("a positive integer")
    return value


def _seconds(zero_ok: bool) -> Converter:
    def convert(value: object, text: bool) -> float:
        if text and isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok)
                or value >= 1e9):
            raise _Invalid("a number of seconds " + (">= 0" if zero_ok else "> 0"))
        return float(value)
    return convert


@dataclass(frozen=True)
class Setting:
    """One setting of ``ServeSettings``: its flag, environment variable and config key."""

    name: str
    """The ``ServeSettings`` field."""
    flag: str
    env: str
    key: str
    """Dotted key under ``server:`` in the config file (``limits.maxBodyBytes``)."""
    convert: Converter
    help: str
    choices: tuple[str, ...] = ()
    metavar: str = ""

    @property
    def file_key(self) -> str:
        return f"server.{self.key}"


def _setting(name: str, key: str, convert: Converter, help: str, *,
             choices: tuple[str, ...] = (), metavar: str = "") -> Setting:
    flag = "--" + name.replace("_", "-")
    return Setting(name, flag, "RAYGATE_" + name.upper(), key, convert, help, choices,
                   metavar)


SETTINGS: tuple[Setting, ...] = (
    _setting("http_addr", "httpAddr", _addr(False),
             "where kube-scheduler, Volcano and HTTP clients call", metavar="HOST:PORT"),
    _setting("grpc_addr", "grpcAddr", _addr(False),
             "the gRPC API (admission status, explain)", metavar="HOST:PORT"),
    _setting("webhook_addr", "webhook.addr", _addr(True),
             "serve the Ray-pod marker webhook over HTTPS here (needs --webhook-cert and "
             "--webhook-key)", metavar="HOST:PORT"),
    _setting("webhook_cert", "webhook.cert", _path,
             "PEM certificate (chain) of the webhook listener", metavar="FILE"),
    _setting("webhook_key", "webhook.key", _path, "PEM private key of --webhook-cert",
             metavar="FILE"),
    _setting("tls_cert", "tls.cert", _path,
             "PEM certificate (chain) for the HTTP and gRPC listeners", metavar="FILE"),
    _setting("tls_key", "tls.key", _path, "PEM private key of --tls-cert", metavar="FILE"),
    _setting("client_ca", "tls.clientCA", _path,
             "PEM CAs: clients must present a certificate they signed (mutual TLS)",
             metavar="FILE"),
    _setting("authz", "authz.mode", _authz_mode,
             "check callers of the admission-status and explain APIs with TokenReview and "
             "SubjectAccessReview; auto: on when running in-cluster", choices=AUTHZ_MODES),
    _setting("authz_cache_seconds", "authz.cacheSeconds", _seconds(False),
             "reuse a token review or access answer this long", metavar="SECONDS"),
    _setting("authz_audiences", "authz.audiences", _audiences,
             "accept only tokens issued for one of these audiences (TokenReview "
             "spec.audiences); empty: the API server's own", metavar="AUD,..."),
    _setting("max_body_bytes", "limits.maxBodyBytes", _positive_int,
             "largest request body accepted (413 above)", metavar="BYTES"),
    _setting("header_timeout_seconds", "limits.headerTimeoutSeconds", _seconds(False),
             "a client must send its request within this long", metavar="SECONDS"),
    _setting("predicate_concurrency", "limits.predicateConcurrency", _positive_int,
             "Volcano predicate calls served at once (503 above)", metavar="N"),
    _setting("shutdown_delay_seconds", "shutdown.delaySeconds", _seconds(True),
             "after SIGTERM, /readyz fails this long before the listeners close",
             metavar="SECONDS"),
    _setting("shutdown_grace_seconds", "shutdown.graceSeconds", _seconds(False),
             "in-flight requests get this long to finish", metavar="SECONDS"),
    _setting("log_level", "log.level", _choice(LOG_LEVELS), "", choices=LOG_LEVELS),
    _setting("log_format", "log.format", _choice(LOG_FORMATS),
             "json: one JSON object a line; text: for people; auto: text on a terminal, "
             "else json", choices=LOG_FORMATS),
)
BY_NAME = {s.name: s for s in SETTINGS}
_BY_KEY = {s.key: s for s in SETTINGS}

# Flags and variables only (see the module docstring); the variables' names.
ENV_SNAPSHOT = "RAYGATE_SNAPSHOT"  # several files: separated by os.pathsep, as $KUBECONFIG
ENV_DEMO = "RAYGATE_DEMO"
ENV_KUBECONFIG = "RAYGATE_KUBECONFIG"
ENV_CONTEXT = "RAYGATE_CONTEXT"
ENV_CONFIG = "RAYGATE_CONFIG"


def _show(value: object) -> str:
    """A value as the user wrote it: JSON spelling reads like YAML and quotes strings."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _shown(values: Mapping[str, Any], key: str) -> str:
    return _show(values[key]) if key in values else "absent"


def _problem(where: str, expected: str, value: object) -> str:
    return f"{where}: expected {expected}, got {_show(value)}"


def _did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


# --- the config file -------------------------------------------------------------------

Stamp = tuple[int, int, int, int]


def _stamp(path: str) -> Stamp | None:
    """What changes when the file does (``raygate.extender.files``); None when it is missing."""
    try:
        return file_stamp([path])[0]
    except OSError:
        return None


@dataclass(frozen=True)
class ConfigFile:
    """One reading of the config file, valid or not."""

    path: str
    stamp: Stamp | None
    """Taken before the file was read: a change during the read is seen next time."""
    server: Mapping[str, Any]
    """Setting name -> value, for the valid ``server:`` keys present."""
    server_raw: Mapping[str, Any]
    """Dotted key -> value as written, every leaf of ``server:`` (to tell what changed)."""
    policy: PolicyConfig | None
    """None when the ``policy:`` section (or the whole file) is invalid."""
    policy_keys: frozenset[str]
    problems: tuple[str, ...]
    """Everything wrong, each with its path; ``policy is None`` iff some are policy's."""
    parsed: bool = True
    """False when the file could not be read or parsed at all."""


def _flatten(data: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from _flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, data


def _read_server(data: object, where: str, values: dict[str, Any],
                 problems: list[str]) -> None:
    """``server:`` walked against the keys of ``SETTINGS``, every problem collected."""
    def walk(node: object, prefix: str) -> None:
        if node is None:
            return  # `tls:` with nothing under it: as if absent
        path = f"server.{prefix}" if prefix else "server"
        if not isinstance(node, Mapping):
            problems.append(f"{where}: {path}: expected a mapping, got {_show(node)}")
            return
        below = prefix + "." if prefix else ""
        children = {k[len(below):].split(".")[0] for k in _BY_KEY if k.startswith(below)}
        for raw_key, value in node.items():
            key = str(raw_key)
            dotted = below + key
            if key not in children:
                problems.append(f"{where}: server.{dotted}: unknown setting"
                                + _did_you_mean(key, sorted(children)))
            elif dotted in _BY_KEY:
                setting = _BY_KEY[dotted]
                try:
                    values[setting.name] = setting.convert(value, False)
                except _Invalid as exc:
                    problems.append(_problem(f"{where}: server.{dotted}", str(exc), value))
            else:
                walk(value, dotted)
    walk(data, "")


def read_config_file(path: str) -> ConfigFile:
    """Read and check ``path``; never raises for what is in the file (see ``problems``)."""
    stamp = _stamp(path)
    problems: list[str] = []

    def broken(problem: str) -> ConfigFile:
        return ConfigFile(path, stamp, {}, {}, None, frozenset(), (problem,), parsed=False)

    try:
        data: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        return broken(f"{path}: cannot read: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        return broken(f"{path}: not UTF-8 text: {exc.reason}")
    except yaml.YAMLError as exc:
        return broken(f"{path}: not valid YAML: {exc}")
    if data is None:
        data = {}  # an empty file: every default
    if not isinstance(data, dict):
        return broken(f"{path}: expected a mapping at the top level "
                      "(sections server: and policy:)")
    sections = ("server", "policy")
    problems.extend(f"{path}: {key}: unknown section" + _did_you_mean(str(key), list(sections))
                    for key in data if key not in sections)
    server: dict[str, Any] = {}
    _read_server(data.get("server"), path, server, problems)
    policy_data = data.get("policy") or {}
    policy: PolicyConfig | None
    try:
        policy = policy_config_from_mapping(policy_data, f"{path}: policy")
    except ConfigError as exc:
        problems.extend(exc.problems)
        policy = None
    keys = frozenset(str(k) for k in policy_data) if isinstance(policy_data, Mapping) else (
        frozenset())
    return ConfigFile(path, stamp, server, dict(_flatten(data.get("server"), "server")),
                      policy, keys, tuple(problems))


def load_config_file(path: str) -> PolicyConfig:
    """The policy of a config file (``raygate check`` and ``explain``); the whole file is
    checked, and any problem raises ``ConfigError``."""
    config = read_config_file(path)
    if config.problems or config.policy is None:
        raise ConfigError(list(config.problems))
    return config.policy


# --- all sources together --------------------------------------------------------------

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
                problems.append(_problem(ENV_DEMO, "true or false", env[ENV_DEMO]))
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
        except _Invalid as exc:
            problems.append(_problem(origin.where, str(exc), raw))

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
    return problems


def in_cluster(settings: ServeSettings, environ: Mapping[str, str]) -> bool:
    """Whether raygate follows its cluster with in-cluster config, decided as
    ``raygate.extender.kube.client.load_connection`` decides it."""
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


# --- --print-config ----------------------------------------------------------------------


def _yaml_value(value: Any) -> str:
    if isinstance(value, tuple):  # safe_dump writes lists, not tuples
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20,
                          allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def render_config(loaded: Loaded, environ: Mapping[str, str]) -> str:
    """The effective settings as a config file (valid YAML, the same layout; every value
    spelled out) with where each came from as a trailing comment."""
    settings, origins = loaded.settings, loaded.origins
    lines = ["# raygate serve: effective settings; each value's origin is the comment "
             "after it",
             "# (precedence: flag > env RAYGATE_* > file > default)."]
    source = ("the demo cluster" if settings.demo else
              "snapshot " + ", ".join(settings.snapshots) if settings.snapshots else
              f"kubeconfig {settings.kubeconfig}" if settings.kubeconfig else
              "in-cluster config, else $KUBECONFIG, else ~/.kube/config")
    where = next((origins[n].comment() for n in ("demo", "snapshots", "kubeconfig")
                  if getattr(settings, n)), "default")
    lines.append(f"# cluster state: {source} ({where})")
    if settings.context:
        lines.append(f"# context: {settings.context} ({origins['context'].comment()})")
    if settings.config_file:
        lines.append(f"# config file: {settings.config_file} "
                     f"({origins['config_file'].comment()}; its policy: is reloaded on change)")
    authz = "on" if authz_enabled(settings, environ) else "off"
    lines.append(f"# authz: {authz}" + (
        f" (auto: {'in-cluster' if authz == 'on' else 'not in-cluster'})"
        if settings.authz == "auto" else ""))

    def emit(indent: int, key: str, value: Any, origin: Origin) -> None:
        line = f"{'  ' * indent}{key}: {_yaml_value(value)}"
        lines.append(f"{line:<40}  # {origin.comment()}")

    lines.append("server:")
    open_sections: list[str] = []
    for s in SETTINGS:
        *sections, leaf = s.key.split(".")
        common = 0
        while (common < min(len(sections), len(open_sections))
               and sections[common] == open_sections[common]):
            common += 1
        for depth in range(common, len(sections)):
            lines.append(f"{'  ' * (depth + 1)}{sections[depth]}:")
        open_sections = sections
        emit(len(sections) + 1, leaf, getattr(settings, s.name), origins[s.name])
    lines.append("policy:")
    for key, value in policy_config_to_mapping(settings.policy).items():
        emit(1, key, value, origins[f"policy.{key}"])
    return "\n".join(lines) + "\n"


# --- policy reload ---------------------------------------------------------------------


def _policy_changes(old: PolicyConfig, new: PolicyConfig) -> list[str]:
    before, after = policy_config_to_mapping(old), policy_config_to_mapping(new)
    return [f"{key} {_show(before[key])} -> {_show(after[key])}"
            for key in after if before[key] != after[key]]


class PolicyReloader:
    """Watches the config file and serves a changed ``policy:`` without a restart.

    A daemon thread compares the file's stamp (device, inode, size, mtime) every
    ``interval`` seconds. On a change the file is read again: a valid ``policy:`` that
    differs goes to ``apply`` (``ClusterCache.set_policy``); an invalid one is refused and
    each problem logged at warning, the running policy kept. ``server:`` keys are read at
    start only: a change there is logged as needing a restart. ``on_reload`` is called
    with ``"ok"`` or ``"failed"`` after each re-read (from this thread), and ``counts``
    keeps the same tally.
    """

    def __init__(
        self,
        baseline: ConfigFile,
        apply: Callable[[PolicyConfig], None],
        *,
        interval: float = RELOAD_INTERVAL_SECONDS,
        on_reload: Callable[[str], None] | None = None,
    ) -> None:
        if baseline.policy is None:
            raise ValueError("the baseline config file must be valid")
        self.path = baseline.path
        self.interval = interval
        self.counts = {"ok": 0, "failed": 0}
        self._apply = apply
        self._on_reload = on_reload
        self._stamp = baseline.stamp
        self._policy = baseline.policy
        self._running_server = dict(baseline.server_raw)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raygate-config-reload",
                                        daemon=True)

    def start(self) -> PolicyReloader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # the watch must outlive one bad reading; the log says why
                log.exception("config reload of %s failed", self.path)

    def poll(self) -> bool:
        """Re-read the file if its stamp changed; returns whether it did."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        reading = read_config_file(self.path)
        self._report_server(reading)
        if reading.policy is None:
            for problem in reading.problems:
                log.warning("config reload: %s (the running policy is kept)", problem)
            self._count("failed")
            return True
        for problem in reading.problems:  # server: only; the policy is fine
            log.warning("config reload: %s (raygate would refuse to start with this file)",
                        problem)
        changes = _policy_changes(self._policy, reading.policy)
        if changes:
            self._apply(reading.policy)
            self._policy = reading.policy
            log.info("config reload: policy from %s applied: %s", self.path, "; ".join(changes))
        self._count("ok")
        return True

    def _report_server(self, reading: ConfigFile) -> None:
        if not reading.parsed:
            return  # unreadable: reported as a problem of the reading
        new = reading.server_raw
        for key in sorted(set(new) | set(self._running_server)):
            if new.get(key) != self._running_server.get(key):
                log.warning("config reload: %s changed in %s (%s -> %s): needs a restart, "
                            "not applied", key, self.path, _shown(self._running_server, key),
                            _shown(new, key))

    def _count(self, result: str) -> None:
        self.counts[result] += 1
        if self._on_reload is not None:
            self._on_reload(result)
