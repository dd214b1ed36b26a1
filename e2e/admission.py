"""What raygate's admission-status API says while a scenario runs, recorded from its
gRPC Watch stream (and read over HTTP on demand), as KubeRay or the autoscaler would."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from e2e.scenario import PodHistory, wait_until
from raygate.client import connect
from raygate.contract.admission_status import AdmissionStatus
from raygate.contract.errors import RaygateError

__all__ = ["RUNNING_OR_GONE", "AdmissionRecorder", "Transition"]

RUNNING_OR_GONE = "(running or gone)"


@dataclass(frozen=True)
class Transition:
    at: float
    """Seconds since the scenario began."""
    pod: str
    state: str
    advice: str
    reason: str


@dataclass
class AdmissionRecorder:
    grpc_target: str
    token: str
    namespace: str
    started: float
    transitions: list[Transition] = field(default_factory=list)
    latest: dict[str, AdmissionStatus] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._client = connect(f"grpc://{self.grpc_target}", token=lambda: self.token)
        self._watch = self._client.watch(namespace=self.namespace)
        self._thread = threading.Thread(target=self._run, name="admission-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last: dict[tuple[str, str], str] = {}
        try:
            for event in self._watch:
                if event.status is None:
                    continue
                t = time.monotonic() - self.started
                cluster = event.status.metadata.name
                with self._lock:
                    self.latest[cluster] = event.status
                    listed = set()
                    for pod in event.status.pods:
                        listed.add(pod.name)
                        if last.get((cluster, pod.name)) != pod.state:
                            last[(cluster, pod.name)] = pod.state
                            self.transitions.append(Transition(
                                t, pod.name, pod.state, pod.advice.action, pod.reason))
                    # The status lists only pods that are not running: one that leaves
                    # the list runs now, or is gone.
                    for key in [k for k in last if k[0] == cluster and k[1] not in listed]:
                        if last.pop(key) != RUNNING_OR_GONE:
                            self.transitions.append(Transition(t, key[1], RUNNING_OR_GONE,
                                                               "", ""))
        except RaygateError:
            return  # raygate went away (a restart scenario); the test reads what it has

    def states(self, pod: str) -> list[str]:
        with self._lock:
            return [t.state for t in self.transitions if t.pod == pod]

    def wait_for_state(self, pod: str, state: str, *, last: bool = False,
                       timeout: float = 60.0) -> None:
        """Until the API has said ``state`` of ``pod`` (as its latest word, with ``last``)."""
        def said() -> bool:
            states = self.states(pod)
            return states[-1:] == [state] if last else state in states
        wait_until(f"the admission API saying {state} of {pod}", said, timeout=timeout)

    def status(self, cluster: str) -> AdmissionStatus | None:
        with self._lock:
            return self.latest.get(cluster)

    def close(self) -> None:
        self._watch.close()
        self._client.close()

    def lags(self, history: list[PodHistory]) -> str:
        """How long after the API showed a change the admission API said so: the
        scheduler's verdict (WaitingForCapacity), a DisruptionTarget (Preempted), a pod
        running (it leaves the list). Both clocks are this process's: the pod watch and
        the admission Watch run side by side."""
        rows = []
        for h in history:
            for state, seen in (("WaitingForCapacity", h.unschedulable),
                                ("Preempted", h.disrupted), (RUNNING_OR_GONE, h.running)):
                said = next((t.at for t in self.transitions
                             if t.pod == h.name and t.state == state), None)
                if seen is not None and said is not None and said >= seen - 0.05:
                    rows.append(f"| {h.name} | {state} | {seen:.2f} | {said:.2f} | "
                                f"{max(0.0, said - seen):.2f} |")
        return ("| pod | state | API shows it (s) | raygate says it (s) | lag (s) |\n"
                "|---|---|---:|---:|---:|\n" + "\n".join(rows) + "\n")

    def table(self) -> str:
        lines = ["| t (s) | pod | state | advice | reason |", "|---:|---|---|---|---|"]
        with self._lock:
            for t in self.transitions:
                reason = t.reason.replace("|", "\\|")
                lines.append(f"| {t.at:.1f} | {t.pod} | {t.state} | {t.advice} | {reason} |")
        return "\n".join(lines) + "\n"
