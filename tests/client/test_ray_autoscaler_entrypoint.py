"""raygate's autoscaler entrypoint with the real Ray 2.60.0 installed: the Ray versions it
accepts (and the extra that pins them), the hooks it installs around the stock
autoscaler and takes out again, and the settings it refuses to start with.

Marked ``ray``: skipped when Ray is not installed, except under ``make test-ray`` (CI),
which installs it and fails if it is missing.
"""

from __future__ import annotations

import functools
import importlib
import sys
import tomllib
from pathlib import Path

import pytest

from tests.ray_required import RAY_MISSING

if RAY_MISSING:
    pytest.skip(RAY_MISSING, allow_module_level=True)

from raygate.ray_autoscaler import TESTED_RAY_VERSIONS

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


def test_a_ray_version_it_was_not_tested_with_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from raygate.ray_autoscaler import provider

    monkeypatch.setattr(ray, "__version__", "2.61.0")
    monkeypatch.delitem(sys.modules, "raygate.ray_autoscaler.provider")
    with pytest.raises(ImportError) as error:
        importlib.import_module("raygate.ray_autoscaler.provider")
    assert str(error.value).startswith(
        "raygate's autoscaler integration is tested with Ray 2.60.0 and relies on its "
        "private interfaces; this is Ray 2.61.0.")
    monkeypatch.setitem(sys.modules, "raygate.ray_autoscaler.provider", provider)


def test_the_extra_pins_the_tested_versions() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["ray"] == [
        f"ray=={v}" for v in TESTED_RAY_VERSIONS]
    import ray

    assert ray.__version__ in TESTED_RAY_VERSIONS


def test_the_entrypoint_installs_the_hooks_and_runs_the_stock_autoscaler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.autoscaler._private.kuberay import run_autoscaler
    from ray.autoscaler.v2 import autoscaler as ray_autoscaler
    from ray.autoscaler.v2.instance_manager.cloud_providers.kuberay.cloud_provider import (
        KubeRayProvider,
    )
    from ray.autoscaler.v2.instance_manager.reconciler import Reconciler

    from raygate.ray_autoscaler.cli import main
    from raygate.ray_autoscaler.provider import AdmissionAwareKubeRayProvider

    shipped = Reconciler.__dict__["_handle_stuck_instance"]
    calls = []

    def run_kuberay_autoscaler(name: str, namespace: str, gcs: str | None) -> None:
        factory = ray_autoscaler.KubeRayProvider
        assert isinstance(factory, functools.partial)
        assert factory.func is AdmissionAwareKubeRayProvider
        assert Reconciler.__dict__["_handle_stuck_instance"] is not shipped
        calls.append((name, namespace, gcs))

    monkeypatch.setattr(run_autoscaler, "run_kuberay_autoscaler", run_kuberay_autoscaler)
    monkeypatch.setenv("RAY_CLUSTER_NAME", "demo")
    monkeypatch.setenv("RAY_CLUSTER_NAMESPACE", "ray")
    monkeypatch.setenv("RAYGATE_URL", "grpc://raygate.raygate-system:9090")
    assert main([]) == 0
    assert main(["--cluster-name", "other", "--gcs-address", "10.0.0.9:6379"]) == 0
    assert calls == [("demo", "ray", None), ("other", "ray", "10.0.0.9:6379")]
    # Back as shipped once the autoscaler returns.
    assert ray_autoscaler.KubeRayProvider is KubeRayProvider
    assert Reconciler.__dict__["_handle_stuck_instance"] is shipped


def test_the_entrypoint_refuses_bad_settings(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from raygate.ray_autoscaler.cli import main

    monkeypatch.delenv("RAY_CLUSTER_NAME", raising=False)
    monkeypatch.setenv("RAY_CLUSTER_NAMESPACE", "ray")
    monkeypatch.setenv("RAYGATE_URL", "raygate:8888")
    monkeypatch.setenv("RAYGATE_TIMEOUT_SECONDS", "0")
    assert main([]) == 2
    assert capsys.readouterr().err == (
        "raygate-autoscaler: refusing to start:\n"
        "  --cluster-name: required (or $RAY_CLUSTER_NAME)\n"
        "  RAYGATE_URL: expected http://, https://, grpc:// or grpcs:// and a host, got "
        "'raygate:8888'\n"
        "  RAYGATE_TIMEOUT_SECONDS: expected a number of seconds > 0, got '0'\n")
