"""Every HTTP route raygate serves, against its OpenAPI document.

- The document names every route the servers serve, with the method, and no other
  (``raygate/server/openapi.json``; its generated parts current:
  ``tools/openapi_document.py``).
- The golden fixtures (the schedulers' requests and raygate's exact replies, byte for
  byte) are valid against the operations' request and response schemas.
- schemathesis generates requests from the document — examples, the coverage phase
  (boundary values, missing and wrong-typed fields, undeclared methods) and fuzzing,
  ``MAX_EXAMPLES`` per operation and phase — and sends them to a real demo server on
  loopback (the webhook's to a real HTTPS webhook listener), with every check it has:
  no 5xx; each status, content type, header and body as the document says; valid
  requests accepted and invalid ones refused; an undeclared method a 405 with ``Allow``.

The document is loaded from the file the server serves (``tests/fronts/test_admission_http.py``
checks that they are the same), so the operations are known when pytest collects; the
servers' URLs are given per call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import negative_data_rejection

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.fronts.webhook import RayPodWebhook
from raygate.server.metrics.registry import Metrics
from tests.conftest import ServerThread, webhook_server
from tools import openapi_document

DOCUMENT = openapi_document.DOCUMENT
OPENAPI = json.loads(DOCUMENT.read_text())
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WEBHOOK = "/mutate/ray-pods"
MAX_EXAMPLES = 25

NOT_REFUSING = ("/scheduler/", "/volcano/")
"""The schedulers' verbs, where schemathesis' "invalid data must be refused" does not
apply. Filter and every Volcano verb answer any body with 200 in the peer's own shape (an
``Error``, a failed node, a veto, an abstention): kube-scheduler's filter and Volcano read
no body of another status, so a 4xx would not fail open. And every verb reads the nested
objects only as far as the decision needs them, as fast as it can: the candidate nodes
when the pod is a Ray pod and no names came, the full victims when no UIDs came. An
invalid part it never reads is not refused. Every other check applies to them, and this
one to every other route."""

schema = schemathesis.openapi.from_path(str(DOCUMENT))


RAY_PODS = RayPodWebhook(ClusterCache(PolicyConfig(), "test"), Metrics(), place=True,
                         marker=False)


# --- the document and the servers ----------------------------------------------------------


def test_the_document_is_current() -> None:
    assert openapi_document.main(["--check"]) == 0, (
        "run: .venv/bin/python -m tools.openapi_document")


def test_every_route_served_is_in_the_document_and_no_other(demo_server: ServerThread) -> None:
    served = {(path, route.method.decode().lower())
              for path, route in {**demo_server.server.routes, **RAY_PODS.routes()}.items()}
    documented = {(path, method) for path, item in OPENAPI["paths"].items()
                  for method in item if method in ("get", "post", "put", "delete", "patch")}
    assert served == documented


def _golden() -> Iterator[tuple[str, str, Path]]:
    """(path, "request" | "reply", fixture) for every golden fixture."""
    for fixture in sorted((FIXTURES / "scheduler").glob("*.json")):
        case, _, rest = fixture.name.partition(".")
        if rest == "request.json":
            verbs = ("preempt",) if case.startswith("preempt") else ("filter", "prioritize")
            for verb in verbs:
                yield f"/scheduler/{verb}", "request", fixture
        else:
            yield f"/scheduler/{rest.removesuffix('.reply.json')}", "reply", fixture
    for fixture in sorted((FIXTURES / "volcano").glob("*.json")):
        verb, _, rest = fixture.name.partition(".")
        yield (f"/volcano/{verb.split('-')[0]}",
               "request" if rest.endswith("request.json") else "reply", fixture)


@pytest.mark.parametrize(("path", "part", "fixture"), list(_golden()),
                         ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_golden_fixtures_match_the_document(path: str, part: str, fixture: Path) -> None:
    operation = OPENAPI["paths"][path]["post"]
    if part == "request":
        body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    else:
        body_schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert not openapi_document.schema_errors(body_schema, json.loads(fixture.read_bytes())), \
        fixture.name


# --- schemathesis over the whole document --------------------------------------------------


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with webhook_server(tmp_path_factory.mktemp("tls")) as (url, _, ca_file):
        yield url, ca_file


@schema.exclude(path=WEBHOOK).parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_main_listener_answers_as_documented(case: Any, demo_server: ServerThread) -> None:
    excluded = [negative_data_rejection] if case.path.startswith(NOT_REFUSING) else []
    case.call_and_validate(base_url=demo_server.url, timeout=10, excluded_checks=excluded)


@schema.include(path=WEBHOOK).parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_webhook_listener_answers_as_documented(case: Any, webhook: tuple[str, Path],
                                                    ) -> None:
    url, ca_file = webhook
    case.call_and_validate(base_url=url, timeout=10, verify=str(ca_file))
