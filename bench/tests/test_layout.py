"""The shape issue #29 asked of ``bench/``: ``tests/`` and ``bench/`` never import each
other (both may import ``testkit``), and no function in ``bench/`` runs over 50 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 50


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(("top", "other"), [("tests", "bench"), ("bench", "tests"),
                                            ("testkit", "bench"), ("testkit", "tests")])
def test_one_tree_never_imports_the_other(top: str, other: str) -> None:
    importing = sorted(str(p.relative_to(ROOT)) for p in (ROOT / top).rglob("*.py")
                       if other in _imported(p))
    assert importing == []


def test_no_function_in_bench_is_over_50_lines() -> None:
    long = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} {lines}")
    assert long == []
