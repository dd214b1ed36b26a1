"""The sizes the project claims, kept: no production file of raygate/ over 400 lines (the
generated protobuf code of raygate/contract/proto aside), no function or method over 50
lines (from ``def`` to its last line, decorators not counted), README.md at most 250
lines."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "raygate"
GENERATED = PACKAGE / "contract" / "proto"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50
MAX_README_LINES = 250


def _production_files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if not path.is_relative_to(GENERATED))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def _function_lengths(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function and method of ``path``."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                name = f"{prefix}{child.name}"
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return found


def test_the_package_is_found() -> None:
    files = _production_files()
    assert PACKAGE / "policy" / "placement.py" in files
    assert not any(path.is_relative_to(GENERATED) for path in files)


def test_no_production_file_is_over_400_lines() -> None:
    over = {str(path.relative_to(REPO)): lines for path in _production_files()
            if (lines := _lines(path)) > MAX_FILE_LINES}
    assert over == {}


def test_no_function_is_over_50_lines() -> None:
    over = [f"{path.relative_to(REPO)}:{line} {name}: {length} lines"
            for path in _production_files()
            for name, line, length in _function_lengths(path) if length > MAX_FUNCTION_LINES]
    assert over == []


def test_the_readme_is_at_most_250_lines() -> None:
    assert _lines(REPO / "README.md") <= MAX_README_LINES


def test_a_function_is_measured_from_def_to_its_end(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text("import functools\n\n\n"
                      "@functools.cache\n"
                      "def outer() -> int:\n"
                      "    def inner() -> int:\n"
                      "        return 1\n"
                      "    return inner()\n\n\n"
                      "class Holder:\n"
                      "    async def method(self) -> None:\n"
                      "        pass\n")
    assert _function_lengths(source) == [("outer", 5, 4), ("outer.inner", 6, 2),
                                         ("Holder.method", 12, 2)]
