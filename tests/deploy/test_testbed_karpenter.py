"""The testbed's Karpenter pieces that need no cluster: its build's toolchain, the
instance-type file, the NodePools a scenario makes, and the kube-scheduler-default
setup's webhook and scheduler as the testbed rewrites them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testbed import build, webhook
from testbed.build import COMPONENTS
from testbed.karpenter import GPU_LABELS, GPU_TAINT, INSTANCE_TYPES, node_pool


def test_only_karpenters_build_runs_another_go(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, str | None] = {}

    def run(argv: list[str], *, cwd: Path, env: dict[str, str],
            **_: Any) -> subprocess.CompletedProcess[str]:
        seen[cwd.name] = env.get("GOTOOLCHAIN")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.delenv("GOTOOLCHAIN", raising=False)
    monkeypatch.setattr(subprocess, "run", run)  # what build._go calls
    for component in COMPONENTS.values():
        build._go(component, "version")
    assert seen == {name: "go1.27.3" if name == "karpenter" else None for name in COMPONENTS}


def test_karpenters_toolchain_is_new_enough_for_its_go_mod() -> None:
    def release(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    component = COMPONENTS["karpenter"]
    needed = re.search(r"^go (\S+)$", (component.directory / "go.mod").read_text(), re.M)
    assert needed is not None
    assert release(component.toolchain.removeprefix("go")) >= release(needed[1])
    assert component.version == "v1.15.0"


def test_the_toolchain_is_part_of_the_pin() -> None:
    component = COMPONENTS["karpenter"]
    other = build.Component(component.name, component.module, component.commands,
                            component.data, toolchain="go1.27.4")
    assert other.pin != component.pin


def test_instance_types_have_cpu_and_gpu_types_in_the_providers_shape() -> None:
    entries = [t.options() for t in INSTANCE_TYPES]
    gpu = [e for e in entries if "nvidia.com/gpu" in e["resources"]]
    assert gpu and len(gpu) < len(entries)
    for entry in entries:
        (offering,) = entry["offerings"]
        # The provider reads these keys capitalized (its Offering struct has no JSON tags).
        assert set(offering) == {"Price", "Available", "Requirements"}
        assert {r["key"] for r in offering["Requirements"]} == {
            "karpenter.sh/capacity-type", "topology.kubernetes.io/zone"}


def test_a_gpu_pool_carries_the_taint_and_labels_and_wins_a_name_tie() -> None:
    scope = {"testbed.raygate.dev/scenario": "s"}
    cpu = node_pool("cpu-s", scope, ["cpu-4x"])
    gpu = node_pool("gpu-s", scope, ["gpu-8x"], gpu=True)
    assert gpu["spec"]["template"]["spec"]["taints"] == [GPU_TAINT]
    assert gpu["spec"]["template"]["metadata"]["labels"] == {**scope, **GPU_LABELS}
    assert "taints" not in cpu["spec"]["template"]["spec"]
    assert cpu["spec"]["template"]["metadata"]["labels"] == scope
    # Karpenter orders pools of equal weight by name, descending.
    assert cpu["spec"]["weight"] == gpu["spec"]["weight"]
    assert sorted(["cpu-s", "gpu-s"], reverse=True)[0] == "gpu-s"


def test_the_webhook_is_called_by_url_in_the_namespaces_selected(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"CA")
    selector = {"matchLabels": {"x": "true"}}
    configuration = webhook.webhook_configuration("name", "https://127.0.0.1:1", ca, selector)
    assert configuration["metadata"] == {"name": "name"}  # no cert-manager injection
    (hook,) = configuration["webhooks"]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:1/mutate/ray-pods",
                                    "caBundle": "Q0E="}
    assert hook["namespaceSelector"] == selector
    assert hook["objectSelector"] == {"matchLabels": {"ray.io/is-ray-node": "yes"}}
