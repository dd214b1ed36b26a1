"""The metric names a PromQL expression reads: a tokenizer and a walk over its tokens, enough
for the alerts and the dashboard in deploy/monitoring (no PromQL parser on PyPI is both
kept up and free of a native build). What it does not understand it refuses, so an
expression it cannot read fails the test instead of passing unread."""

from __future__ import annotations

import re

__all__ = ["metric_names"]

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>[0-9]+(?:ms|[smhdwy])(?:[0-9]+(?:ms|[smhdwy]))*(?![A-Za-z0-9_:]))
  | (?P<number>0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)
  | (?P<variable>\$\{[^}]+\}|\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=(){}\[\],@:])
""", re.VERBOSE)

FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "avg", "avg_over_time", "bottomk", "ceil", "changes",
    "clamp", "clamp_max", "clamp_min", "count", "count_over_time", "count_values",
    "day_of_month", "day_of_week", "days_in_month", "delta", "deriv", "exp", "floor", "group",
    "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate", "label_join",
    "label_replace", "last_over_time", "ln", "log10", "log2", "max", "max_over_time", "min",
    "min_over_time", "minute", "month", "predict_linear", "present_over_time", "quantile",
    "quantile_over_time", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc",
    "sqrt", "stddev", "stddev_over_time", "stdvar", "stdvar_over_time", "sum",
    "sum_over_time", "time", "timestamp", "topk", "vector", "year",
})
"""PromQL's functions and aggregations (Prometheus 2.x and 3.x)."""

_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
"""Keywords a parenthesised list of label names may follow."""
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "Inf", "NaN",
                       "inf", "nan"})


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while at < len(expr):
        found = _TOKEN.match(expr, at)
        if found is None:
            raise ValueError(f"{expr!r}: cannot read {expr[at:at + 20]!r}")
        kind = found.lastgroup or ""
        if kind != "space":
            tokens.append((kind, found.group()))
        at = found.end()
    return tokens


def _balanced(expr: str, tokens: list[tuple[str, str]]) -> None:
    """Every bracket closed by its own kind, in order (strings hold none: they are tokens)."""
    pairs, open_ = {")": "(", "]": "[", "}": "{"}, []
    for kind, text in tokens:
        if kind == "op" and text in "([{":
            open_.append(text)
        elif kind == "op" and text in pairs and (not open_ or open_.pop() != pairs[text]):
            raise ValueError(f"{expr!r}: unbalanced {text!r}")
    if open_:
        raise ValueError(f"{expr!r}: unclosed {open_[-1]!r}")


def _skip(tokens: list[tuple[str, str]], at: int, close: str) -> int:
    """The index after the bracket that closes the one at ``at`` (brackets balanced)."""
    opening, depth = tokens[at][1], 0
    for index in range(at, len(tokens)):
        text = tokens[index][1] if tokens[index][0] == "op" else ""
        depth += (text == opening) - (text == close)
        if depth == 0:
            return index + 1
    raise AssertionError("brackets checked balanced")  # pragma: no cover


def metric_names(expr: str) -> set[str]:
    """Every metric name ``expr`` selects. Label matchers, ranges, grouping labels, strings,
    numbers and Grafana's ``$variables`` are not names; a function PromQL lacks, or a
    selector whose name hides in a matcher (``{__name__="x"}``), is refused."""
    tokens, names, at = _tokens(expr), set(), 0
    _balanced(expr, tokens)
    while at < len(tokens):
        kind, text = tokens[at]
        following = tokens[at + 1][1] if at + 1 < len(tokens) else ""
        if kind == "op" and text == "{":
            if at == 0 or tokens[at - 1][0] != "name":
                raise ValueError(f"{expr!r}: a selector without a metric name")
            at = _skip(tokens, at, "}")
            continue
        if kind == "op" and text == "[":
            at = _skip(tokens, at, "]")
            continue
        if kind == "name" and text in _GROUPING and following == "(":
            at = _skip(tokens, at + 1, ")")
            continue
        if kind == "name" and text in _KEYWORDS:
            pass
        elif kind == "name" and (following == "(" or following in ("by", "without")):
            if text not in FUNCTIONS:
                raise ValueError(f"{expr!r}: {text}() is no PromQL function")
        elif kind == "name":
            names.add(text)
        at += 1
    return names
