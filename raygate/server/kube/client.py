"""The connection to the API server: configuration and auth by the ``kubernetes`` client,
requests through its REST layer, and replies decoded by msgspec straight from the bytes.

The client's model objects are never built: at 150,000 pods they would cost minutes and
gigabytes. A LIST page is read whole and decoded into the slim wire structs of
``raygate.server.wire.kube``; a WATCH is read as it arrives and decoded line by line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import msgspec
import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from raygate.contract.command import CommandError
from raygate.server.files import yaml_problem
from raygate.server.kube.decode import (
    API_RESOURCES,
    RAW_PAGE,
    Decoders,
    decode_line,
    decode_page,
    next_continue,
    status_of,
)
from raygate.server.kube.resources import RESOURCES, Served
from raygate.server.kube.transport import (
    ListPage,
    NotServed,
    TransportError,
    WatchLine,
    WatchSettings,
    api_error,
)
from raygate.server.kube.writes import Writes
from raygate.server.wire import DECODE_ERRORS

__all__ = [
    "ClusterConfigError",
    "Connection",
    "KubeTransport",
    "NoClusterConfig",
    "load_connection",
]

log = logging.getLogger("raygate.kube")

DEFAULT_KUBECONFIG = "~/.kube/config"


class NoClusterConfig(CommandError):
    """None of the ways to reach a cluster is there."""


class ClusterConfigError(CommandError):
    """A way to reach a cluster is there but cannot be used; the message says why."""


@dataclass(frozen=True)
class Connection:
    configuration: k8s.Configuration
    description: str
    """Where raygate connects and how it learned to, for logs and ``/readyz``."""

    def __post_init__(self) -> None:
        # No urllib3 retries below raygate's own: each would log a warning (three per
        # request by default) and triple every attempt against an API server that is
        # down. The callers back off themselves (the watchers with jitter, up to 30 s;
        # the authorizer answers 503 "retry shortly"); False also makes urllib3 raise the
        # connection's own error rather than MaxRetryError around it.
        self.configuration.retries = False


@dataclass(frozen=True)
class PodFiles:
    """Where a pod finds its service account's token and the cluster's CA (the kubelet
    mounts them)."""

    token: str = SERVICE_TOKEN_FILENAME
    ca: str = SERVICE_CERT_FILENAME


def load_connection(
    kubeconfig: str | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    pod_files: PodFiles = PodFiles(),
) -> Connection:
    """How to reach the cluster, in order: ``--kubeconfig``/``--context`` when given;
    in-cluster config when ``KUBERNETES_SERVICE_HOST`` is set (raygate runs in a pod);
    else ``$KUBECONFIG``, else ``~/.kube/config``. Raises ``NoClusterConfig`` when none
    is there, ``ClusterConfigError`` when the one chosen cannot be used."""
    env = os.environ if environ is None else environ
    if kubeconfig is None and context is None and env.get(SERVICE_HOST_ENV_NAME):
        return _in_cluster(env, pod_files)
    if kubeconfig is None:
        # $KUBECONFIG may list several files (os.pathsep), merged as kubectl merges them.
        kubeconfig = env.get("KUBECONFIG") or None
        if kubeconfig is None:
            default = Path(os.path.expanduser(DEFAULT_KUBECONFIG))
            if context is None and not default.is_file():
                raise NoClusterConfig("no in-cluster config, --kubeconfig, $KUBECONFIG or "
                                      f"{DEFAULT_KUBECONFIG}")
            kubeconfig = str(default)
    configuration = k8s.Configuration()
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration,
            persist_config=False)
    except yaml.YAMLError as exc:
        raise ClusterConfigError(
            f"kubeconfig {kubeconfig}: not valid YAML: {yaml_problem(exc)}") from None
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        raise ClusterConfigError(f"kubeconfig {kubeconfig}: {exc}") from None
    which = f" context {context}" if context else ""
    return Connection(configuration, f"{configuration.host} (kubeconfig {kubeconfig}{which})")


def _in_cluster(env: Mapping[str, str], files: PodFiles) -> Connection:
    configuration = k8s.Configuration()
    try:
        # The service account token is rotated by the kubelet; the loader re-reads it.
        loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=files.token, cert_filename=files.ca,
            environ=env)
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise ClusterConfigError(f"in-cluster config ({SERVICE_HOST_ENV_NAME} is set): "
                                 f"{exc}") from None
    return Connection(configuration, f"{configuration.host} (in-cluster)")


# --- decoding ---------------------------------------------------------------------------


def _error_from(response: urllib3.BaseHTTPResponse) -> Exception:
    status = status_of(response.data or b"")
    return api_error(response.status, status.reason or (response.reason or ""), status.message)


# --- the transport ----------------------------------------------------------------------


class _Stream:
    """A WATCH reply read as it arrives, one event per line."""

    def __init__(self, response: urllib3.BaseHTTPResponse, decoders: Decoders) -> None:
        self.response = response
        self.decoders = decoders
        self._closed = False

    def __iter__(self) -> Iterator[WatchLine]:
        response = self.response
        pending = b""
        clean = False
        try:
            chunks: Iterator[bytes]
            if response.chunked:
                chunks = response.read_chunked(None, decode_content=True)
            else:
                chunks = iter(lambda: response.read1(65536), b"")
            for chunk in chunks:
                # The API server writes one JSON object per line; a chunk may hold part of
                # one, or several.
                pending += chunk
                if b"\n" not in chunk:
                    continue
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield decode_line(line, self.decoders)
            if pending.strip() and not self._closed:
                yield decode_line(pending, self.decoders)
            clean = True
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if not self._closed:
                raise TransportError(f"watch stream broke: {exc}") from None
        except ValueError:
            # Reading a response another thread has shut down ("I/O operation on closed
            # file"); anything else is a bug.
            if not self._closed:
                raise
        finally:
            if clean:
                response.release_conn()
            else:
                response.close()
                response.release_conn()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Unblocks a read in progress in the watcher's thread.
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            self.response.shutdown()


class KubeTransport(Writes):
    """``raygate.server.kube.watch.Transport`` over the ``kubernetes`` client's REST layer."""

    def __init__(self, connection: Connection, settings: WatchSettings | None = None) -> None:
        settings = settings or WatchSettings()
        self.connection = connection
        # Each kind's watch holds a connection; LIST prefetches and writes need more beside
        # them. The client's default (5 per CPU) is 10 on 2 CPUs: fewer than the kinds, and
        # every connection over it is discarded after its request.
        pool = connection.configuration
        pool.connection_pool_maxsize = max(pool.connection_pool_maxsize or 0,
                                           len(RESOURCES) + 8)
        self.api = k8s.ApiClient(connection.configuration)
        self.request_timeout = settings.request_timeout
        self.compression = settings.compression
        self.read_timeout = settings.read_timeout
        self._decoders: dict[type[msgspec.Struct], Decoders] = {}
        self._prefetch = ThreadPoolExecutor(max_workers=2, thread_name_prefix="raygate-list")
        self._ahead: dict[str, tuple[tuple[int, str], Future[bytes]]] = {}
        """Per collection, the next LIST page being fetched: ((limit, continue), bytes)."""
        self._lock = threading.Lock()

    def close(self) -> None:
        self._prefetch.shutdown(wait=False, cancel_futures=True)
        self.api.close()  # type: ignore[no-untyped-call]

    def _decoders_for(self, served: Served) -> Decoders:
        wire = served.resource.wire
        decoders = self._decoders.get(wire)
        if decoders is None:
            decoders = self._decoders[wire] = Decoders(wire)
        return decoders

    def _get(self, path: str, query: list[tuple[str, str]], timeout: tuple[float, float],
             gzip: bool = False) -> urllib3.BaseHTTPResponse:
        header = {"Accept": "application/json", **({"Accept-Encoding": "gzip"} if gzip else {})}
        method, url, headers, _, _ = self.api.param_serialize(
            "GET", path, query_params=query, header_params=header,
            # Bearer tokens (static, in-cluster, exec plugins, OIDC) are refreshed by the
            # client's configuration; client certificates live in its connection pool.
            auth_settings=["BearerToken"],
        )
        try:
            rest = self.api.call_api(method, url, header_params=headers,
                                     _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportError(f"GET {path}: {exc}") from None
        except k8s.ApiException as exc:  # the client's wrapper of TLS failures
            raise TransportError(f"GET {path}: {exc.reason}") from None
        response: urllib3.BaseHTTPResponse = rest.response
        if response.status != 200:
            try:
                error = _error_from(response)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                error = TransportError(f"GET {path}: {response.status}: {exc}")
            finally:
                response.release_conn()
            raise error
        return response

    def _read(self, response: urllib3.BaseHTTPResponse, what: str) -> bytes:
        try:
            return response.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportError(f"{what}: {exc}") from None
        finally:
            response.release_conn()

    def get(self, path: str, query: list[tuple[str, str]]) -> bytes:
        """One GET of ``path`` (raw JSON), for callers outside the watch loop."""
        response = self._get(path, query, (self.request_timeout, self.request_timeout))
        return self._read(response, f"GET {path}")

    def discover(self, group_version: str) -> frozenset[str] | None:
        # Discovery is readable by every authenticated client (the system:discovery
        # ClusterRole): it needs no RBAC rule of raygate's own.
        path = f"/apis/{group_version}"
        try:
            response = self._get(path, [], (self.request_timeout, self.request_timeout))
        except NotServed:
            # A group/version no CRD (or aggregated API) serves is not in discovery: 404.
            return None
        try:
            resources = API_RESOURCES.decode(self._read(response, path))
        except DECODE_ERRORS as exc:
            raise TransportError(f"GET {path}: not an APIResourceList: {exc}") from None
        return frozenset(r.name for r in resources.resources or ())

    def list(self, served: Served, limit: int, continue_: str) -> ListPage:
        with self._lock:
            ahead = self._ahead.pop(served.path, None)
        if ahead is not None and ahead[0] == (limit, continue_):
            data = ahead[1].result()  # or the fetch's error, as if raised here
        else:
            if ahead is not None:
                ahead[1].cancel()
            data = self._fetch_page(served, limit, continue_)
        token = next_continue(data)
        if token:
            # Fetch the next page while this one is decoded and converted: the API
            # server's and the network's time then overlaps raygate's.
            future = self._prefetch.submit(self._fetch_page, served, limit, token)
            with self._lock:
                self._ahead[served.path] = ((limit, token), future)
        return decode_page(data, self._decoders_for(served))

    def list_raw(self, path: str, limit: int = 500,
                 query: Sequence[tuple[str, str]] = ()) -> Iterator[msgspec.Raw]:
        """Every item of the collection at ``path`` (``query``: its selectors), page by
        page, left raw for the caller's struct: a LIST read once through (``raygate
        check``, ``raygate uninstall``). The watch reads its pages one ``list`` at a
        time: it starts over when a token expires."""
        continue_ = ""
        while True:
            data = self._page(path, query, limit, continue_, f"LIST {path}")
            try:
                page = RAW_PAGE.decode(data)
            except DECODE_ERRORS as exc:
                raise TransportError(f"LIST {path}: not a list: {exc}") from None
            yield from page.items or ()
            continue_ = page.metadata.continue_
            if not continue_:
                return

    def _fetch_page(self, served: Served, limit: int, continue_: str) -> bytes:
        return self._page(served.path, _selected(served), limit, continue_, f"LIST {served}")

    def _page(self, path: str, query: Sequence[tuple[str, str]], limit: int, continue_: str,
              what: str) -> bytes:
        # No resourceVersion: a consistent read of the latest state (from etcd, or from
        # the watch cache when it is known to be fresh); with a continue token, the next
        # page of that same state.
        query = [("limit", str(limit)), *query]
        if continue_:
            query.append(("continue", continue_))
        # urllib3 inflates a gzip reply (decode_content): kube-apiserver compresses one
        # over 128 KiB when asked (APIResponseCompression, on since 1.16).
        response = self._get(path, query, (self.request_timeout, self.request_timeout),
                             self.compression)
        return self._read(response, what)

    def watch(self, served: Served, resource_version: str, timeout_seconds: int, *,
              initial_events: bool = False) -> _Stream:
        query = [("watch", "true")]
        if resource_version:
            # Every change after this version, in order; 410 Gone if it was compacted.
            query.append(("resourceVersion", resource_version))
        if initial_events:
            # The streaming list: the state first (not older than resource_version; the
            # latest without one), as it is sent only with NotOlderThan (validation.go).
            query += [("sendInitialEvents", "true"),
                      ("resourceVersionMatch", "NotOlderThan")]
        query += [
            # BOOKMARKs move the version on while nothing changes, so a resumed watch
            # rarely starts from a compacted version; a streaming list's initial events
            # end at one (sent only to a watch that allows them: cacher.go
            # setInitialEventsEndBookmarkIfRequested).
            ("allowWatchBookmarks", "true"),
            # The API server ends the watch after this many seconds (cleanly).
            ("timeoutSeconds", str(timeout_seconds)),
            *_selected(served),
        ]
        # A streaming list is compressed when asked, each flush a gzip member (1.37's
        # WatchListCompression); urllib3 inflates them one after the other.
        response = self._get(served.path, query, (self.request_timeout, self.read_timeout),
                             self.compression and initial_events)
        return _Stream(response, self._decoders_for(served))


def _selected(served: Served) -> list[tuple[str, str]]:
    selector = served.resource.field_selector
    return [("fieldSelector", selector)] if selector else []
