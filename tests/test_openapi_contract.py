"""raygate's own HTTP API against its OpenAPI document, by schemathesis: requests generated
from the document (valid ones and, in negative mode, ones it forbids) sent to a real demo
server on loopback; every reply must be no 5xx, have a status the document lists for that
operation, the content type it names, and a body its schema accepts.

The document is loaded from ``extender/openapi.json``, the file the server serves
(``tests/test_admission_http.py`` checks that they are the same), so the operations are
known when pytest collects; the server's URL is given per call. (schemathesis'
``from_fixture`` would load it from the server, but breaks on pytest 9.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import ServerThread

DOCUMENT = Path(__file__).resolve().parent.parent / "raygate" / "extender" / "openapi.json"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]

# A generated waitForChange is never the current version, so a long-poll answers at once,
# unless it is the empty string on a cluster that does not exist: that waits for the
# cluster to appear, up to the generated timeoutSeconds (as much as 300 s). Such calls get
# a short timeout instead; a reply after it is as correct as any.
SHORT_WAIT = "0.05"

schema = schemathesis.openapi.from_path(str(DOCUMENT))


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_replies_match_the_document(case: Any, demo_server: ServerThread) -> None:
    query = case.query
    if isinstance(query, dict) and "waitForChange" in query:
        query["timeoutSeconds"] = SHORT_WAIT
    case.call_and_validate(base_url=demo_server.url, checks=CHECKS, timeout=10)
