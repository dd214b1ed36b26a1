"""The alerts and the Grafana dashboard of deploy/monitoring and the chart, offline: each copy
the same, and every PromQL expression reading only series raygate really exports (its
metrics registry, started in-process and scraped) or ray-scheduler's kube-scheduler really
exports (the names below, checked against Kubernetes' source when its module is on this
machine), besides Prometheus' own ``up``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.metrics.collectors import AuthzCounts, sync_families
from raygate.server.metrics.registry import Metrics
from tests.conftest import FakeClock, ServerThread
from tests.deploy.promql import metric_names
from tests.docs import doc

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
CHART_FILES = ROOT / "deploy" / "helm" / "raygate" / "files"
Obj = dict[str, Any]

KUBERNETES = Path.home() / "go" / "pkg" / "mod" / "k8s.io" / "kubernetes@v1.37.2"
SCHEDULER_METRICS = "pkg/scheduler/metrics/metrics.go"
KUBE_SCHEDULER = {
    # name in metrics.go (Subsystem "scheduler"): its type
    "schedule_attempts_total": "counter",
    "scheduling_attempt_duration_seconds": "histogram",
    "pending_pods": "gauge",
    "unschedulable_pods": "gauge",
    "preemption_attempts_total": "counter",
}
"""The kube-scheduler 1.37 series the rules and the dashboard read, each declared in
k8s.io/kubernetes@v1.37.2/pkg/scheduler/metrics/metrics.go (``Subsystem:
SchedulerSubsystem``, ``Name: "..."``): ray-scheduler runs that release."""
PROMETHEUS = {"up"}
"""What Prometheus itself writes for every target it scrapes."""

RULE_FILES = [("raygate.rules.yaml", MONITORING / "prometheusrule.yaml"),
              ("ray-scheduler.rules.yaml", MONITORING / "ray-scheduler" / "prometheusrule.yaml")]


def _sample_names(families: Iterable[Metric]) -> set[str]:
    """The series names of each family, as the text exposition spells them."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
                                                                "_created"),
                "summary": ("", "_count", "_sum"), "info": ("_info",)}
    return {family.name + suffix for family in families
            for suffix in suffixes.get(family.type, ("",))}


class _SyncFamilies(Collector):
    """The list/watch families, which a server following no cluster leaves out."""

    def collect(self) -> Iterator[Metric]:
        yield from sync_families([])


@pytest.fixture(scope="module")
def raygate_series() -> set[str]:
    """Every series name a raygate serves: a real server's GET /metrics, and the families
    that only a cluster-following, authorizing, scale-up-holding raygate registers."""
    server = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock())
    server.start()
    try:
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    finally:
        server.stop()
    more = Metrics()
    more.watch_authz(AuthzCounts())
    more.watch_scale_ups(dict)
    more.registry.register(_SyncFamilies())
    names = _sample_names(text_string_to_metric_families(text))
    names |= _sample_names(text_string_to_metric_families(more.exposition().decode()))
    return names


def kube_scheduler_series() -> set[str]:
    names: set[str] = set()
    for name, kind in KUBE_SCHEDULER.items():
        suffixes = ("_bucket", "_count", "_sum") if kind == "histogram" else ("",)
        names |= {f"scheduler_{name}{suffix}" for suffix in suffixes}
    return names


def rule_groups(path: Path) -> list[Obj]:
    groups: list[Obj] = yaml.safe_load(path.read_text())["groups"]
    return groups


def rules() -> list[Obj]:
    return [rule for plain, _ in RULE_FILES
            for group in rule_groups(CHART_FILES / plain) for rule in group["rules"]]


def dashboard() -> Obj:
    loaded: Obj = json.loads((MONITORING / "raygate-dashboard.json").read_text())
    return loaded


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"]
            for target in panel.get("targets", [])]


EXPRESSIONS = [(f"rule {r['alert']}", r["expr"]) for r in rules()] + [
    (f"dashboard {i}", expr) for i, expr in enumerate(dashboard_exprs())]


@pytest.mark.parametrize(("plain", "operator"), RULE_FILES, ids=[p for p, _ in RULE_FILES])
def test_every_copy_of_the_rules_is_the_same(plain: str, operator: Path) -> None:
    """deploy/monitoring's plain rule file, its PrometheusRule's spec and the chart's file."""
    here = next(MONITORING.rglob(plain))
    assert (CHART_FILES / plain).read_bytes() == here.read_bytes()
    assert yaml.safe_load(operator.read_text())["spec"] == {"groups": rule_groups(here)}


def test_the_chart_renders_its_files() -> None:
    """The chart's templates read the files above (helm renders them: e2e/test_chart.py)."""
    templates = ROOT / "deploy" / "helm" / "raygate" / "templates"
    rule = (templates / "prometheusrule.yaml").read_text()
    assert '"files/raygate.rules.yaml"' in rule and '"files/ray-scheduler.rules.yaml"' in rule
    assert '"files/raygate-dashboard.json"' in (templates / "grafana-dashboard.yaml").read_text()


def test_the_chart_ships_the_dashboard_kustomize_does() -> None:
    assert (CHART_FILES / "raygate-dashboard.json").read_bytes() == \
        (MONITORING / "raygate-dashboard.json").read_bytes()
    component = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    (generator,) = component["configMapGenerator"]
    assert generator["files"] == ["raygate-dashboard.json"]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    chart = yaml.safe_load((ROOT / "deploy/helm/raygate/values.yaml").read_text())
    assert chart["metrics"]["grafanaDashboard"]["labels"] == {"grafana_dashboard": "1"}


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_every_expression_reads_series_that_exist(where: str, expr: str,
                                                  raygate_series: set[str]) -> None:
    names = metric_names(expr)
    assert names, where
    unknown = names - raygate_series - kube_scheduler_series() - PROMETHEUS
    assert not unknown, f"{where} reads series nothing exports: {sorted(unknown)}"


def test_raygates_absence_pages() -> None:
    """raygate fails open, so only an alert on its absence says it is gone: a crash loop
    or an image that cannot be pulled leaves no target up (``absent(up == 1)``), a scrape
    that selects nothing leaves no series (``absent_over_time``); each on the job the
    ServiceMonitors make, the Service's name."""
    by_name = {r["alert"]: r for r in rules()}
    assert by_name["RaygateDown"]["expr"] == 'absent(up{job="raygate"} == 1)'
    assert by_name["RaygateDown"]["labels"]["severity"] == "critical"
    assert by_name["RaySchedulerDown"]["expr"] == 'absent(up{job="ray-scheduler"} == 1)'
    assert metric_names(by_name["RaygateSeriesAbsent"]["expr"]) == {"raygate_build_info"}
    monitors = {m["metadata"]["name"]: m for path in MONITORING.rglob("*.yaml")
                for m in yaml.safe_load_all(path.read_text())
                if m and m.get("kind") == "ServiceMonitor"}
    assert {name: m["spec"]["selector"]["matchLabels"] for name, m in monitors.items()} == {
        "raygate": {"app.kubernetes.io/name": "raygate"},
        "ray-scheduler": {"app.kubernetes.io/name": "ray-scheduler"}}


def test_ray_scheduler_is_scraped_on_its_secure_port_with_a_token() -> None:
    (service, monitor) = yaml.safe_load_all((MONITORING / "ray-scheduler" / "scrape.yaml")
                                            .read_text())
    assert service["spec"]["clusterIP"] == "None"
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == 10259
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == (
        port["name"], "https", "/metrics")
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_the_kube_scheduler_names_are_its_own() -> None:
    source = KUBERNETES / SCHEDULER_METRICS
    if not source.exists():
        pytest.skip(f"{source}: not fetched (make testbed fetches it)")
    text = source.read_text()
    assert "SchedulerSubsystem = \"scheduler\"" in text
    for name in KUBE_SCHEDULER:
        assert f'Name:           "{name}"' in text or f'Name:      "{name}"' in text, name


def test_operations_md_names_the_alerts_and_the_files() -> None:
    operations = doc("operations.md")
    for rule in rules():
        assert f"`{rule['alert']}`" in operations, rule["alert"]
        for name in metric_names(rule["expr"]) - PROMETHEUS:
            assert name.removesuffix("_bucket") in operations, f"{rule['alert']}: {name}"
    for path in ("deploy/monitoring", "raygate-dashboard.json", "metrics.kubeScheduler",
                 "metrics.grafanaDashboard"):
        assert path in operations, path


@pytest.mark.parametrize(("expr", "names"), [
    ("raygate_cache_ready == 0", {"raygate_cache_ready"}),
    ("max by (pod) (a_b) > 600", {"a_b"}),
    ('histogram_quantile(0.99, sum by (le) (rate(x_bucket{route="/s/{f}"}[5m])))', {"x_bucket"}),
    ('absent(up{job="raygate"} == 1)', {"up"}),
    ("a / on (pod) group_left (version) b", {"a", "b"}),
    ("sum(rate(x[$__rate_interval])) or vector(0)", {"x"}),
    ("rate(x[5m] offset 1h) unless y", {"x", "y"}),
    ("sum without (le) (x) and bool y", {"x", "y"}),
    ('label_replace(x, "dst", "$1", "src", "(.*)")', {"x"}),
    ("increase(x{r='f'}[1h]) > 0", {"x"}),
    ("absent_over_time(raygate_build_info[15m])", {"raygate_build_info"}),
    ("ns:rule:rate5m * 2e3", {"ns:rule:rate5m"}),
])
def test_metric_names_reads_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize(("expr", "refusal"), [
    ('{__name__="x"}', "a selector without a metric name"),
    ("rates(x[5m])", "rates() is no PromQL function"),
    ("sum(x", "unclosed"),
    ("a) + (b", "unbalanced"),
    ("x # y", "cannot read"),
])
def test_metric_names_refuses_what_it_cannot_read(expr: str, refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        metric_names(expr)
