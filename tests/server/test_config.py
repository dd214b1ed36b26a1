from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raygate.contract.command import ConfigError
from raygate.policy.config import (
    GpuNodesForSurplus,
    PolicyConfig,
    policy_config_from_mapping,
    policy_config_to_mapping,
)
from raygate.server.config.file import load_config_file
from raygate.server.config.settings import parse_addr


def test_defaults() -> None:
    config = policy_config_from_mapping({})
    assert config == PolicyConfig()
    assert "nvidia.com/gpu" in config.gpu_resources
    assert config.gpu_node_labels == {"nvidia.com/gpu.present": "true"}
    assert config.thrash_guard_seconds == 300
    assert config.gpu_nodes_for_surplus is GpuNodesForSurplus.SURPLUS


def test_every_setting_is_read() -> None:
    config = policy_config_from_mapping({
        "gpuResources": ["example.com/accel"],
        "gpuNodeLabels": {"accel": "yes"},
        "thrashGuardSeconds": 60,
        "gpuNodesForSurplus": "never",
        "volcanoScoreScale": 5,
        "gpuDrivers": ["accel.example.com"],
        "gpuDeviceClasses": ["accel"],
    })
    assert config == PolicyConfig(("example.com/accel",), {"accel": "yes"},
                                  ("accel.example.com",), ("accel",), 60.0,
                                  GpuNodesForSurplus.NEVER, 5.0)
    assert policy_config_from_mapping(policy_config_to_mapping(config)) == config


BAD: list[tuple[dict[str, Any], str]] = [
    ({"gpuResources": "nvidia.com/gpu"}, "policy.gpuResources: expected a list"),
    ({"gpuResources": [""]}, "policy.gpuResources: expected a list of non-empty strings"),
    ({"gpuNodeLabels": {"nvidia.com/gpu.present": True}}, "policy.gpuNodeLabels: expected"),
    ({"thrashGuardSeconds": -1}, "policy.thrashGuardSeconds: expected a number of seconds"),
    ({"thrashGuardSeconds": True}, "policy.thrashGuardSeconds"),
    ({"gpuNodesForSurplus": "sometimes"}, "expected one of never, surplus, always"),
    ({"thrashGuard": 5}, "policy.thrashGuard: unknown setting"),
    ({"volcanoScoreScale": float("inf")}, "policy.volcanoScoreScale: expected a number"),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m for _, m in BAD])
def test_refuses_bad_settings_with_their_path(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="invalid configuration") as err:
        policy_config_from_mapping(data)
    assert any(message in problem for problem in err.value.problems), err.value.problems


def test_reports_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        policy_config_from_mapping({"thrashGuardSeconds": "x", "gpuNodesForSurplus": 1, "a": 1})
    assert len(err.value.problems) == 3


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "raygate.yaml"
    path.write_text("policy:\n  thrashGuardSeconds: 30\n  gpuNodesForSurplus: always\n")
    config = load_config_file(str(path))
    assert config.thrash_guard_seconds == 30
    assert config.gpu_nodes_for_surplus is GpuNodesForSurplus.ALWAYS
    path.write_text("polcy: {}\n")
    with pytest.raises(ConfigError, match="polcy: unknown section"):
        load_config_file(str(path))
    path.write_text("policy:\n  thrashGuardSeconds: [1]\n")
    with pytest.raises(ConfigError, match=r"raygate.yaml: policy.thrashGuardSeconds"):
        load_config_file(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(("addr", "expected"), [
    ("0.0.0.0:8888", ("0.0.0.0", 8888)),
    ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::1]:9090", ("::1", 9090)),
    (":8080", ("0.0.0.0", 8080)),
])
def test_parse_addr(addr: str, expected: tuple[str, int]) -> None:
    assert parse_addr(addr, "--http-addr") == expected


@pytest.mark.parametrize("addr", ["8888", "host:", "host:99999", "host:http"])
def test_parse_addr_refuses(addr: str) -> None:
    with pytest.raises(ConfigError, match="--http-addr: expected HOST:PORT"):
        parse_addr(addr, "--http-addr")


def test_config_file_with_a_server_section(tmp_path: Path) -> None:
    # `raygate check` and `explain` read the policy of the file `serve` reads: its server
    # section is checked too, but paths in it need not exist where check runs.
    path = tmp_path / "raygate.yaml"
    path.write_text("server:\n  tls: {cert: /in/the/pod.crt, key: /in/the/pod.key}\n"
                    "policy:\n  thrashGuardSeconds: 30\n")
    assert load_config_file(str(path)).thrash_guard_seconds == 30
    path.write_text("server:\n  limits: {maxBodyBytes: -1}\npolicy: {thrashGuard: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_config_file(str(path))
    assert [p.removeprefix(f"{path}: ") for p in err.value.problems] == [
        "server.limits.maxBodyBytes: expected a positive integer, got -1",
        "policy.thrashGuard: unknown setting",
    ]
