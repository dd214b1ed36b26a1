"""Request bytes for each HTTP scenario, and the checks their replies must pass.

``Workload`` holds one cluster (``CLUSTER_NODES`` nodes, the RayCluster ``ray/bench``)
and builds each scenario's requests on first use, so a ``fast`` run never generates the
tens-of-MB Volcano bodies of the ``full`` one. Two checks guard every measurement:

* **right**: raygate's reply is what the rule says (``Expect``: exact node sets and
  scores; messages checked for raygate's prefix and rule);
* **same**: the Go peer's reply parses to the same JSON as raygate's (key order and
  whitespace aside), messages included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.contenders import BenchError, request
from bench.payloads import (
    FLOOR_GROUP,
    OVERFLOW_GROUP,
    Obj,
    cluster_snapshot,
    extender_args,
    node_list_args,
    node_with_status,
    ray_worker_pod,
    request_node_names,
    snapshot_gpu_node_names,
    volcano_node_info,
    volcano_predicate,
    volcano_prioritize,
)
from bench.scenarios import ROTATED_PODS, HttpScenario, Shape, Verb
from raygate.server.fronts.scheduler import RequestPods

__all__ = ["Request", "Steps", "Workload", "compare_replies"]

FLOOR_RULE = "raygate: floor-avoids-gpu: "
VOLCANO_SCALE = 50.0  # PolicyConfig.volcano_score_scale's default


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes | None
    expect: Callable[[Any], str | None]
    """Checks raygate's parsed reply: None when right, else what is wrong."""

    def raw(self) -> bytes:
        """The request as bytes on the wire (HTTP/1.1, keep-alive)."""
        head = f"{self.method} {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if self.body is None:
            return (head + "\r\n").encode()
        return (head + "Content-Type: application/json\r\n"
                f"Content-Length: {len(self.body)}\r\n\r\n").encode() + self.body


@dataclass(frozen=True)
class Steps:
    """A scenario's units (one request each, two when paired), sent in turn."""

    checked: tuple[tuple[Request, ...], ...]
    """The units whose replies are checked: the first and, when the pods rotate, the last
    (the units differ only by their pod)."""
    files: tuple[Path, ...]
    """Every unit's request bodies in sending order, in files (``-`` for none), for wrk's
    Lua script."""
    raw_files: tuple[Path, ...]
    """Every unit's whole requests in sending order, in files, for bench.pyclient."""

    @property
    def requests(self) -> tuple[Request, ...]:
        """The first unit: the warm-up sends it."""
        return self.checked[0]

    @property
    def units(self) -> int:
        return len(self.raw_files) // len(self.requests)

    @property
    def body_bytes(self) -> int:
        return max((len(r.body or b"") for r in self.requests), default=0)


def _diff(got: Any, want: Any) -> str | None:
    if got == want:
        return None
    if isinstance(got, list) and isinstance(want, list):
        for i, (g, w) in enumerate(zip(got, want, strict=False)):
            if g != w:
                return f"first difference at [{i}]: got {g!r:.200}, want {w!r:.200}"
        return f"lengths differ: got {len(got)}, want {len(want)}"
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(set(got) | set(want)):
            if got.get(key) != want.get(key):
                return f"key {key!r}: got {got.get(key)!r:.200}, want {want.get(key)!r:.200}"
    return f"got {got!r:.200}, want {want!r:.200}"


def _refusals(failed: Any, want: set[str]) -> str | None:
    if not isinstance(failed, dict):
        return f"FailedAndUnresolvableNodes is {type(failed).__name__}"
    if set(failed) != want:
        missing, extra = want - set(failed), set(failed) - want
        return (f"FailedAndUnresolvableNodes: {len(missing)} GPU nodes missing "
                f"(e.g. {sorted(missing)[:2]}), {len(extra)} extra (e.g. {sorted(extra)[:2]})")
    bad = [m for m in failed.values() if not str(m).startswith(FLOOR_RULE)]
    return f"refusal message without {FLOOR_RULE!r}: {bad[0]!r}" if bad else None


def compare_replies(raygate: bytes, go: bytes) -> str | None:
    """None when both replies parse to the same JSON, else the first difference."""
    try:
        a, b = json.loads(raygate), json.loads(go)
    except ValueError as exc:
        return f"a reply is not JSON: {exc}"
    return _diff(b, a)


class Workload:
    def __init__(self, workdir: Path, n_nodes: int) -> None:
        if (memo := RequestPods().limit) >= ROTATED_PODS:
            raise BenchError(f"ROTATED_PODS ({ROTATED_PODS}) must exceed the pods raygate "
                             f"remembers ({memo}), or filter would find every pod")
        self.workdir = workdir
        self.snapshot = cluster_snapshot(n_nodes)
        self.nodes: list[Obj] = [o for o in self.snapshot["items"] if o["kind"] == "Node"]
        self.known = {n["metadata"]["name"] for n in self.nodes}
        self.gpu = snapshot_gpu_node_names(self.snapshot)
        self.names = request_node_names(self.snapshot)
        self.floor_pod = ray_worker_pod(FLOOR_GROUP)
        self.overflow_pod = ray_worker_pod(OVERFLOW_GROUP)
        self.snapshot_path = workdir / "cluster.json"
        self.snapshot_path.write_text(json.dumps(self.snapshot, separators=(",", ":")),
                                      encoding="utf-8")
        self._steps: dict[tuple[Verb, Shape, int, int], Steps] = {}

    def steps(self, s: HttpScenario) -> Steps:
        key = (s.verb, s.shape, s.size, s.pods_per_node)
        if key not in self._steps:
            stem = f"{len(self._steps):02d}"
            files: list[Path] = []
            raws: list[Path] = []
            units = self._units(s)
            for u, unit in enumerate(units):
                for i, r in enumerate(unit):
                    body = self.workdir / f"{stem}-{u:03d}-{i}.body"
                    raw = self.workdir / f"{stem}-{u:03d}-{i}.http"
                    body.write_bytes(r.body or b"")
                    raw.write_bytes(r.raw())
                    files.append(body if r.body is not None else Path("-"))
                    raws.append(raw)
            checked = (units[0],) if len(units) == 1 else (units[0], units[-1])
            self._steps[key] = Steps(checked, tuple(files), tuple(raws))
        return self._steps[key]

    # --- requests and what raygate must answer ------------------------------------------

    def _units(self, s: HttpScenario) -> list[tuple[Request, ...]]:
        pods = ([ray_worker_pod(FLOOR_GROUP, index=i) for i in range(ROTATED_PODS)]
                if s.rotates_pods else [self.floor_pod])
        return [tuple(self._build(s, pod)) for pod in pods]

    def _build(self, s: HttpScenario, floor_pod: Obj) -> list[Request]:
        if s.verb in (Verb.HEALTHZ, Verb.EMPTY_CYCLE):
            ok = Request("GET", "/healthz", None,
                         lambda got: _diff(got, {"status": "ok"}))
            return [ok] if s.verb is Verb.HEALTHZ else [ok, ok]
        if s.shape is Shape.NAMES:
            names = self.names[:s.size]
            if s.verb is Verb.FILTER:
                return [self._filter_names(floor_pod, names)]
            if s.verb is Verb.PRIORITIZE:
                return [self._prioritize_names(self.overflow_pod, names)]
            passed = [n for n in names if n not in self.gpu]
            return [self._filter_names(floor_pod, names),
                    self._prioritize_names(floor_pod, passed)]
        if s.shape is Shape.NODELIST:
            return [self._nodelist(s.verb, self.nodes[:s.size])]
        if s.verb is Verb.VOLCANO_PREDICATE:
            return self._volcano_predicate(s.pods_per_node)
        if s.verb is Verb.VOLCANO_PRIORITIZE:
            return [self._volcano_prioritize(s.size, s.pods_per_node)]
        raise ValueError(f"no payload for {s.key}")

    def _filter_names(self, pod: Obj, names: list[str]) -> Request:
        want_passed = [n for n in names if n not in self.gpu]
        want_refused = {n for n in names if n in self.gpu}

        def expect(got: Any) -> str | None:
            if not isinstance(got, dict):
                return f"expected an object, got {type(got).__name__}"
            if got.get("Error"):
                return f"Error {got['Error']!r}"
            if got.get("Nodes") is not None or got.get("FailedNodes") != {}:
                return "Nodes must be null and FailedNodes empty for a NodeNames request"
            if (problem := _diff(got.get("NodeNames"), want_passed)) is not None:
                return "NodeNames: " + problem
            return _refusals(got.get("FailedAndUnresolvableNodes"), want_refused)

        return Request("POST", "/scheduler/filter", extender_args(pod, names), expect)

    def _prioritize_names(self, pod: Obj, names: list[str]) -> Request:
        want = [{"Host": n, "Score": 0 if n in self.gpu else 10}
                for n in names if n in self.known]
        return Request("POST", "/scheduler/prioritize", extender_args(pod, names),
                       lambda got: _diff(got, want))

    def _nodelist(self, verb: Verb, nodes: list[Obj]) -> Request:
        full = [node_with_status(n) for n in nodes]
        is_gpu = [n["metadata"]["name"] in self.gpu for n in full]
        if verb is Verb.PRIORITIZE:
            want = [{"Host": n["metadata"]["name"], "Score": 0 if g else 10}
                    for n, g in zip(full, is_gpu, strict=True)]
            return Request("POST", "/scheduler/prioritize",
                           node_list_args(self.overflow_pod, full),
                           lambda got: _diff(got, want))
        kept = [n for n, g in zip(full, is_gpu, strict=True) if not g]
        refused = {n["metadata"]["name"] for n, g in zip(full, is_gpu, strict=True) if g}

        def expect(got: Any) -> str | None:
            if not isinstance(got, dict) or got.get("Error"):
                return f"not a successful filter result: {str(got)[:200]}"
            if got.get("NodeNames") is not None:
                return "NodeNames must be null for a NodeList request"
            items = (got.get("Nodes") or {}).get("items")
            if (problem := _diff(items, kept)) is not None:
                return "Nodes.items (must echo the passing nodes unchanged): " + problem
            return _refusals(got.get("FailedAndUnresolvableNodes"), refused)

        return Request("POST", "/scheduler/filter", node_list_args(self.floor_pod, full),
                       expect)

    def _volcano_predicate(self, pods: int) -> list[Request]:
        cpu = next(n for n in self.nodes if n["metadata"]["name"] not in self.gpu)
        gpu = next(n for n in self.nodes if n["metadata"]["name"] in self.gpu)

        def refused(got: Any) -> str | None:
            if not isinstance(got, dict) or got.get("code") != 3:
                return f"expected code 3 (UnschedulableAndUnresolvable), got {got!r:.200}"
            status = str(got.get("status"))
            return None if status.startswith(FLOOR_RULE) else f"status {status!r}"

        return [
            Request("POST", "/volcano/predicate",
                    volcano_predicate(self.floor_pod, volcano_node_info(cpu, pods)),
                    lambda got: _diff(got, {"status": "", "code": 0})),
            Request("POST", "/volcano/predicate",
                    volcano_predicate(self.floor_pod, volcano_node_info(gpu, pods, pods)),
                    refused),
        ]

    def _volcano_prioritize(self, n_nodes: int, pods: int) -> Request:
        nodes = self.nodes[:n_nodes]
        infos = [volcano_node_info(n, pods, i * pods) for i, n in enumerate(nodes)]
        want = {"nodeScore": {n["metadata"]["name"]: (
            0.0 if n["metadata"]["name"] in self.gpu else 10 * VOLCANO_SCALE) for n in nodes},
            "errorMessage": ""}
        return Request("POST", "/volcano/prioritize",
                       volcano_prioritize(self.overflow_pod, infos),
                       lambda got: _diff(got, want))


def check(steps: Steps, raygate_port: int, go_port: int, what: str) -> None:
    """Both servers answer every request of the checked units with 200; raygate's reply is
    right and the Go peer's is the same. Raises ``BenchError`` otherwise."""
    last = steps.units - 1
    for u, unit in zip((0, last), steps.checked, strict=False):
        for i, r in enumerate(unit):
            where = f"{what}, unit {u + 1} of {last + 1}, request {i + 1} ({r.method} {r.path})"
            _check_one(r, raygate_port, go_port, where)


def _check_one(r: Request, raygate_port: int, go_port: int, where: str) -> None:
    replies: dict[str, bytes] = {}
    for name, port in (("raygate", raygate_port), ("go", go_port)):
        status, body = request(port, r.method, r.path, r.body)
        if status != 200:
            raise BenchError(f"{where}: {name} answered HTTP {status}: {body[:300]!r}")
        replies[name] = body
    try:
        parsed = json.loads(replies["raygate"])
    except ValueError as exc:
        raise BenchError(f"{where}: raygate's reply is not JSON: {exc}") from None
    if (problem := r.expect(parsed)) is not None:
        raise BenchError(f"{where}: raygate answered wrongly: {problem}")
    if (problem := compare_replies(replies["raygate"], replies["go"])) is not None:
        raise BenchError(f"{where}: the Go peer's reply differs from raygate's: {problem}")
