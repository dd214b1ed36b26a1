"""The sizes the project claims, kept in every folder of Python it holds — the product
(raygate/, the generated protobuf code of raygate/contract/proto aside) and its support
code alike (tests/, testkit/, testbed/, bench/, e2e/, tools/, requirements/, protos/): no
file over 400 lines, no function or method over 50 lines (from ``def`` to its last line,
decorators not counted); README.md at most 250 lines.

A file or function still over its size is named below with the size it has and why; the
lists only shrink: a listed one that grows fails, and so does one now within the size
(strike it from the list)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("raygate", "tests", "testkit", "testbed", "bench", "e2e", "tools", "requirements",
           "protos")
GENERATED = REPO / "raygate" / "contract" / "proto"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50
MAX_README_LINES = 250

OVER_FILES: dict[str, tuple[int, str]] = {}
"""Files over MAX_FILE_LINES: path -> (its lines, why)."""
OVER_FUNCTIONS: dict[tuple[str, str], tuple[int, str]] = {}
"""Functions over MAX_FUNCTION_LINES: (path, qualified name) -> (its lines, why)."""


def _python_files() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in (REPO / folder).rglob("*.py")
                  if not path.is_relative_to(GENERATED))


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


def _over(sizes: dict[str, int], listed: dict[str, tuple[int, str]],
          limit: int) -> dict[str, str]:
    """What breaks the rule in ``sizes`` (name -> size) given the names ``listed`` over
    ``limit``: an unlisted one over it, a listed one grown, within it, or gone."""
    problems = {name: f"{size} lines, over {limit}" for name, size in sizes.items()
                if size > limit and name not in listed}
    for name, (size, _) in listed.items():
        now = sizes.get(name)
        if now is None:
            problems[name] = "gone: strike it from the list"
        elif now <= limit:
            problems[name] = f"{now} lines, within {limit}: strike it from the list"
        elif now > size:
            problems[name] = f"grew from {size} to {now} lines"
    return problems


def test_every_folder_of_python_is_measured() -> None:
    files = _python_files()
    assert REPO / "raygate" / "policy" / "placement.py" in files
    assert {path.relative_to(REPO).parts[0] for path in files} == set(FOLDERS)
    assert not any(path.is_relative_to(GENERATED) for path in files)
    holding = {folder.name for folder in REPO.iterdir()
               if folder.is_dir() and not folder.name.startswith(".")
               and folder.name != "build" and not folder.name.endswith(".egg-info")
               and next(folder.rglob("*.py"), None) is not None}
    assert holding <= set(FOLDERS), holding - set(FOLDERS)
    assert all(why for _, why in [*OVER_FILES.values(), *OVER_FUNCTIONS.values()])


def test_no_file_is_over_400_lines() -> None:
    sizes = {str(path.relative_to(REPO)): _lines(path) for path in _python_files()}
    assert _over(sizes, OVER_FILES, MAX_FILE_LINES) == {}


def test_no_function_is_over_50_lines() -> None:
    sizes: dict[str, int] = {}
    where: dict[str, str] = {}
    for path in _python_files():
        for name, line, length in _function_lengths(path):
            key = f"{path.relative_to(REPO)}:{name}"
            sizes[key] = max(length, sizes.get(key, 0))  # a name defined twice: its longest
            where[key] = f"{path.relative_to(REPO)}:{line} {name}"
    listed = {f"{path}:{name}": entry for (path, name), entry in OVER_FUNCTIONS.items()}
    problems = _over(sizes, listed, MAX_FUNCTION_LINES)
    assert {where.get(key, key): problem for key, problem in problems.items()} == {}


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
