"""The client side is light: what Ray's Python gets with ``pip install raygate[ray]`` and
loads for ``raygate.client`` and ``raygate-autoscaler`` is raygate's contract and three
libraries, nothing of the server nor of what the server needs."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SERVER_ONLY = ("uvicorn", "uvloop", "httptools", "kubernetes", "urllib3", "yaml",
               "immutables", "prometheus_client", "jsonschema")
"""What only the server imports (the ``server`` extra's modules)."""


def _distribution(requirement: str) -> str:
    """The distribution a PEP 508 requirement names, normalized (PEP 503)."""
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found is not None, requirement
    return re.sub(r"[-_.]+", "-", found.group()).lower()


def test_the_client_side_loads_nothing_of_the_server() -> None:
    # A fresh interpreter: this one has loaded the server for other tests. Run from the
    # checkout, so that its raygate is the one imported.
    code = ("import raygate.client, raygate.ray_autoscaler.advice, raygate.ray_autoscaler.cli,"
            " sys; print(sorted(sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    loaded = set(ast.literal_eval(result.stdout))
    assert "raygate.client" in loaded and "raygate.ray_autoscaler.cli" in loaded
    assert sorted(m for m in loaded if m == "raygate.server" or m.startswith("raygate.server.")
                  ) == []
    assert sorted(m for m in loaded if m.split(".")[0] in SERVER_ONLY) == []


def test_raygate_itself_depends_on_msgspec_grpcio_and_protobuf_only() -> None:
    """``[project] dependencies``: what ``pip install raygate[ray]`` brings besides Ray;
    the server's own are the ``server`` extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {_distribution(d) for d in project["dependencies"]} == {
        "msgspec", "grpcio", "protobuf"}
    server = {_distribution(d) for d in project["optional-dependencies"]["server"]}
    assert server >= {"uvicorn", "uvloop", "httptools", "kubernetes", "urllib3", "pyyaml",
                      "immutables", "prometheus-client", "jsonschema",
                      "grpcio-health-checking", "grpcio-reflection"}
    assert {_distribution(d) for d in project["optional-dependencies"]["ray"]} == {"ray"}
