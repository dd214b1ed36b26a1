"""The cost accounting of the scheduler-throughput benchmark (bench/scheduler_cost.py): API
writes, CPU seconds and the webhook's time as differences of two readings. The /metrics
texts in ``fixtures/scheduler-cost/`` are real scrapes of one ``raygate-native`` burst of
the ``fast`` label (kube-apiserver v1.37.2, kube-scheduler v1.37.2, raygate), cut to the
families the bench reads and a few of their neighbours."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from bench.scheduler_cost import (
    CLK_TCK,
    Reading,
    api_writes,
    client_writes,
    cost,
    cpu_seconds,
    machine_seconds,
    settled,
    writer,
)
from bench.scheduler_report import Run, cost_table, summarise

FIXTURES = Path(__file__).parent / "fixtures" / "scheduler-cost"
BURST = 200
"""Ray pods in the burst the fixtures were scraped around."""


def _metrics(side: str) -> dict[str, str]:
    return {source: (FIXTURES / f"{side}-{source}.txt").read_text()
            for source in ("apiserver", "raygate", "scheduler")}


def _readings() -> tuple[Reading, Reading]:
    cpu0 = {"raygate": 10.0, "kube-apiserver": 100.0, "machine": 1000.0}
    cpu1 = {"raygate": 11.5, "kube-apiserver": 104.0, "machine": 1010.0}
    return Reading(0.0, _metrics("before"), cpu0), Reading(4.0, _metrics("after"), cpu1)


def test_writes_are_kube_apiservers_write_verbs_by_resource() -> None:
    after = api_writes(_metrics("after")["apiserver"])
    assert after["pods create"] >= BURST
    assert after["pods/binding create"] >= BURST
    assert not any(key.split()[-1] in ("get", "list", "watch") for key in after)
    assert all(key.split()[-1] in ("create", "update", "patch", "apply", "delete",
                                   "deletecollection") for key in after)


def test_dry_runs_are_not_writes() -> None:
    line = ('apiserver_request_total{code="201",component="apiserver",dry_run="All",'
            'group="",resource="pods",scope="resource",subresource="",verb="POST",'
            'version="v1"} 7\n')
    text = "# TYPE apiserver_request_total counter\n" + line
    assert api_writes(text) == {}
    assert api_writes(text.replace('dry_run="All"', 'dry_run=""')) == {"pods create": 7.0}


def test_the_burst_costs_one_create_and_one_bind_per_pod() -> None:
    before, after = _readings()
    got = cost(before, after, BURST)
    assert got.writes["pods create"] == 1.0
    assert got.writes["pods/binding create"] == 1.0
    assert got.writers["creator"] == 1.0
    assert got.writers["total"] == pytest.approx(sum(got.writes.values()))
    assert got.writers["total"] == pytest.approx(
        sum(v for k, v in got.writers.items() if k != "total"))
    # kube-scheduler's own count of its writes is what the API server counted of them.
    assert got.scheduler_writes == pytest.approx(got.writers["kube-scheduler"])
    assert got.cpu == {"raygate": 7.5, "kube-apiserver": 20.0, "machine": 50.0}
    assert got.seconds == 4.0


def test_the_webhook_as_kube_apiserver_waited_for_it() -> None:
    got = cost(*_readings(), BURST)
    assert got.webhook_calls == 1.0  # the dry-run probe before the window is not counted
    p50, p99 = got.webhook_ms
    assert 5 < p50 <= p99 <= 500 and 5 < got.webhook_mean_ms < 500


def _webhook_route(name: str, fast: int, slow: int, **labels: str) -> str:
    """A histogram of raygate's exposition with ``fast`` requests under 1 ms and ``slow``
    ones under 100 ms (as raygate prints it: every bucket, the sum)."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    sep = "," if inner else ""
    return "\n".join([f"# TYPE {name} histogram",
                      f'{name}_bucket{{{inner}{sep}le="0.001"}} {fast}',
                      f'{name}_bucket{{{inner}{sep}le="0.1"}} {fast + slow}',
                      f'{name}_bucket{{{inner}{sep}le="+Inf"}} {fast + slow}',
                      f"{name}_count{{{inner}}} {fast + slow}",
                      f"{name}_sum{{{inner}}} {0.0005 * fast + 0.05 * slow}"]) + "\n"


def test_raygates_own_webhook_time_from_its_route() -> None:
    before, after = _readings()
    # The scrapes of the fixtures: raygate does not time its webhook listener's routes.
    got = cost(before, after, BURST)
    assert got.raygate_webhook_source == (
        'raygate_request_duration_seconds{route="/mutate/ray-pods"}')
    assert all(math.isnan(v) for v in (*got.raygate_webhook_ms, got.raygate_webhook_mean_ms))
    name = "raygate_request_duration_seconds"
    before.metrics["raygate"] += _webhook_route(name, 10, 0, route="/mutate/ray-pods")
    after.metrics["raygate"] += _webhook_route(name, 10 + BURST, 0, route="/mutate/ray-pods")
    got = cost(before, after, BURST)
    assert 0 < got.raygate_webhook_ms[0] <= got.raygate_webhook_ms[1] <= 1.0
    assert got.raygate_webhook_mean_ms == pytest.approx(0.5)


def test_raygates_dedicated_webhook_histogram_is_preferred() -> None:
    name = "raygate_webhook_duration_seconds"
    before, after = _readings()
    before.metrics["raygate"] += _webhook_route(name, 0, 0, result="decided")
    after.metrics["raygate"] += _webhook_route(name, BURST // 2, BURST // 2, result="decided")
    got = cost(before, after, BURST)
    assert got.raygate_webhook_source == name
    assert got.raygate_webhook_ms[0] == pytest.approx(1.0)
    assert 1.0 < got.raygate_webhook_ms[1] <= 100.0
    assert got.raygate_webhook_mean_ms == pytest.approx(25.25)


def test_no_webhook_no_scheduler_scrape() -> None:
    got = cost(Reading(0.0, {"apiserver": ""}), Reading(1.0, {"apiserver": ""}), BURST)
    assert got.writes == {} and got.writers == {"total": 0.0}
    assert math.isnan(got.scheduler_writes) and got.webhook_calls == 0.0
    assert all(math.isnan(v) for v in (*got.webhook_ms, *got.raygate_webhook_ms))


def test_writers() -> None:
    assert writer("pods create") == "creator"
    assert writer("pods/binding create") == "kube-scheduler"
    assert writer("pods patch") == "raygate"
    assert writer("leases update") == "background"
    assert writer("configmaps create") == "other"


def test_client_writes_count_the_write_methods() -> None:
    text = "\n".join(["# TYPE rest_client_requests_total counter",
                      'rest_client_requests_total{code="201",host="h",method="POST"} 3',
                      'rest_client_requests_total{code="200",host="h",method="PATCH"} 2',
                      'rest_client_requests_total{code="200",host="h",method="GET"} 50']) + "\n"
    assert client_writes(text) == 5.0
    assert client_writes(_metrics("after")["scheduler"]) > client_writes(
        _metrics("before")["scheduler"])


def test_cpu_seconds_read_proc_stat(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    # The command name is in parentheses and may hold spaces and parentheses itself.
    fields = ["S", "1", "42", "42", "0", "-1", "4194560", "10", "0", "0", "0",
              str(3 * CLK_TCK), str(CLK_TCK), "0", "0", "20", "0", "9"]
    (tmp_path / "42" / "stat").write_text("42 (kube (odd) one) " + " ".join(fields) + "\n")
    assert cpu_seconds(42, str(tmp_path)) == 4.0
    assert math.isnan(cpu_seconds(43, str(tmp_path))) and math.isnan(cpu_seconds(None))
    assert cpu_seconds(os.getpid()) > 0


def test_machine_seconds_leave_out_idle_and_iowait(tmp_path: Path) -> None:
    ticks = [1, 2, 3, 1000, 500, 4, 5, 6, 0, 0]
    (tmp_path / "stat").write_text(
        "cpu  " + " ".join(str(t * CLK_TCK) for t in ticks) + "\ncpu0 1 2 3\n")
    assert machine_seconds(str(tmp_path)) == 21.0
    assert machine_seconds() > 0


def test_settled_waits_for_the_writes_to_stop() -> None:
    def text(pods: int, leases: int) -> str:
        return "\n".join([
            "# TYPE apiserver_request_total counter",
            f'apiserver_request_total{{dry_run="",resource="events",subresource="",'
            f'verb="POST"}} {pods}',
            f'apiserver_request_total{{dry_run="",resource="leases",subresource="",'
            f'verb="PUT"}} {leases}']) + "\n"

    # Events still coming, then only a lease renewed: settled at the third scrape.
    scrapes = iter([text(10, 1), text(15, 1), text(15, 2), text(99, 9)])
    assert settled(lambda: next(scrapes), every=0.0) == text(15, 2)


def test_the_cost_table() -> None:
    before, after = _readings()
    run = Run(500, "raygate-native", 1, BURST, 4.0, 50.0, 1, 2, 1, 2, bind_ms=(100.0, 300.0),
              gated=0, cost=cost(before, after, BURST))
    table = cost_table(summarise([run]))
    row = table.splitlines()[-1]
    assert row.startswith("| 500 | raygate-native | 50.0 | 100 / 300 | 0 | ")
    assert "pods create 1.00" in row and "pods/binding create 1.00" in row
    assert "7.50 / — / 20.00 / — / — (50.00)" in row


def test_raygates_events_are_counted_as_its_writes() -> None:
    """kube-apiserver counts every Event as one resource; raygate's own count of the Events
    it wrote (created and series patches, not those folded in memory) moves them to it."""
    before, after = _readings()
    plain = cost(before, after, BURST)
    after.metrics["raygate"] += (
        "# TYPE raygate_events counter\n"
        'raygate_events_total{reason="Held",outcome="created"} 8.0\n'
        'raygate_events_total{reason="Held",outcome="series"} 2.0\n'
        'raygate_events_total{reason="Held",outcome="folded"} 30.0\n')
    got = cost(before, after, BURST)
    assert got.raygate_events == pytest.approx(10 / BURST)
    assert got.writers["raygate"] == pytest.approx(plain.writers["raygate"] + 10 / BURST)
    assert got.writers["kube-scheduler"] == pytest.approx(
        plain.writers["kube-scheduler"] - 10 / BURST)
    assert got.writers["total"] == plain.writers["total"]
