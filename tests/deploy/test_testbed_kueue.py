"""The testbed's Kueue as Kueue ships (``testbed.kueue``): its Ray integrations on, and the
webhooks of each in front of the API server, read from Kueue's own manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.build import COMPONENTS
from testbed.kueue import _webhook_configurations, configuration

pytestmark = pytest.mark.skipif(
    not (COMPONENTS["kueue"].path("webhook") / "manifests.yaml").is_file(),
    reason="Kueue's manifests are built with the testbed (make testbed)")


def test_the_ray_integrations_are_on_as_kueue_ships_them() -> None:
    config = configuration(Path("/certs"), 1, 2, 3)
    assert config["integrations"]["frameworks"] == [
        "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster"]
    assert config["featureGates"]["ElasticJobsViaWorkloadSlices"] is True


def test_each_ray_integration_has_its_webhooks_and_nothing_else_is_kept() -> None:
    kept = {d["metadata"]["name"]: sorted(w["name"] for w in d["webhooks"])
            for d in _webhook_configurations("https://127.0.0.1:1", "Q0E=")}
    ray = {name: [w for w in webhooks if "ray" in w] for name, webhooks in kept.items()}
    assert ray == {
        "kueue-mutating-webhook-configuration": [
            "mraycluster.kb.io", "mrayjob.kb.io", "mrayservice.kb.io"],
        "kueue-validating-webhook-configuration": [
            "vraycluster.kb.io", "vrayjob.kb.io", "vrayservice.kb.io"]}
    assert not any(w.startswith(("mpod", "vpod", "mjob", "vjob", "mdeployment"))
                   for webhooks in kept.values() for w in webhooks)
