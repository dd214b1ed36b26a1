"""Generated request bodies for attacking raygate's decoders: the golden requests of
``tests/fixtures`` (and builder-made ones) as seeds, mutated at random paths — wrong types
at every key, keys deleted or duplicated or re-cased, numbers past any integer or float
(``2**70``, ``1e400``), lone surrogates and invalid UTF-8, deep nesting, very long
strings, nulls, truncated or spliced bytes. Used by ``test_attack_routes`` (over HTTP) and
``test_fuzz_decoders`` (the decoders alone)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from testkit.builders import make_pod

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCHEDULER = FIXTURES / "scheduler"
VOLCANO = FIXTURES / "volcano"


def _load(path: Path) -> Any:
    return json.loads(path.read_bytes())


# --- JSON with what json.dumps cannot write ------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A JSON token written as is: ``1e400``, ``[[[[...``, ``"\\ud800"``, ``NaN``."""

    text: str


@dataclass(frozen=True)
class Dup:
    """An object whose keys may repeat (the last wins in Go and msgspec)."""

    pairs: tuple[tuple[str, Any], ...]


def encode(value: Any) -> bytes:
    """``value`` as JSON bytes; a lone surrogate in a string becomes invalid UTF-8."""
    return _text(value).encode("utf-8", "surrogatepass")


def _text(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Dup | dict):
        pairs = value.pairs if isinstance(value, Dup) else value.items()
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_text(v)}"
                              for k, v in pairs) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _deep(depth: int, kind: str) -> Raw:
    if kind == "list":
        return Raw("[" * depth + "]" * depth)
    return Raw('{"a":' * depth + "1" + "}" * depth)


# Values of the wrong type, size or encoding, put in place of any value of a document.
poison: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**64, -(2**63) - 1, 2**70, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("1" + "0" * 400), Raw("1e-400"),
                     Raw("NaN"), Raw("Infinity"), Raw("-0"), Raw("0x10"), Raw("01"),
                     Raw('"\\ud800"'), Raw('"\\u0000"'), Raw('"\\x"'), Raw("tru")]),
    st.text(max_size=12),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),  # lone surrogates
    st.text(st.characters(min_codepoint=0x80), min_size=1, max_size=6),
    st.sampled_from(["", "x" * 100_000, "1Gi", "-1", "1e3", "nan", "2026-13-45T99:00:00Z",
                     "nvidia.com/gpu", "ray.io/cluster", "🚀" * 1000]),
    st.sampled_from([_deep(64, "list"), _deep(200, "object")]),
    st.lists(st.integers() | st.text(max_size=4) | st.none(), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers() | st.none(), max_size=3),
)


# Nesting deeper than Python's recursion limit (~1000) anywhere in a body, even under a key
# raygate skips, makes msgspec raise RecursionError: a bad request like any other
# (extender.wire.DECODE_ERRORS).
DEEP = [_deep(1000, "list"), _deep(100_000, "list"), _deep(20_000, "object")]
poison = st.one_of(poison, st.sampled_from(DEEP))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in ``value``, the root first."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _mutate(draw: st.DrawFn, doc: Any) -> Any:
    """One mutation of ``doc`` at a random path (in place where it can be)."""
    paths = list(_paths(doc))
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "duplicate",
                               "recase", "wrap"]))
    if not path:  # the root itself
        return draw(poison) if op != "wrap" else [doc]
    parent, key = _get(doc, path[:-1]), path[-1]
    if op == "delete":
        del parent[key]
    elif op == "wrap":
        parent[key] = draw(st.sampled_from([[parent[key]], {"items": parent[key]}]))
    elif op == "duplicate" and isinstance(parent, dict):
        # The same key twice: first the poison, then the original, or the other way.
        pairs = [(k, v) for k, v in parent.items()]
        extra = (key, draw(poison))
        pairs.insert(draw(st.integers(0, len(pairs))), extra)
        if len(path) == 1:
            return Dup(tuple(pairs))
        _get(doc, path[:-2])[path[-2]] = Dup(tuple(pairs))
    elif op == "recase" and isinstance(parent, dict) and isinstance(key, str):
        parent[draw(st.sampled_from([key.lower(), key.upper(), key.swapcase()]))] = (
            parent.pop(key))
    else:
        parent[key] = draw(poison)
    return doc


@st.composite
def mutated(draw: st.DrawFn, seeds: list[Any]) -> bytes:
    """A seed document, mutated one to three times, then maybe damaged as bytes."""
    doc: Any = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        if isinstance(doc, Dup | Raw):
            break  # a rewritten root: no paths left to walk
        doc = _mutate(draw, doc)
    data = encode(doc)
    damage = draw(st.sampled_from(["none", "none", "none", "truncate", "splice", "prefix"]))
    if damage == "truncate":
        data = data[:draw(st.integers(0, max(0, len(data) - 1)))]
    elif damage == "splice":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    elif damage == "prefix":
        data = draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b" \n\t"])) + data
    return data


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)


def bodies(seeds: list[Any]) -> st.SearchStrategy[bytes]:
    """Mostly mutated seeds; sometimes any JSON value or any bytes at all."""
    return st.one_of(
        mutated(seeds), mutated(seeds), mutated(seeds), mutated(seeds),
        json_values.map(encode),
        st.binary(max_size=64),
    )


SEEDS: dict[str, list[Any]] = {
    "/scheduler/filter": [_load(SCHEDULER / f"{c}.request.json") for c in (
        "filter-names-floor", "filter-names-overflow", "filter-nodelist-floor")],
    "/scheduler/preempt": [_load(SCHEDULER / f"{c}.request.json") for c in (
        "preempt-full", "preempt-meta")],
    "/volcano/predicate": [_load(VOLCANO / f"{c}.request.json") for c in (
        "predicate-floor-cpu", "predicate-floor-gpu")],
    "/volcano/prioritize": [_load(VOLCANO / "prioritize-overflow.request.json")],
    "/volcano/preemptable": [_load(VOLCANO / "preemptable-trainer.request.json")],
    "/volcano/jobEnqueueable": [_load(VOLCANO / "jobEnqueueable-queued.request.json")],
    "/v1/explain": [
        {"pod": make_pod("w-new").ray("demo", "workers").requests(cpu="4").obj()},
        {"pod": make_pod("o-new", "ray").ray("demo", "overflow").requests(cpu="1").obj(),
         "nodeNames": ["cpu-node-1", "gpu-node-1", "nowhere"]},
    ],
}
SEEDS["/scheduler/prioritize"] = SEEDS["/scheduler/filter"]
SEEDS["/volcano/reclaimable"] = SEEDS["/volcano/preemptable"]
SEEDS["/volcano/onSessionOpen"] = SEEDS["/volcano/onSessionClose"] = [
    {"jobs": {}, "nodes": {}, "queues": {}, "namespaceInfo": {}}]
