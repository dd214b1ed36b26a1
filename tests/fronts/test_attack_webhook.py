"""The admission webhook, on its own HTTPS listener, attacked with generated
AdmissionReviews (``attack_bodies``): an error is a 400 (the API server applies the
webhook's failurePolicy), and a good review still gets its patch after each one."""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trustme
from hypothesis import given

from raygate.policy.config import PolicyConfig
from raygate.policy.native import GATE
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot_files import demo_text, load_text
from raygate.server.listeners import WebhookListener, bind_socket
from testkit.builders import T0_EPOCH, make_pod
from tests.conftest import FakeClock, ServerThread
from tests.fronts.attack_bodies import DEEP, Dup, bodies, encode
from tests.fronts.route_contracts import HYPOTHESIS, check_reply, route_contract, webhook_shape


def review(pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "namespace": pod["metadata"]["namespace"], "operation": "CREATE",
                        "object": pod, "oldObject": None, "dryRun": False}}


GOOD_REVIEW = review(make_pod("w").ray("rc", "g").obj())
# The builder's pod has no gates: the webhook adds raygate's (the marker is off by default).
GOOD_PATCH = [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "tls.crt", folder / "tls.key"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    listener = WebhookListener(bind_socket("127.0.0.1", 0), str(cert_file), str(key_file))
    config = PolicyConfig()
    cache = ClusterCache(config, "demo")
    cache.publish(build_snapshot(load_text(demo_text(), "demo"), config))
    thread = ServerThread(cache, FakeClock(T0_EPOCH), webhook=listener)
    thread.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    url = f"https://127.0.0.1:{listener.sock.getsockname()[1]}"
    with httpx.Client(base_url=url, verify=context, timeout=30) as client:
        for _ in range(500):
            with contextlib.suppress(httpx.TransportError):
                client.get("/healthz")
                break
            threading_wait(0.01)
        yield client
    thread.stop()


def threading_wait(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)


def _webhook_still_serving(client: httpx.Client) -> None:
    reply = client.post("/mutate/ray-pods", content=json.dumps(GOOD_REVIEW))
    assert reply.status_code == 200
    response = reply.json()["response"]
    assert json.loads(base64.b64decode(response["patch"])) == GOOD_PATCH


@HYPOTHESIS
@given(body=bodies([GOOD_REVIEW, review(make_pod("h").head("rc").requests(cpu="1").obj())]))
def test_generated_admission_reviews(body: bytes, webhook: httpx.Client) -> None:
    reply = webhook.post("/mutate/ray-pods", content=body)
    # An error is a 400: the API server applies the webhook's failurePolicy.
    check_reply(reply, route_contract("POST", {200, 400}, webhook_shape), "POST")
    _webhook_still_serving(webhook)


def test_deep_nesting_in_an_admission_review(webhook: httpx.Client) -> None:
    reply = webhook.post("/mutate/ray-pods", content=encode(Dup((
        *GOOD_REVIEW.items(), ("zzUnknownKey", DEEP[1])))))
    assert reply.status_code == 400
