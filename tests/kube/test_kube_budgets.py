"""``KubeTransport``'s PodDisruptionBudget calls over real HTTP on loopback: the request
the API server gets (a server-side apply: PATCH, ``application/apply-patch+yaml``,
``fieldManager=raygate``, ``force=true``), and its errors as raygate's own."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s

from raygate.server.kube.client import Connection, KubeTransport
from raygate.server.kube.transport import ApiError


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any


@dataclass
class Recorder:
    seen: list[Seen] = field(default_factory=list)
    status: int = 200
    reply: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def api() -> Iterator[tuple[Recorder, KubeTransport]]:
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            url = urlsplit(self.path)
            recorder.seen.append(Seen(self.command, url.path, parse_qs(url.query),
                                      self.headers.get("Content-Type", ""),
                                      json.loads(raw) if raw else None))
            data = json.dumps(recorder.reply).encode()
            self.send_response(recorder.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_DELETE = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    transport = KubeTransport(Connection(configuration, "test"))
    yield recorder, transport
    transport.close()
    server.shutdown()
    server.server_close()


BODY = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "rc-base-1", "namespace": "ray"}, "spec": {"minAvailable": 2}}


def test_apply_is_a_forced_server_side_apply(api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    transport.apply_budget("ray", "rc-base-1", BODY)
    transport.apply_budget("ray", "rc-base-1", BODY)  # the connection went back to the pool
    [seen, _] = recorder.seen
    assert (seen.method, seen.path) == (
        "PATCH", "/apis/policy/v1/namespaces/ray/poddisruptionbudgets/rc-base-1")
    assert seen.content_type == "application/apply-patch+yaml"
    assert seen.query == {"fieldManager": ["raygate"], "force": ["true"]}
    assert seen.body == BODY


def test_a_refusal_is_an_api_error_with_the_servers_message(
        api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    recorder.status = 403
    recorder.reply = {"kind": "Status", "reason": "Forbidden", "message":
                      'poddisruptionbudgets.policy "rc-base-1" is forbidden'}
    with pytest.raises(ApiError) as raised:
        transport.apply_budget("ray", "rc-base-1", BODY)
    assert raised.value.code == 403
    assert "is forbidden" in str(raised.value) and "APPLY" in str(raised.value)


def test_deleting_a_budget_that_is_gone_is_no_error(
        api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    recorder.status = 404
    recorder.reply = {"kind": "Status", "reason": "NotFound"}
    transport.delete_budget("ray", "rc-base-1")
    assert [(s.method, s.path) for s in recorder.seen] == [
        ("DELETE", "/apis/policy/v1/namespaces/ray/poddisruptionbudgets/rc-base-1")]
    recorder.status = 422
    with pytest.raises(ApiError):
        transport.delete_budget("ray", "rc-base-1")


def test_list_reads_names_and_clusters_across_namespaces(
        api: tuple[Recorder, KubeTransport]) -> None:
    recorder, transport = api
    recorder.reply = {"kind": "PodDisruptionBudgetList", "items": [
        {"metadata": {"name": "a-head-1", "namespace": "ray",
                      "labels": {"raygate.io/raycluster": "a"}}},
        {"metadata": {"name": "stray", "namespace": "other"}}]}
    assert transport.list_budgets("app.kubernetes.io/managed-by=raygate") == [
        ("ray", "a-head-1", "a"), ("other", "stray", "")]
    [seen] = recorder.seen
    assert seen.path == "/apis/policy/v1/poddisruptionbudgets"
    assert seen.query == {"labelSelector": ["app.kubernetes.io/managed-by=raygate"]}


def test_a_pod_annotation_is_a_strategic_merge_patch_with_its_uid(
        api: tuple[Recorder, KubeTransport]) -> None:
    """The stale-refusal ask (``raygate.server.controllers.stale_refusals``): one PATCH of the pod,
    its UID in the body as a precondition, said as a strategic merge patch; a refusal is
    raygate's error."""
    recorder, transport = api
    transport.annotate_pod("ray", "w-1", "uid-1", {"raygate.io/reconsidered": "t"})
    seen = recorder.seen[-1]
    assert (seen.method, seen.path) == ("PATCH", "/api/v1/namespaces/ray/pods/w-1")
    assert seen.content_type == "application/strategic-merge-patch+json"
    assert seen.body == {"metadata": {"uid": "uid-1",
                                      "annotations": {"raygate.io/reconsidered": "t"}}}
    recorder.status = 422
    with pytest.raises(Exception, match="422"):
        transport.annotate_pod("ray", "w-1", "uid-0", {"raygate.io/reconsidered": "t"})
