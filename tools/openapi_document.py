"""The parts of ``raygate/server/openapi.json`` made from code (``tools/openapi/``): every
route that is not the admission-status API (written by hand in the file, with its prose),
and the schemas of what raygate reads from the schedulers.

``python -m tools.openapi_document`` rewrites the file; ``tests/fronts/test_openapi_contract.py``
fails when the file is not what this makes of it.

- The request envelopes are the schedulers' own types: kube-scheduler's
  ``k8s.io/kube-scheduler/extender/v1`` (``ExtenderArgs``, ``ExtenderPreemptionArgs``; no
  JSON tags, so PascalCase keys, every key present, nil as ``null``) and Volcano's
  ``pkg/scheduler/plugins/extender`` (``PredicateRequest``, ``PrioritizeRequest``,
  ``PreemptableRequest``/``ReclaimableRequest``, ``JobEnqueueableRequest``: JSON tags
  on the envelopes, the ``api.*Info`` inside them PascalCase).
- The objects inside them (``v1.Pod``, ``v1.Node``, Volcano's ``TaskInfo``, ``NodeInfo``,
  ``JobInfo``) are described by the fields raygate decodes — from the msgspec structs of
  ``raygate.server.wire`` themselves, so the document cannot drift from the decoder —
  with quantities and times constrained as raygate parses them. Every other field of
  those objects is allowed and ignored.
- The replies are exactly what raygate writes (the golden fixtures in ``tests/fixtures``
  hold their bytes): raygate's own structs, and the upstream result types.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tools.openapi.decoded import wire_components
from tools.openapi.paths import own_paths, scheduler_paths, volcano_paths
from tools.openapi.replies import own_components
from tools.openapi.schedulers import scheduler_components
from tools.openapi.schema import Schema

DOCUMENT = Path(__file__).resolve().parent.parent / "raygate" / "server" / "openapi.json"

HAND_WRITTEN_PATHS = ("/v1/namespaces/{namespace}/rayclusters/{name}/admission",
                      "/v1/admission")
"""The admission-status API: written in the file by hand. Every other path is made here."""


INFO = {
    "title": "raygate",
    "version": "v1",
    "description": (
        "Every HTTP route raygate serves: the kube-scheduler extender verbs "
        "(`/scheduler/*`), the Volcano extender verbs (`/volcano/*`), raygate's own API "
        "(admission status, explain), health, metrics, and the admission webhook (on its "
        "own HTTPS listener). The admission status is also served over gRPC "
        "(`raygate.v1.Admission`, protos/raygate/v1/admission.proto), explain as "
        "`raygate.v1.Explain`. Fields may be added; clients ignore fields they do not "
        "know. A method a path does not serve is a 405 with `Allow`; HEAD is answered "
        "wherever GET is."),
}


def build(current: Schema) -> Schema:
    """The document: ``current``'s hand-written admission paths and their components,
    everything else made here."""
    generated = {**wire_components(), **own_components(), **scheduler_components()}
    hand = {name: schema for name, schema in current["components"]["schemas"].items()
            if name not in generated and not name.startswith(
                ("kube.", "volcano.", "AdmissionReviewIn.", "AdmissionReviewOut."))}
    paths = {**scheduler_paths(), **volcano_paths(), **own_paths()}
    for path in HAND_WRITTEN_PATHS:
        paths[path] = current["paths"][path]
    return {
        "openapi": "3.1.0",
        "info": INFO,
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted({**hand, **generated}.items()))},
    }


# --- checking bodies against the document ------------------------------------------------


@functools.cache
def _registry() -> Registry[Any]:
    document = json.loads(DOCUMENT.read_text())
    registry: Registry[Any] = Registry().with_resource(
        "urn:raygate:openapi", Resource.from_contents(document, default_specification=DRAFT202012))
    return registry


def schema_errors(schema: Schema, body: Any) -> list[str]:
    """What is wrong with ``body`` against ``schema``, one of the document's (its ``$ref``s
    resolved in the file as it is), formats checked; empty when nothing is."""
    target = schema.get("$ref")
    validator = Draft202012Validator({"$ref": "urn:raygate:openapi" + target} if target
                                     else schema, registry=_registry(),
                                     format_checker=FormatChecker())
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(body)]


def render(document: Schema) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.openapi_document",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args(argv)
    text = DOCUMENT.read_text()
    made = render(build(json.loads(text)))
    if args.check:
        if made != text:
            print(f"{DOCUMENT} is stale: run python -m tools.openapi_document", file=sys.stderr)
            return 1
        return 0
    DOCUMENT.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
