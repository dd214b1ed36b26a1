"""What ``raygate-autoscaler`` reads from its environment (``autoscalerOptions.env``).

Every problem is reported with the variable's name, and the entrypoint refuses to start
on any of them: a typo in the URL must not quietly turn into the stock autoscaler.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from raygate.client import ENV_TOKEN_FILE, SERVICE_ACCOUNT_TOKEN, TlsSettings
from raygate.contract.command import ConfigError

__all__ = [
    "ENV_CA_FILE",
    "ENV_CERT_FILE",
    "ENV_KEY_FILE",
    "ENV_POLL_INTERVAL",
    "ENV_SERVER_NAME",
    "ENV_TIMEOUT",
    "ENV_TOKEN_FILE",
    "ENV_URL",
    "SCHEMES",
    "AutoscalerSettings",
]

ENV_URL = "RAYGATE_URL"
ENV_TIMEOUT = "RAYGATE_TIMEOUT_SECONDS"
ENV_POLL_INTERVAL = "RAYGATE_POLL_INTERVAL_SECONDS"
ENV_CA_FILE = "RAYGATE_TLS_CA_FILE"
ENV_CERT_FILE = "RAYGATE_TLS_CERT_FILE"
ENV_KEY_FILE = "RAYGATE_TLS_KEY_FILE"
ENV_SERVER_NAME = "RAYGATE_TLS_SERVER_NAME"

DEFAULT_TIMEOUT_SECONDS = 2.0
DEFAULT_POLL_INTERVAL_SECONDS = 0.0

SCHEMES = {"http": False, "https": True, "grpc": False, "grpcs": True}
"""The URL schemes raygate's API is reached by, and whether each is TLS."""


@dataclass(frozen=True, slots=True)
class AutoscalerSettings:
    url: str
    """raygate's API: ``http://host:8888`` (the HTTP port) or ``grpc://host:9090``, or
    ``https://``/``grpcs://`` behind a TLS endpoint. Required."""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """The longest an autoscaler loop waits for raygate, connecting included. The loop
    runs every 5 s (``AUTOSCALER_UPDATE_INTERVAL_S``); a slower answer counts as an
    outage, and that loop is stock."""
    poll_interval_seconds: float = DEFAULT_POLL_INTERVAL_SECONDS
    """Reuse an answer younger than this instead of asking again. 0: ask once per
    autoscaler loop (one small GET per 5 s per RayCluster)."""
    tls: TlsSettings = field(default_factory=TlsSettings)
    token_file: str | None = None
    """A bearer token to send, read again on every call (raygate checks its callers
    in-cluster). Default: the pod's service account token when one is mounted; KubeRay's
    Role for the head already lets it ``get`` its RayCluster, which is what raygate asks."""

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None, *,
                 also: Sequence[str] = ()) -> AutoscalerSettings:
        """The settings in ``env`` (default: the process environment); ``ConfigError``
        names every variable that is wrong, after ``also``'s problems (the command
        line's), so that the entrypoint's one refusal says them all."""
        env = os.environ if env is None else env
        problems: list[str] = [*also]
        url = env.get(ENV_URL, "").strip()
        parts = urlsplit(url)
        problems += _url_problems(url, parts)
        timeout = _seconds(env, ENV_TIMEOUT, DEFAULT_TIMEOUT_SECONDS, 0.0, problems,
                           exclusive=True)
        interval = _seconds(env, ENV_POLL_INTERVAL, DEFAULT_POLL_INTERVAL_SECONDS, 0.0,
                            problems, exclusive=False)
        tls = TlsSettings(_readable(env, ENV_CA_FILE, problems),
                          _readable(env, ENV_CERT_FILE, problems),
                          _readable(env, ENV_KEY_FILE, problems),
                          env.get(ENV_SERVER_NAME, "").strip() or None)
        problems += _tls_problems(tls, parts.scheme)
        if ENV_TOKEN_FILE in env:  # set and empty: send no token
            token = _readable(env, ENV_TOKEN_FILE, problems)
        else:
            token = SERVICE_ACCOUNT_TOKEN if os.path.exists(SERVICE_ACCOUNT_TOKEN) else None
        if problems:
            raise ConfigError(problems, "refusing to start")
        return AutoscalerSettings(url, timeout, interval, tls, token)


def _url_problems(url: str, parts: SplitResult) -> list[str]:
    if not url:
        return [f"{ENV_URL}: required: raygate's API, e.g. "
                "http://raygate.raygate-system:8888 or grpc://...:9090"]
    if parts.scheme not in SCHEMES or not parts.hostname:
        return [f"{ENV_URL}: expected http://, https://, grpc:// or grpcs:// and a host, "
                f"got {url!r}"]
    if parts.scheme.startswith("grpc") and (parts.path.strip("/") or parts.port is None):
        return [f"{ENV_URL}: a gRPC URL is grpc://host:port with no path, got {url!r}"]
    return []


def _seconds(env: Mapping[str, str], key: str, default: float, minimum: float,
             problems: list[str], *, exclusive: bool) -> float:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < minimum or (exclusive and value == minimum):
        bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
        problems.append(f"{key}: expected a number of seconds {bound}, got {raw!r}")
        return default
    return value


def _readable(env: Mapping[str, str], key: str, problems: list[str]) -> str | None:
    path = env.get(key, "").strip() or None
    if path is not None and not os.access(path, os.R_OK):
        problems.append(f"{key}: cannot read {path!r}")
    return path


def _tls_problems(tls: TlsSettings, scheme: str) -> list[str]:
    problems = []
    if (tls.cert_file is None) != (tls.key_file is None):
        problems.append(f"{ENV_CERT_FILE} and {ENV_KEY_FILE}: give both or neither")
    if tls != TlsSettings() and SCHEMES.get(scheme) is False:
        problems.append(f"RAYGATE_TLS_*: set, but {ENV_URL} is {scheme}://; use "
                        f"{scheme}s:// for TLS")
    if tls.server_name is not None and scheme == "https":
        problems.append(f"{ENV_SERVER_NAME}: gRPC only; for https:// put that name in "
                        f"{ENV_URL}")
    return problems
