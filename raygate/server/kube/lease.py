"""The Lease (coordination.k8s.io/v1) behind ``raygate.server.kube.leader.Leadership``:
the ``kubernetes`` client's own leader election, with the pieces it lacks put around it.

What the client's ``kubernetes.leaderelection`` (37.x) is used for: one attempt,
``LeaderElection.try_acquire_or_renew`` — read the Lease, create it when absent, take it
when its holder's lease ran out (judged by when *this* replica last saw the record change,
not by the holder's clock), renew it when held — and ``LeaseLock``'s get/create/update,
whose replace carries the resourceVersion read, so two candidates racing for the Lease
cannot both win (409 Conflict for the later one).

What it lacks, and is here or in ``leader.py`` instead:

- ``LeaderElection.run`` loops forever with ``time.sleep``: it cannot be stopped, and it
  returns for good after losing the lease once. ``Leadership`` drives the attempts itself
  from a thread it can stop, and stays a candidate after a loss.
- Nothing releases the Lease: a replica that stops leaves it held until it runs out
  (``leaseSeconds``), so a rolling update leaves nobody acting that long. ``release``
  writes an empty holder, which the library (and client-go) take over at once.
- The lock's calls carry no timeout: against an API server that accepts connections and
  never answers, one attempt blocks for minutes, and the renew deadline is then no
  deadline. ``_BoundedLeases`` gives each call one.
- ``LeaseLock()`` builds a ``CoordinationV1Api`` on the global default configuration;
  raygate's connection (``Connection``, its token refreshed by the client) is replaced in.
- The renew deadline is measured from the start of a retry round, not from the last
  renewal, on the wall clock: ``Leadership.leading()`` measures from the last successful
  renewal on the monotonic clock instead.
- It logs every renewal at INFO (every ``retrySeconds``, each replica); raygate logs the
  changes of leadership itself.
"""

from __future__ import annotations

import datetime
import logging
import os
import secrets
import socket
from collections.abc import Mapping
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes.leaderelection.electionconfig import Config
from kubernetes.leaderelection.leaderelection import LeaderElection
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from raygate.server.kube.leader import LeaseTiming

__all__ = [
    "POD_NAMESPACE_ENV",
    "POD_NAME_ENV",
    "LeaseElector",
    "Lock",
    "identity",
    "lease_elector",
    "lease_namespace",
]

log = logging.getLogger("raygate.leader")

POD_NAME_ENV = "POD_NAME"
POD_NAMESPACE_ENV = "POD_NAMESPACE"
"""Set by the Deployment from the downward API (metadata.name, metadata.namespace)."""
DEFAULT_NAMESPACE = "raygate"

# Every renewal is an INFO line there ("has successfully acquired lease"), and every
# attempt of a follower another; raygate's own lines say when leadership changes.
logging.getLogger("leaderelection").setLevel(logging.WARNING)


class Lock(Protocol):
    """What ``LeaderElection`` and ``release`` use of ``LeaseLock`` (tests give a fake)."""

    name: str
    namespace: str
    identity: str

    def get(self, name: str, namespace: str) -> tuple[bool, Any]: ...

    def create(self, name: str, namespace: str, election_record: Any) -> bool: ...

    def update(self, name: str, namespace: str, updated_record: Any) -> bool: ...


def identity(environ: Mapping[str, str] | None = None) -> str:
    """The pod's name (or this host's) and a random suffix: a restarted container keeps
    its pod's name, and must not take the lease its predecessor held for its own."""
    env = os.environ if environ is None else environ
    return f"{env.get(POD_NAME_ENV) or socket.gethostname()}_{secrets.token_hex(4)}"


def lease_namespace(configured: str, environ: Mapping[str, str] | None = None) -> str:
    """The configured namespace, else the pod's own, else ``raygate``."""
    env = os.environ if environ is None else environ
    return configured or env.get(POD_NAMESPACE_ENV) or DEFAULT_NAMESPACE


class _BoundedLeases:
    """The three calls ``LeaseLock`` makes, each bounded by ``timeout`` seconds."""

    def __init__(self, api: k8s.CoordinationV1Api, timeout: float) -> None:
        self.api = api
        self.timeout = timeout

    def read_namespaced_lease(self, name: str, namespace: str) -> k8s.V1Lease:
        return self.api.read_namespaced_lease(name, namespace, _request_timeout=self.timeout)

    def create_namespaced_lease(self, namespace: str, body: k8s.V1Lease) -> k8s.V1Lease:
        return self.api.create_namespaced_lease(namespace, body,
                                                _request_timeout=self.timeout)

    def replace_namespaced_lease(self, name: str, namespace: str,
                                 body: k8s.V1Lease) -> k8s.V1Lease:
        return self.api.replace_namespaced_lease(name, namespace, body,
                                                 _request_timeout=self.timeout)


def _nothing() -> None:
    """``Config`` wants callbacks; ``Leadership`` tells its own listeners instead."""


class LeaseElector:
    """``raygate.server.kube.leader.Elector`` over the client's ``LeaderElection``."""

    def __init__(self, lock: Lock, timing: LeaseTiming) -> None:
        self.lock = lock
        self.identity = lock.identity
        # Config calls sys.exit on values it refuses; load_settings refuses them first.
        config = Config(lock, timing.lease_seconds,  # type: ignore[no-untyped-call]
                        timing.renew_deadline_seconds, timing.retry_seconds,
                        _nothing, _nothing)
        self._election = LeaderElection(config)  # type: ignore[no-untyped-call]

    def try_acquire_or_renew(self) -> bool:
        return bool(self._election.try_acquire_or_renew())  # type: ignore[no-untyped-call]

    def release(self) -> bool:
        """Give the Lease up if this replica holds it: an empty holder and a lease of one
        second, as client-go's ReleaseOnCancel writes it. The replace carries the
        resourceVersion just read: a Lease someone took meanwhile is left alone (409).
        Returns whether it was released."""
        lock = self.lock
        found, record = lock.get(lock.name, lock.namespace)
        if not found or record.holder_identity != self.identity:
            return False
        now = str(datetime.datetime.now())  # the library's own spelling of a time
        released = LeaderElectionRecord("", "1", now, now)  # type: ignore[no-untyped-call]
        return lock.update(lock.name, lock.namespace, released)


def lease_elector(api: k8s.ApiClient, name: str, namespace: str, holder: str,
                  timing: LeaseTiming) -> LeaseElector:
    """The elector of the Lease ``namespace/name`` through raygate's own client ``api``."""
    lock = LeaseLock(name, namespace, holder)  # type: ignore[no-untyped-call]
    default = lock.api_instance.api_client
    # Duck-typed: the lock makes these three calls only.
    lock.api_instance = _BoundedLeases(  # type: ignore[assignment]
        k8s.CoordinationV1Api(api), timing.request_timeout)
    default.close()  # the default client LeaseLock made and nobody uses
    return LeaseElector(lock, timing)
