"""docs/admission-api.md's examples, against the demo cluster: the curl reply, and the
gRPC replies as grpcurl and raygate's own client print them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from raygate.contract.proto.raygate.v1 import admission_pb2, admission_pb2_grpc
from raygate.policy.admission import PodState
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import T0_EPOCH
from tests.conftest import FakeClock, ServerThread
from tests.docs import doc
from tests.fronts.admission_api import GET, WAIT, check, path_of

README = doc("admission-api.md")
DEMO_NOW = T0_EPOCH + 86_400  # any time after the demo's events: no preemption in the window


@pytest.fixture(scope="module")
def demo() -> Iterator[ServerThread]:
    from raygate.server.cache.editor import build_snapshot
    from raygate.server.cache.snapshot_files import demo_text, load_text

    cache = ClusterCache(PolicyConfig(), "demo cluster")
    cache.publish(build_snapshot(load_text(demo_text(), "demo"), PolicyConfig()))
    thread = ServerThread(cache, FakeClock(DEMO_NOW))
    thread.start()
    yield thread
    thread.stop()


def test_documented_curl_example_is_what_the_demo_answers(demo: ServerThread) -> None:
    example = re.search(
        r"curl -s localhost:8888(?P<path>/v1/\S+) \| python3 -m json.tool\n```\n```json\n"
        r"(?P<reply>.*?)\n```", README, re.S)
    assert example is not None
    with httpx.Client(base_url=demo.url, timeout=WAIT) as client:
        live = check(GET, client.get(example["path"]))
    assert json.dumps(live, indent=4) == example["reply"]
    version = live["metadata"]["version"]
    assert f"If-None-Match: \"{version}\"" in README and f"waitForChange={version}" in README


def grpcurl_json(message: Message) -> str:
    """What grpcurl prints for ``message`` by default: protobuf's JSON with the proto's own
    field names (its jsonpb ``OrigName``), two-space indents, zero values left out.
    Checked once byte for byte against grpcurl 1.9.4 on the demo; the test below runs
    the real grpcurl too when one is on the PATH."""
    return json_format.MessageToJson(message, preserving_proto_field_name=True, indent=2) + "\n"


def test_documented_grpc_examples_are_what_the_tools_print(
        demo: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    from raygate.client.cli import main

    target = f"127.0.0.1:{demo.server.grpc_port}"
    command = ("grpcurl -plaintext -d '{\"namespace\": \"ray\", \"name\": \"queued\"}' "
               "localhost:9090 raygate.v1.Admission/Get")
    example = re.search(re.escape(command) + r"\n```\n.*?```json\n(?P<out>.*?)```", README, re.S)
    assert example is not None
    with grpc.insecure_channel(target) as channel:
        reply = admission_pb2_grpc.AdmissionStub(channel).Get(
            admission_pb2.GetRequest(namespace="ray", name="queued"), timeout=WAIT)
    assert grpcurl_json(reply) == example["out"]
    grpcurl = shutil.which("grpcurl")
    if grpcurl is not None:
        real = subprocess.run(
            [grpcurl, "-plaintext", "-d", '{"namespace": "ray", "name": "queued"}', target,
             "raygate.v1.Admission/Get"], capture_output=True, text=True, check=True,
            timeout=WAIT)
        assert real.stdout == example["out"]

    # raygate's client: the HTTP route's bytes, over gRPC as over HTTP.
    assert "raygate.client grpc://localhost:9090 get ray queued" in README
    with httpx.Client(base_url=demo.url, timeout=WAIT) as client:
        http_body = client.get(path_of("ray", "queued")).text
    for url in (f"grpc://{target}", demo.url):
        assert main([url, "get", "ray", "queued"]) == 0
        assert capsys.readouterr().out == http_body + "\n"
    live = json.loads(http_body)
    assert {p["state"] for p in live["pods"]} == {"WaitingForGangAdmission"}
    # Every state and piece of advice has its line in the documentation.
    for state in PodState:
        assert f"| `{state.value}` |" in README
    for word in ("**`keep`**", "**`replace`**", "**`scaleUp: proceed`**", "**`scaleUp: hold`**"):
        assert word in README
