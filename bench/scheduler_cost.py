"""What a burst of ``bench.scheduler_throughput`` costs, beside how fast it went: the API
writes per Ray pod, the CPU seconds per 1,000 pods of each component, and the time
raygate's webhook adds to each create — each the difference of two readings taken around
the burst (``Reading``): just before the first create is sent, and once every pod is bound
and kube-apiserver's writes have stopped (``settled``).

- **API writes**: kube-apiserver's ``apiserver_request_total``, the write verbs (``POST``,
  ``PUT``, ``PATCH``, ``APPLY``, ``DELETE``, ``DELETECOLLECTION``), dry runs left out, by
  resource (and subresource) and verb — ``pods create``, ``pods/binding create``,
  ``events create`` — and by the writer that makes them in this bench (``WRITERS``: no
  kubelet, controller-manager or KubeRay runs here, so each kind of write has one writer).
  kube-scheduler's own count of its writes (client-go's ``rest_client_requests_total``)
  checks its share.
- **CPU**: ``utime`` + ``stime`` of ``/proc/<pid>/stat`` (every thread of the process),
  and the whole machine's busy time from ``/proc/stat``.
- **The webhook**: kube-apiserver's
  ``apiserver_admission_webhook_admission_duration_seconds`` for raygate's webhook (the
  call as the API server waits for it), and raygate's own handling of it: its
  ``raygate_webhook_duration_seconds`` where it exports one, else
  ``raygate_request_duration_seconds{route="/mutate/ray-pods"}``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from bench.stats import histogram_quantile

__all__ = ["NAN2", "WEBHOOK_NAME", "WEBHOOK_SECONDS", "Cost", "Reading", "api_writes", "cost",
           "cpu_seconds", "delta_mean", "delta_quantiles", "histograms", "machine_seconds",
           "settled", "writer"]

NAN2 = (math.nan, math.nan)
REQUESTS = "apiserver_request_total"
CLIENT_REQUESTS = "rest_client_requests_total"
WEBHOOK_SECONDS = "apiserver_admission_webhook_admission_duration_seconds"
WEBHOOK_NAME = "ray-pods.raygate.io"
"""raygate's webhook, as deploy/native-placement names it."""
RAYGATE_WEBHOOK = "raygate_webhook_duration_seconds"
RAYGATE_ROUTES = "raygate_request_duration_seconds"
RAYGATE_EVENTS = "raygate_events"
WEBHOOK_ROUTE = "/mutate/ray-pods"
WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "APPLY": "apply",
               "DELETE": "delete", "DELETECOLLECTION": "deletecollection"}
"""kube-apiserver's ``verb`` label of a write, and the Kubernetes verb it is."""
WRITERS = {"pods create": "creator", "pods/binding create": "kube-scheduler",
           "pods/status patch": "kube-scheduler", "pods/status update": "kube-scheduler",
           "events create": "kube-scheduler", "events patch": "kube-scheduler",
           "events update": "kube-scheduler", "pods patch": "raygate",
           "poddisruptionbudgets apply": "raygate", "poddisruptionbudgets create": "raygate",
           "poddisruptionbudgets patch": "raygate", "poddisruptionbudgets update": "raygate"}
"""Who makes each kind of write in this bench: the bench creating the pods as KubeRay
would (``creator``), kube-scheduler (binds, its events, the status of a pod it cannot
place), raygate (a gated pod's release and its stale-refusal annotation are pod patches;
the floors' PodDisruptionBudgets; its own Events, moved from kube-scheduler's by its count,
``Cost.raygate_events``). Leases are ``background`` (raygate's leader Lease,
kube-apiserver's own), anything else ``other``."""
CLK_TCK = os.sysconf("SC_CLK_TCK")


def writer(key: str) -> str:
    """The writer of a ``"<resource>[/<subresource>] <verb>"`` write (``WRITERS``)."""
    if key.startswith(("leases ", "leases/")):
        return "background"
    return WRITERS.get(key, "other")


# --- the readings --------------------------------------------------------------------------

def _family(text: str, *names: str) -> str:
    """The lines of ``text`` (a /metrics exposition) that belong to the families
    ``names``: kube-apiserver's is megabytes, of which a reading wants a few series."""
    keep = [line for line in text.splitlines()
            if line.startswith(names) or (line.startswith("#") and any(
                f" {name} " in line for name in names))]
    return "\n".join(keep) + "\n"


def api_writes(text: str) -> dict[str, float]:
    """kube-apiserver's write requests so far (``apiserver_request_total``, every code,
    no dry run) by ``"<resource>[/<subresource>] <verb>"``."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(_family(text, REQUESTS)):
        for sample in family.samples:
            labels = sample.labels
            verb = WRITE_VERBS.get(labels.get("verb", ""))
            if sample.name != REQUESTS or verb is None or labels.get("dry_run"):
                continue
            sub = labels.get("subresource", "")
            key = f"{labels.get('resource', '')}{'/' + sub if sub else ''} {verb}"
            out[key] = out.get(key, 0.0) + sample.value
    return out


def client_writes(text: str) -> float:
    """A Go component's write requests so far, by its client-go (its
    ``rest_client_requests_total`` of the write methods, every host and code)."""
    total = 0.0
    for family in text_string_to_metric_families(_family(text, CLIENT_REQUESTS)):
        for sample in family.samples:
            if sample.name == CLIENT_REQUESTS and sample.labels.get("method") in WRITE_VERBS:
                total += sample.value
    return total


def cpu_seconds(pid: int | None, proc: str = "/proc") -> float:
    """CPU seconds (user + system, all its threads) process ``pid`` has used; NaN when
    it is gone or unknown."""
    if not pid:
        return math.nan
    try:
        with open(f"{proc}/{pid}/stat", encoding="ascii") as stat:
            text = stat.read()
    except OSError:
        return math.nan
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14, 15


def machine_seconds(proc: str = "/proc") -> float:
    """CPU seconds the machine has been busy, all CPUs (``/proc/stat``: everything but
    idle and iowait)."""
    with open(f"{proc}/stat", encoding="ascii") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


@dataclass
class Reading:
    """One side of the window: when, the /metrics texts (``apiserver``, ``raygate``,
    ``scheduler``; empty when not read) and the CPU seconds by process (and
    ``machine``)."""

    at: float = field(default_factory=time.monotonic)
    metrics: dict[str, str] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    @classmethod
    def take(cls, metrics: dict[str, str], pids: Mapping[str, int | None]) -> Reading:
        cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        cpu["machine"] = machine_seconds()
        return cls(time.monotonic(), metrics, cpu)


def settled(scrape: Callable[[], str], *, every: float = 0.5, timeout: float = 10.0) -> str:
    """kube-apiserver's /metrics once its writes other than leases' have stopped: two
    scrapes ``every`` seconds apart counting the same (kube-scheduler posts its events
    after the binds, in batches). The last text, at ``timeout`` whatever it counts."""
    def count(text: str) -> float:
        return sum(n for k, n in api_writes(text).items() if writer(k) != "background")

    text = scrape()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(every)
        last, text = text, scrape()
        if count(text) == count(last):
            break
    return text


# --- histograms ----------------------------------------------------------------------------

def histograms(text: str, name: str, /, **match: str) -> dict[str, list[tuple[float, float]]]:
    """Buckets of histogram ``name`` whose labels include ``match``, summed over the other
    labels and keyed by ``extension_point`` (or "" for the others)."""
    out: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(_family(text, name)):
        if family.name != name:
            continue
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            if any(sample.labels.get(k) != v for k, v in match.items()):
                continue
            key = sample.labels.get("extension_point", "")
            le = float(sample.labels["le"])
            out.setdefault(key, {})[le] = out.get(key, {}).get(le, 0.0) + sample.value
    return {k: sorted(v.items()) for k, v in out.items()}


def _bucket_delta(before: str, after: str, metric: str,
                  **match: str) -> list[tuple[float, float]]:
    was = dict(histograms(before, metric, **match).get("", []))
    now = histograms(after, metric, **match).get("", [])
    return [(le, count - was.get(le, 0.0)) for le, count in now]


def delta_quantiles(before: dict[str, str], after: dict[str, str], source: str,
                    metric: str, /, **match: str) -> tuple[float, float]:
    """(p50, p99) in ms of what histogram ``metric`` observed between two scrapes of
    ``source`` (a key of both, a /metrics text); NaN when it was not scraped."""
    if not before.get(source) or not after.get(source):
        return NAN2
    delta = _bucket_delta(before[source], after[source], metric, **match)
    return 1e3 * histogram_quantile(delta, 0.5), 1e3 * histogram_quantile(delta, 0.99)


def _sum_count(text: str, metric: str, match: Mapping[str, str]) -> tuple[float, float]:
    total = count = 0.0
    for family in text_string_to_metric_families(_family(text, metric)):
        for sample in family.samples if family.name == metric else ():
            if any(sample.labels.get(k) != v for k, v in match.items()):
                continue
            if sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_count"):
                count += sample.value
    return total, count


def delta_mean(before: dict[str, str], after: dict[str, str], source: str,
               metric: str, /, **match: str) -> float:
    """The mean in ms of what histogram ``metric`` observed between two scrapes."""
    count, total = delta_count(before, after, source, metric, **match)
    return 1e3 * total / count if count else math.nan


def delta_count(before: dict[str, str], after: dict[str, str], source: str,
                metric: str, /, **match: str) -> tuple[float, float]:
    """(observations, their sum) histogram ``metric`` added between two scrapes; zeros
    when it was not scraped."""
    if not before.get(source) or not after.get(source):
        return 0.0, 0.0
    was, now = _sum_count(before[source], metric, match), _sum_count(after[source], metric,
                                                                          match)
    return now[1] - was[1], now[0] - was[0]


# --- the cost of a window -------------------------------------------------------------------

@dataclass
class Cost:
    """What one burst cost, per Ray pod (writes) or per 1,000 pods (CPU)."""

    seconds: float = math.nan
    """The window: the first reading to the last."""
    writes: dict[str, float] = field(default_factory=dict)
    """API writes per Ray pod by ``"<resource>[/<subresource>] <verb>"``."""
    writers: dict[str, float] = field(default_factory=dict)
    """The same by writer (``WRITERS``), and ``total``."""
    scheduler_writes: float = math.nan
    """kube-scheduler's writes per Ray pod by its own client's count."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds per 1,000 Ray pods by process, and ``machine`` (all of it)."""
    webhook_ms: tuple[float, float] = NAN2
    """kube-apiserver's wait for raygate's webhook, (p50, p99) from its buckets."""
    webhook_mean_ms: float = math.nan
    webhook_calls: float = 0.0
    """kube-apiserver's calls of raygate's webhook per Ray pod."""
    raygate_webhook_ms: tuple[float, float] = NAN2
    """raygate's own time for the webhook's requests, (p50, p99) from its buckets."""
    raygate_webhook_mean_ms: float = math.nan
    raygate_webhook_source: str = ""
    """The histogram that was read (``RAYGATE_WEBHOOK``, or ``RAYGATE_ROUTES``'s route)."""
    raygate_events: float = math.nan
    """raygate's Event writes per Ray pod (creates and series patches, by its own
    ``raygate_events_total``): counted in ``writers`` as raygate's, not kube-scheduler's."""


def _per_pod(before: Mapping[str, float], after: Mapping[str, float],
             pods: int) -> dict[str, float]:
    keys = sorted(set(after) | set(before))
    delta = {k: (after.get(k, 0.0) - before.get(k, 0.0)) / pods for k in keys}
    return {k: v for k, v in delta.items() if v}


def _raygate_webhook(before: dict[str, str], after: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The histogram of raygate's own webhook time: the dedicated one where raygate
    exports it, else its route's."""
    if f"{RAYGATE_WEBHOOK}_count" in after.get("raygate", ""):
        return RAYGATE_WEBHOOK, {}
    return RAYGATE_ROUTES, {"route": WEBHOOK_ROUTE}


def event_writes(text: str) -> float:
    """raygate's Event writes so far (``raygate_events_total``, created and series)."""
    return sum(sample.value
               for family in text_string_to_metric_families(_family(text, RAYGATE_EVENTS))
               for sample in family.samples
               if sample.name == RAYGATE_EVENTS + "_total"
               and sample.labels.get("outcome") in ("created", "series"))


def cost(before: Reading, after: Reading, pods: int) -> Cost:
    """The cost of ``pods`` Ray pods between two readings."""
    was, now = before.metrics, after.metrics
    writes = _per_pod(api_writes(was.get("apiserver", "")),
                      api_writes(now.get("apiserver", "")), pods)
    writers: dict[str, float] = {"total": sum(writes.values())}
    for key, n in writes.items():
        writers[writer(key)] = writers.get(writer(key), 0.0) + n
    events = ((event_writes(now["raygate"]) - event_writes(was["raygate"])) / pods
              if was.get("raygate") and now.get("raygate") else math.nan)
    if events and not math.isnan(events):  # kube-apiserver counts all Events as one
        writers["kube-scheduler"] = writers.get("kube-scheduler", 0.0) - events
        writers["raygate"] = writers.get("raygate", 0.0) + events
    scheduler = (client_writes(now["scheduler"]) - client_writes(was["scheduler"])) / pods \
        if was.get("scheduler") and now.get("scheduler") else math.nan
    cpu = {k: 1e3 * (after.cpu[k] - before.cpu.get(k, math.nan)) / pods for k in after.cpu}
    calls, _ = delta_count(was, now, "apiserver", WEBHOOK_SECONDS, name=WEBHOOK_NAME)
    metric, match = _raygate_webhook(was, now)
    return Cost(
        seconds=after.at - before.at, writes=writes, writers=writers,
        scheduler_writes=scheduler, cpu=cpu,
        webhook_ms=delta_quantiles(was, now, "apiserver", WEBHOOK_SECONDS, name=WEBHOOK_NAME),
        webhook_mean_ms=delta_mean(was, now, "apiserver", WEBHOOK_SECONDS, name=WEBHOOK_NAME),
        webhook_calls=calls / pods,
        raygate_webhook_ms=delta_quantiles(was, now, "raygate", metric, **match),
        raygate_webhook_mean_ms=delta_mean(was, now, "raygate", metric, **match),
        raygate_webhook_source=metric + "".join(f'{{{k}="{v}"}}' for k, v in match.items()),
        raygate_events=events)
