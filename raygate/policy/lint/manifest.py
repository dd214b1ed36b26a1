"""``raygate check``'s findings on a manifest itself (RG1xx): what ``kubectl apply`` or
KubeRay would refuse, and inputs with nothing to check. The reading and the schema are the
caller's (``raygate.server.check``); the words are here. The rules on a RayCluster's
configuration (RG0xx) are ``raygate.policy.lint.rules``'s."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence

from raygate.policy.lint.model import Finding, Severity

__all__ = [
    "RAY_API_VERSION",
    "RAY_KINDS",
    "closest",
    "did_you_mean",
    "field_path",
    "not_an_object",
    "not_parsed",
    "recognise",
    "schema_violation",
]

# Where each kind KubeRay serves keeps the RayCluster spec it runs (its Go types' JSON
# names: RayJobSpec.RayClusterSpec is `rayClusterSpec`, RayServiceSpec's `rayClusterConfig`,
# RayCronJobSpec.JobTemplate a RayJobSpec).
RAY_KINDS: Mapping[str, tuple[str, ...]] = {
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
    "RayService": ("spec", "rayClusterConfig"),
    "RayCronJob": ("spec", "jobTemplate", "rayClusterSpec"),
}
RAY_API_VERSION = "ray.io/v1"


def closest(word: str, choices: Collection[str]) -> str | None:
    """The one of ``choices`` ``word`` is most likely a typo of (case aside), if any."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), by_lower, n=1, cutoff=0.8)
    return by_lower[close[0]] if close else None


def did_you_mean(word: str, choices: Collection[str]) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``choices``, or ''."""
    match = closest(word, choices)
    return f" (did you mean {match!r}?)" if match else ""


def field_path(parts: Sequence[str | int]) -> str:
    """``spec.workerGroupSpecs[0].minReplicas`` from its keys and indexes."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def not_parsed(message: str) -> Finding:
    return Finding("RG101", Severity.ERROR, "", "", f"not valid YAML or JSON: {message}",
                   "fix the syntax (the documents before and after it are checked)")


def _shortened(text: str, length: int = 60) -> str:
    return text if len(text) <= length else f"{text[:length - 1]}…"


def not_an_object(value: object) -> Finding:
    what = {str: "string", list: "list", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__)
    return Finding("RG102", Severity.ERROR, "", "",
                   f"a {what}, not a Kubernetes object: {_shortened(repr(value))}",
                   "give each document an apiVersion, a kind, metadata and a spec")


def recognise(kind: object, api_version: object, ref: str) -> tuple[str | None, list[Finding]]:
    """Which of ``RAY_KINDS`` a document is (None: not one to check), and what is wrong
    with its kind or apiVersion: a misspelled kind, an unknown ``ray.io`` kind, a Ray kind
    under another group. Another group's kind is someone else's object, whatever its name
    (a ``v1`` Service, a ``batch/v1`` CronJob, Cluster API's Cluster): only a ``ray.io``
    kind, or one that starts with "Ray", is read as a misspelled Ray kind."""
    if not isinstance(kind, str) or not kind or not isinstance(api_version, str):
        return None, [Finding("RG102", Severity.ERROR, ref, "kind" if not kind else "apiVersion",
                              "no kind or apiVersion: not a Kubernetes object",
                              f"set apiVersion: {RAY_API_VERSION} and kind: RayCluster")]
    group = api_version.partition("/")[0] if "/" in api_version else ""
    if kind in RAY_KINDS:
        if api_version == RAY_API_VERSION:
            return kind, []
        if group == "ray.io":
            return kind, [Finding(
                "RG103", Severity.WARNING, ref, "apiVersion",
                f"{api_version} is not KubeRay's current version; checked as {RAY_API_VERSION}",
                f"use apiVersion: {RAY_API_VERSION}")]
        return None, [Finding(
            "RG103", Severity.ERROR, ref, "apiVersion",
            f"{kind} is served as {RAY_API_VERSION}, not {api_version}: the API server has no "
            f"{kind} there", f"use apiVersion: {RAY_API_VERSION}")]
    match = closest(kind, RAY_KINDS)
    if group == "ray.io" or (match and kind.lower().startswith("ray")):
        return None, [Finding(
            "RG103", Severity.ERROR, ref, "kind",
            f"unknown kind {kind!r}{did_you_mean(kind, RAY_KINDS)}: KubeRay serves "
            f"{', '.join(RAY_KINDS)}", f"use kind: {match or 'RayCluster'}")]
    return None, []  # someone else's object: a Service, a ConfigMap, a Deployment, ...


def schema_violation(ref: str, kind: str, path: Sequence[str | int], message: str) -> Finding:
    """A field KubeRay's CRD refuses (or the API server would drop as unknown)."""
    explain = ".".join([kind.lower(), *(p for p in path if isinstance(p, str))])
    if message.startswith("unknown field"):
        explain = explain.rpartition(".")[0]
    return Finding("RG105", Severity.ERROR, ref, field_path(path), message,
                   f"see `kubectl explain {explain}` (KubeRay's CRD)")
