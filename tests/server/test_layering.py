"""raygate's layering, checked by import-linter's contracts in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Every contract of pyproject.toml ran, none skipped.
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout


def test_the_kubernetes_client_contract_names_every_module_but_kube() -> None:
    """A module added to raygate.server is under the contract until someone decides
    otherwise (import-linter has no "everything but")."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    (kube,) = [c for c in contracts if c.get("forbidden_modules") == ["kubernetes", "urllib3"]]
    server = ROOT / "raygate" / "server"
    modules = {f"raygate.server.{p.stem}" for p in server.glob("*.py") if p.stem != "__init__"}
    modules |= {f"raygate.server.{p.parent.name}" for p in server.glob("*/__init__.py")}
    assert set(kube["source_modules"]) == modules - {"raygate.server.kube"}
