"""raygate's advice for one RayCluster, as the autoscaler loop consumes it.

``Advisor.current()`` is called once per autoscaler loop. It answers from raygate's
admission-status API (``raygate.client``), or ``None`` — "no advice: be stock" — when
raygate cannot be reached, answers with an error, does not know the RayCluster, or takes
longer than ``timeout_seconds``. It never waits longer than that: the request runs in a
worker thread, so a hung connection or a slow DNS lookup costs one bounded wait, and
while it stays hung later loops do not wait at all. An outage is logged once, as a
warning, when it starts, and once more when raygate answers again.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from raygate.client import connect, token_file
from raygate.contract.admission_status import AdmissionStatus
from raygate.contract.errors import RaygateError
from raygate.process.logs import about
from raygate.ray_autoscaler.settings import AutoscalerSettings

__all__ = ["Advice", "Advisor", "PodAdvice", "client_for"]

log = logging.getLogger("raygate.autoscaler")

KEEP = "keep"
REPLACE = "replace"
HOLD = "hold"
NODE_PROVISIONING = "NodeProvisioning"
NO_NODE_COMING = "NoNodeComing"


@dataclass(frozen=True, slots=True)
class PodAdvice:
    action: str
    """``keep`` or ``replace``."""
    state: str
    """Why the pod is not running (``WaitingForCapacity``, ``Stuck``, ...)."""
    reason: str
    """Why the action."""
    why: str = ""
    """Why the state, in raygate's words (quoting the scheduler or the node autoscaler)."""


@dataclass(frozen=True, slots=True)
class Advice:
    """One answer of raygate, reduced to what the autoscaler acts on."""

    version: str
    pods: Mapping[str, PodAdvice]
    """By pod name (the autoscaler's cloud instance id): every pod raygate sees not
    running. A pod absent here gets no advice: the stock rules apply to it."""
    held: Mapping[str, str]
    """Worker groups raygate says not to scale up, with its reason."""

    @staticmethod
    def of(status: AdmissionStatus) -> Advice:
        # An action this version does not know (a newer raygate; "Unknown" from gRPC) is
        # no advice, never a guess.
        pods = {p.name: PodAdvice(p.advice.action, p.state, p.advice.reason, p.reason)
                for p in status.pods if p.advice.action in (KEEP, REPLACE)}
        held = {g.name: g.scale_up.reason for g in status.groups if g.scale_up.action == HOLD}
        return Advice(status.metadata.version, MappingProxyType(pods), MappingProxyType(held))


class AdmissionClient(Protocol):
    """What the advisor needs of ``raygate.client``'s clients."""

    def get(self, namespace: str, name: str) -> AdmissionStatus: ...

    def close(self) -> None: ...


def client_for(settings: AutoscalerSettings) -> AdmissionClient:
    """``raygate.client.connect`` to raygate's API as ``settings`` describe it."""
    token = token_file(settings.token_file) if settings.token_file else None
    return connect(settings.url, settings.timeout_seconds, token, settings.tls)


class Advisor:
    """raygate's advice for the RayCluster ``namespace/name``; see the module docstring.

    ``current()`` is meant for one thread (the autoscaler loop's)."""

    def __init__(self, settings: AutoscalerSettings, namespace: str, name: str, *,
                 clock: Callable[[], float] = time.monotonic,
                 connect: Callable[[AutoscalerSettings], AdmissionClient] = client_for,
                 ) -> None:
        self.settings = settings
        self.namespace = namespace
        self.name = name
        self._clock = clock
        self._connect = connect
        # The client lives in the worker thread: it is not thread-safe, and a call that
        # hangs must not hold the autoscaler loop.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="raygate-advice")
        self._client: AdmissionClient | None = None
        self._pending: concurrent.futures.Future[Advice] | None = None
        self._advice: Advice | None = None
        self._fetched_at = 0.0
        self._answering: bool | None = None  # None: not asked yet
        self._outlook: dict[str, str] = {}
        """The node-autoscaler state last logged per pending pod (``note_outlook``)."""

    def current(self) -> Advice | None:
        """The advice to act on in this loop; ``None``: act as the stock autoscaler."""
        now = self._clock()
        if self._advice is not None and now - self._fetched_at < (
                self.settings.poll_interval_seconds):
            return self._advice
        timeout = self.settings.timeout_seconds
        if self._pending is not None:
            if not self._pending.done():
                self._failed(f"no answer within {timeout:g} s (still waiting)")
                return None
            self._pending = None  # late: its answer is stale, ask again
        future = self._executor.submit(self._fetch)
        try:
            advice = future.result(timeout=timeout)
        except TimeoutError:
            self._pending = future
            self._failed(f"no answer within {timeout:g} s")
            return None
        except RaygateError as exc:
            self._failed(str(exc) or type(exc).__name__)
            return None
        except Exception as exc:  # a bug or a stranger on the port: stock, loudly
            self._failed(f"{type(exc).__name__}: {exc}", exc)
            return None
        if self._answering is not True:
            log.info("raygate at %s answers for RayCluster %s/%s: its advice applies",
                     self.settings.url, self.namespace, self.name,
                     extra=about(namespace=self.namespace, raycluster=self.name))
        self._answering = True
        self._advice, self._fetched_at = advice, now
        self.note_outlook(advice)
        return advice

    def note_outlook(self, advice: Advice) -> None:
        """Log once per pod and change (not per poll) whether a node autoscaler brings a
        node for it: a warning, naming the autoscaler's reason, when none comes (the pod
        is kept all the same: a new one would get none either)."""
        where = about(namespace=self.namespace, raycluster=self.name)
        outlook = {pod: a.state for pod, a in advice.pods.items()
                   if a.state in (NODE_PROVISIONING, NO_NODE_COMING)}
        for pod, state in outlook.items():
            if self._outlook.get(pod) == state:
                continue
            reason = advice.pods[pod].why
            if state == NO_NODE_COMING:
                log.warning("raygate: no node is coming for pending worker %s/%s; keeping it "
                            "(a new pod would get none either): %s", self.namespace, pod,
                            reason, extra=where)
            else:
                log.info("raygate: a node is coming for pending worker %s/%s; keeping it: "
                         "%s", self.namespace, pod, reason, extra=where)
        self._outlook = outlook

    def _fetch(self) -> Advice:
        if self._client is None:
            self._client = self._connect(self.settings)
        try:
            return Advice.of(self._client.get(self.namespace, self.name))
        except BaseException:
            # A fresh client next time: a gRPC channel would otherwise wait out its
            # reconnect back-off before it noticed raygate is back.
            client, self._client = self._client, None
            client.close()
            raise

    def _failed(self, why: str, error: BaseException | None = None) -> None:
        if self._answering is not False:
            log.warning("raygate at %s gives no advice for RayCluster %s/%s (%s): the "
                        "autoscaler acts as stock until it does", self.settings.url,
                        self.namespace, self.name, why, exc_info=error,
                        extra=about(namespace=self.namespace, raycluster=self.name))
        else:
            log.debug("raygate at %s: still no advice (%s)", self.settings.url, why)
        self._answering = False
        self._advice = None

    def close(self) -> None:
        """Close the client (in its thread, after a call still running) and the thread."""
        self._executor.submit(self._close_client)
        self._executor.shutdown(wait=False)

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
