"""The documents of the files ``raygate check`` is given: each file (``-``: stdin) read up
to a size limit and refused past it before it is read whole; YAML split into its documents
and each parsed on its own, so that a syntax error loses only the document it is in;
``kind: List`` items flattened.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgspec
import yaml

from raygate.contract.command import CommandError
from raygate.policy.quantity import QuantityError, parse_milli
from raygate.server.cache.snapshot_files import ManifestLoader
from raygate.server.wire import DECODE_ERRORS

__all__ = ["DEFAULT_MAX_BYTES", "STDIN", "Document", "InputError", "display_name", "documents",
           "expand", "parse_size", "size_text"]

DEFAULT_MAX_BYTES = 8 * 2**20
STDIN = "-"
# A line that starts a YAML document. The spec lets no scalar hold one at column 0, so
# splitting on it before parsing is exact (directives aside, which manifests do not use).
_DOCUMENT_START = re.compile(r"^---(?=[ \t]|\r?$)", re.M)
# What `kubectl apply -f FOLDER` reads of a folder.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
HELM_CHART = "Chart.yaml"


class _StrictLoader(ManifestLoader):
    """The manifest loader, refusing a key given twice in one mapping as kubectl's strict
    decoding does (PyYAML would keep the last, silently merging two objects into one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key.value!r}", key.start_mark)
                seen.add(key.value)
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]


class InputError(CommandError, ValueError):
    """A file that cannot be checked at all: the message names it and says why."""


@dataclass(frozen=True, slots=True)
class Document:
    file: str
    line: int | None
    """Where the document starts (1-based); None for JSON."""
    value: Any = None
    error: str | None = None
    """Why the document could not be parsed (``value`` is then None)."""


def parse_size(text: str) -> int:
    """Bytes from a Kubernetes quantity (``8Mi``, ``500k``, ``1000000``)."""
    try:
        size = -(-parse_milli(text) // 1000)
    except QuantityError:
        size = 0
    if size <= 0:
        raise ValueError(f"not a size in bytes: {text!r} (like 8Mi or 500k)")
    return size


def size_text(count: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def _read(path: str, limit: int, stdin: BinaryIO) -> bytes:
    over = f"over the size limit of {size_text(limit)} (--max-size)"
    if path == STDIN:
        data = stdin.read(limit + 1)
    else:
        try:
            with open(path, "rb") as file:
                status = os.fstat(file.fileno())
                if stat.S_ISREG(status.st_mode) and status.st_size > limit:
                    raise InputError(f"{path}: {size_text(status.st_size)}, {over}")
                data = file.read(limit + 1)  # a pipe or device: no size to ask first
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{display_name(path)}: more than {size_text(limit)}, {over}")
    return data


def expand(paths: Iterable[str], charts: list[str] | None = None) -> Iterator[str]:
    """``paths`` with each folder replaced by its manifests (``MANIFEST_SUFFIXES``), all of
    its subfolders' too, in name order: a CI gate over a folder of manifests. A folder
    holding a Helm chart (``Chart.yaml``) is not read: its templates are manifests only
    once helm renders them, and its values files never are; it is added to ``charts``."""
    for path in paths:
        if path != STDIN and os.path.isdir(path):
            for folder, subfolders, files in os.walk(path):
                if HELM_CHART in files:
                    subfolders.clear()
                    if charts is not None:
                        charts.append(folder)
                    continue
                subfolders.sort()
                yield from (os.path.join(folder, name) for name in sorted(files)
                            if name.endswith(MANIFEST_SUFFIXES))
        else:
            yield path


def display_name(path: str) -> str:
    """How messages name a file."""
    return "<stdin>" if path == STDIN else path


def _flattened(value: Any, file: str, line: int | None) -> Iterator[Document]:
    # `kind: List` from kubectl, or a typed list (RayClusterList, ...) from the API.
    if (isinstance(value, dict) and str(value.get("kind", "")).endswith("List")
            and isinstance(value.get("items"), list)):
        for item in value["items"]:
            yield Document(file, line, item)
    elif value is not None:  # an empty document (`---` twice, comments only) holds nothing
        yield Document(file, line, value)


def _expanded_beyond(value: Any, budget: int) -> bool:
    """More values than ``budget``: only YAML aliases make more values than characters (a
    few hundred bytes of "billion laughs" expand to gigabytes)."""
    stack = [value]
    while stack:
        budget -= 1
        if budget < 0:
            return True
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _yaml_error(exc: yaml.YAMLError, first_line: int) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return str(problem)
    context = getattr(exc, "context", None)
    return (f"{f'{context}: ' if context else ''}{problem} at line "
            f"{first_line + mark.line}, column {mark.column + 1}")


def _yaml_documents(text: str, file: str) -> Iterator[Document]:
    starts = [0, *(m.start() for m in _DOCUMENT_START.finditer(text) if m.start() > 0)]
    line = 1
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        chunk = text[start:end]
        error: str | None = None
        try:
            values = list(yaml.load_all(chunk, Loader=_StrictLoader))
        except yaml.YAMLError as exc:
            values, error = [], _yaml_error(exc, line)
        except RecursionError:
            values, error = [], "nested too deeply"
        if error is not None:
            yield Document(file, line, error=error)
        for value in values:
            if _expanded_beyond(value, len(chunk) + 100):
                yield Document(file, line, error="YAML aliases expand it far beyond its size")
            else:
                yield from _flattened(value, file, line)
        line += chunk.count("\n")


def documents(path: str, limit: int, stdin: BinaryIO) -> list[Document]:
    """Every document of one file (``-``: ``stdin``), in order; InputError when the file
    cannot be read, is not UTF-8, or is larger than ``limit`` bytes."""
    data = _read(path, limit, stdin)
    file = display_name(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{file}: not UTF-8 text: {exc}") from None
    if text.lstrip()[:1] in ("{", "["):
        # `kubectl get -o json`: msgspec parses JSON ~20x faster than a YAML loader.
        try:
            return list(_flattened(msgspec.json.decode(text), file, None))
        except DECODE_ERRORS:
            pass  # not plain JSON after all (e.g. YAML flow style): try YAML
    return list(_yaml_documents(text, file))
