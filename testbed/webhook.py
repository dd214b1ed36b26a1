"""raygate's Ray-pod webhook on the testbed, as ``deploy/native-placement`` installs it.

The MutatingWebhookConfiguration of ``deploy/native-placement/webhook.yaml``, called by URL
(no Service, no cert-manager): the webhook's certificate is the API server's own serving
certificate (signed by the testbed's CA, 127.0.0.1 among its names), which is all the API
server checks on a call to ``https://127.0.0.1:<port>``.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

__all__ = ["NATIVE_PLACEMENT", "NATIVE_PLACEMENT_OFF", "webhook_configuration"]

NATIVE_PLACEMENT = Path(__file__).resolve().parent.parent / "deploy" / "native-placement"
NATIVE_PLACEMENT_OFF = "testbed.raygate.dev/native-placement-off"
"""A namespace with this label set to "true" gets no gate: its pods are placed without
raygate's native rule (raygate as an extender alone, or no raygate at all: the baselines)."""


def webhook_configuration(name: str, url: str, ca_cert: Path,
                          namespace_selector: dict[str, Any]) -> dict[str, Any]:
    """The shipped configuration named ``name``, calling ``url`` for the namespaces
    ``namespace_selector`` selects."""
    documents = yaml.safe_load_all((NATIVE_PLACEMENT / "webhook.yaml").read_text())
    configuration: dict[str, Any] = next(
        d for d in documents if d and d["kind"] == "MutatingWebhookConfiguration")
    configuration["metadata"] = {"name": name}  # no cert-manager CA injection here
    ca_bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    for webhook in configuration["webhooks"]:
        path = webhook["clientConfig"]["service"]["path"]
        webhook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
        webhook["namespaceSelector"] = namespace_selector
    return configuration
