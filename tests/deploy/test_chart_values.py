"""The chart's values.schema.json, checked without helm: every documented values file is
accepted, the mistakes helm used to pass silently are refused with the key named, and the
schema's `config:` is raygate's own config file, key for key (e2e/test_chart.py has the
real helm apply the same schema, and renders and dry-runs every file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from raygate.policy.config import PolicyConfig, policy_config_to_mapping
from raygate.server.config.settings import BY_KEY

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "raygate"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
# The listeners' addresses are the Deployments' args, beside the containerPorts they must
# match: a file key would be overridden by the flag, so the chart refuses it.
SET_BY_ARGS = {"httpAddr", "grpcAddr", "webhook.addr", "webhook.cert", "webhook.key"}
Obj = dict[str, Any]


def coalesce(base: Any, override: Any) -> Any:
    """Helm's merge of a values file over values.yaml: maps merge, anything else replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {**base, **{k: coalesce(base.get(k), v) for k, v in override.items()}}
    return override


def errors(values: Obj) -> list[str]:
    validator = Draft7Validator(SCHEMA)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(coalesce(DEFAULTS, values))]


def test_the_schema_is_valid_json_schema() -> None:
    Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize("path", VALUES, ids=[p.name for p in VALUES])
def test_every_values_file_is_accepted(path: Path) -> None:
    assert errors(yaml.safe_load(path.read_text())) == []


def test_the_defaults_are_accepted_and_every_key_is_declared() -> None:
    assert errors({}) == []

    def declared(values: Any, schema: Obj, path: str) -> None:
        if isinstance(values, dict) and "properties" in schema:
            for key, value in values.items():
                assert key in schema["properties"], f"{path}{key} is not in the schema"
                declared(value, schema["properties"][key], f"{path}{key}.")
    declared(DEFAULTS, SCHEMA, "")


@pytest.mark.parametrize(("values", "where"), [
    ({"podAntiAfinity": "required"}, "'podAntiAfinity' was unexpected"),
    ({"replicas": "two"}, "replicas: 'two' is not of type 'integer'"),
    ({"replicas": 0}, "replicas: 0 is less than the minimum of 1"),
    ({"config": {"server": {"limits": {"maxBodyByte": 1}}}}, "'maxBodyByte' was unexpected"),
    ({"config": {"server": {"log": {"level": "verbose"}}}}, "config.server.log.level"),
    ({"config": {"server": {"httpAddr": "0.0.0.0:80"}}}, "'httpAddr' was unexpected"),
    ({"config": {"server": {"tls": {"cert": "/x.pem"}}}}, "config.server.tls.cert"),
    ({"config": {"policy": {"gpuNodesForSurplus": "sometimes"}}},
     "config.policy.gpuNodesForSurplus"),
    ({"kubeScheduler": {"image": "registry.k8s.io/kube-scheduler:v1.37.2"}},
     "kubeScheduler.image: 'registry.k8s.io/kube-scheduler:v1.37.2' is not of type 'object'"),
    ({"image": {"digest": "0123"}}, "image.digest"),
    ({"extraArgs": ["serve"]}, "extraArgs.0"),
    ({"nameOverride": "rg"}, "'nameOverride' was unexpected"),
    ({"podLabels": {"app.kubernetes.io/name": "x"}}, "podLabels"),
    # registry.k8s.io tags kube-scheduler v1.37.2: without the v, or "latest", the pull fails.
    ({"kubeScheduler": {"image": {"tag": "1.37.2"}}}, "kubeScheduler.image.tag"),
    ({"kubeScheduler": {"image": {"tag": "latest"}}}, "kubeScheduler.image.tag"),
    ({"kubeScheduler": {"image": {"tag": "v1.37"}}}, "kubeScheduler.image.tag"),
    ({"metrics": {"kubeScheduler": {"serviceMonitor": {"interval": "30"}}}},
     "metrics.kubeScheduler.serviceMonitor.interval"),
    ({"metrics": {"grafanaDashboard": {"enable": True}}}, "'enable' was unexpected"),
])
def test_mistakes_are_refused_with_their_key(values: Obj, where: str) -> None:
    found = errors(values)
    assert any(where in e for e in found), found


@pytest.mark.parametrize("tag", ["", "v1.37.2", "v1.38.0-rc.1", "v1.37.2@sha256:" + "0" * 64])
def test_kube_scheduler_tags_as_the_registry_spells_them(tag: str) -> None:
    assert errors({"kubeScheduler": {"image": {"tag": tag}}}) == []


def _leaves(schema: Obj, prefix: str = "") -> set[str]:
    leaves: set[str] = set()
    for key, sub in schema["properties"].items():
        if sub.get("type") == "object" and "properties" in sub:
            leaves |= _leaves(sub, f"{prefix}{key}.")
        else:
            leaves.add(prefix + key)
    return leaves


def test_the_config_schema_is_raygates_config_file() -> None:
    """config.server: every key of the settings table but the listeners; config.policy:
    every key of the policy section (a key raygate adds must be added here)."""
    config = SCHEMA["properties"]["config"]["properties"]
    assert _leaves(config["server"]) == set(BY_KEY) - SET_BY_ARGS
    assert set(config["policy"]["properties"]) == set(policy_config_to_mapping(PolicyConfig()))
    for section in (config["server"], config["policy"]):
        assert section["additionalProperties"] is False


@pytest.mark.parametrize("path", VALUES, ids=[p.name for p in VALUES])
def test_no_values_file_ships_a_made_up_digest(path: Path) -> None:
    """A digest in a values file must be one a registry could serve: none is published
    yet, so none at all (production-values.yaml says how to pin one)."""
    digest = coalesce(DEFAULTS, yaml.safe_load(path.read_text()))["image"]["digest"]
    assert digest == "" or len(set(digest.removeprefix("sha256:"))) > 4, digest
