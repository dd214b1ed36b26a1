"""Settings of the ``raygate serve`` process: flags, environment, config file, defaults.

Precedence, highest first: a command-line flag, the environment (``RAYGATE_*``), the
YAML config file (``--config FILE`` or ``RAYGATE_CONFIG``), the default. One table,
``SETTINGS``, names each setting's flag, variable and file key; the CLI, the loader,
``--print-config`` and the README are all read off it.

The config file has two sections, both optional, keys in camelCase::

    server:   listeners, TLS, authz, limits, shutdown, logs (read once, at start)
    policy:   policy.config.PolicyConfig (re-read when the file changes: PolicyReloader)

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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raygate.contract.command import ConfigError
from raygate.policy.config import PolicyConfig
from raygate.process.logs import FORMATS as LOG_FORMATS
from raygate.process.logs import LEVELS as LOG_LEVELS

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
"""Set in every container by the kubelet; the ``kubernetes`` client's in-cluster loader
keys on it (``SERVICE_HOST_ENV_NAME``; tests/server/test_settings.py holds the two equal)."""


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
    """The HTTPS listener of the Ray-pod webhook; empty: not served."""
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

    requeue: str = "on"
    """on | off: annotate a pending pod whose refusal of GPU nodes a later snapshot
    reverses, so kube-scheduler tries it again (needs ``patch`` on pods)."""
    disruption_budgets: str = "on"
    """on | off: keep a PodDisruptionBudget per RayCluster floor (each group's and the
    head's), so evictions (drains, node autoscalers, the descheduler) and kube-scheduler's
    own preemption keep the floor too (needs create, patch, list and delete on
    poddisruptionbudgets). Never written with ``--demo`` or snapshots: no cluster."""

    native_placement: str = "on"
    """on | off: the webhook writes each new Ray pod's placement as node affinity in its
    create, which every scheduler and node autoscaler reads; it gates a pod only where the
    decision must wait. Whatever this says, raygate releases every pod its gate holds."""
    placement_wait_seconds: float = 10.0
    """How long a gated pod waits for its RayCluster (another watch, in no set order with
    its pods) to reach raygate's cache before it is released as floor (the safe side)."""
    webhook_marker: str = "off"
    """on | off: the webhook also adds the extended resource ``raygate.io/managed`` (for a
    default-scheduler extender with ``managedResources``). No node autoscaler offers it:
    only for clusters without node autoscaling."""
    leader_election: str = "on"
    """on | off: the controllers that act from one replica at a time act only while this
    replica holds the Lease ``leader_election_lease_namespace/name``; off (or no
    cluster): this replica always acts."""
    leader_election_lease_name: str = "raygate"
    leader_election_lease_namespace: str = ""
    """Empty: the pod's own namespace ($POD_NAMESPACE), else ``raygate``."""
    leader_election_lease_seconds: int = 15
    """How long others wait, after the last renewal they saw, before taking the Lease."""
    leader_election_renew_deadline_seconds: float = 10.0
    """The leader stops acting when it has not renewed for this long (< the lease)."""
    leader_election_retry_seconds: float = 2.0
    """Between attempts to acquire or renew."""

    log_level: str = "info"
    """debug | info | warning | error; debug is one line per scheduling decision."""
    log_format: str = "auto"
    """json | text | auto: text on a terminal, JSON lines otherwise (a pod's log)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)


class InvalidValue(ValueError):
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
        raise InvalidValue("HOST:PORT" + (" (or empty: not served)" if optional else ""))
    return convert


def _path(value: object, text: bool) -> str:
    # Whether the file is there and readable is checked on the value that wins only: a
    # path in the file that a flag overrides need not exist.
    if isinstance(value, str):
        return value
    raise InvalidValue("a file path (or empty: none)")


def _choice(options: tuple[str, ...]) -> Converter:
    def convert(value: object, text: bool) -> str:
        if isinstance(value, str) and value in options:
            return value
        raise InvalidValue(f"one of {', '.join(options)}")
    return convert


def _on_off(value: object, text: bool) -> str:
    # YAML 1.1 reads a bare on/off as a boolean, as in _authz_mode.
    if isinstance(value, bool) and not text:
        return "on" if value else "off"
    if value in ("on", "off"):
        return str(value)
    raise InvalidValue("one of on, off")


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
        raise InvalidValue("a list of audience names (comma-separated in a flag or variable)")
    return tuple(name.strip() for name in names if name.strip())


_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _object_name(namespace: bool) -> Converter:
    """A Kubernetes object's name (a DNS subdomain), or a namespace's (a DNS label; empty:
    the pod's own namespace)."""
    def convert(value: object, text: bool) -> str:
        if isinstance(value, str):
            if namespace and value == "":
                return value
            if (len(value) <= (63 if namespace else 253) and _NAME.fullmatch(value)
                    and not (namespace and "." in value)):
                return value
        raise InvalidValue("a namespace name (or empty: the pod's own)" if namespace
                           else "an object name (lowercase letters, digits, - and .)")
    return convert


def _positive_int(value: object, text: bool) -> int:
    if text and isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidValue("a positive integer")
    return value


def _seconds(zero_ok: bool) -> Converter:
    def convert(value: object, text: bool) -> float:
        if text and isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok)
                or value >= 1e9):
            raise InvalidValue("a number of seconds " + (">= 0" if zero_ok else "> 0"))
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
             "serve the Ray-pod webhook over HTTPS here (needs --webhook-cert and "
             "--webhook-key)", metavar="HOST:PORT"),
    _setting("webhook_cert", "webhook.cert", _path,
             "PEM certificate (chain) of the webhook listener", metavar="FILE"),
    _setting("webhook_key", "webhook.key", _path, "PEM private key of --webhook-cert",
             metavar="FILE"),
    _setting("webhook_marker", "webhook.marker", _on_off,
             "also add the extended resource raygate.io/managed to Ray pods, for a "
             "default-scheduler extender with managedResources; no node autoscaler offers "
             "it: only where no node autoscaling runs", choices=("on", "off")),
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
    _setting("requeue", "requeue.staleRefusals", _on_off,
             "annotate a pending pod when a later snapshot reverses filter's refusal of GPU "
             "nodes (its group's floor filled meanwhile), so kube-scheduler tries it again; "
             "needs patch on pods", choices=("on", "off")),
    _setting("disruption_budgets", "disruptionBudgets", _on_off,
             "keep a PodDisruptionBudget per RayCluster floor (each group's and the head's), "
             "so drains, node autoscalers, the descheduler and kube-scheduler's own "
             "preemption keep it too; needs create, patch, list and delete on "
             "poddisruptionbudgets", choices=("on", "off")),
    _setting("native_placement", "placement.native", _on_off,
             "gate new CPU-only Ray pods at the webhook and release each with raygate's "
             "placement written as node affinity, which node autoscalers, drains and every "
             "scheduler read; needs patch on pods", choices=("on", "off")),
    _setting("placement_wait_seconds", "placement.waitSeconds", _seconds(False),
             "a gated pod waits this long for its RayCluster to reach raygate's cache, then "
             "is released as floor (the safe side)", metavar="SECONDS"),
    _setting("leader_election", "leaderElection.enabled", _on_off,
             "the controllers that must act from one replica at a time act only while "
             "this replica holds a Lease; needs get, create and update on leases",
             choices=("on", "off")),
    _setting("leader_election_lease_name", "leaderElection.leaseName", _object_name(False),
             "the Lease's name", metavar="NAME"),
    _setting("leader_election_lease_namespace", "leaderElection.leaseNamespace",
             _object_name(True), "the Lease's namespace; empty: $POD_NAMESPACE, else raygate",
             metavar="NAMESPACE"),
    _setting("leader_election_lease_seconds", "leaderElection.leaseSeconds", _positive_int,
             "others take the Lease this long after its last renewal they saw",
             metavar="SECONDS"),
    _setting("leader_election_renew_deadline_seconds", "leaderElection.renewDeadlineSeconds",
             _seconds(False), "the leader stops acting when it has not renewed for this "
             "long (less than --leader-election-lease-seconds)", metavar="SECONDS"),
    _setting("leader_election_retry_seconds", "leaderElection.retrySeconds", _seconds(False),
             "between attempts to acquire or renew the Lease", metavar="SECONDS"),
    _setting("log_level", "log.level", _choice(LOG_LEVELS), "", choices=LOG_LEVELS),
    _setting("log_format", "log.format", _choice(LOG_FORMATS),
             "json: one JSON object a line; text: for people; auto: text on a terminal, "
             "else json", choices=LOG_FORMATS),
)
BY_NAME = {s.name: s for s in SETTINGS}
BY_KEY = {s.key: s for s in SETTINGS}

# Flags and variables only (see the module docstring); the variables' names.
ENV_SNAPSHOT = "RAYGATE_SNAPSHOT"  # several files: separated by os.pathsep, as $KUBECONFIG
ENV_DEMO = "RAYGATE_DEMO"
ENV_KUBECONFIG = "RAYGATE_KUBECONFIG"
ENV_CONTEXT = "RAYGATE_CONTEXT"
ENV_CONFIG = "RAYGATE_CONFIG"


def show(value: object) -> str:
    """A value as the user wrote it: JSON spelling reads like YAML and quotes strings."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def shown(values: Mapping[str, Any], key: str) -> str:
    return show(values[key]) if key in values else "absent"


def problem(where: str, expected: str, value: object) -> str:
    return f"{where}: expected {expected}, got {show(value)}"


def did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
