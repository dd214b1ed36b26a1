"""Log lines: JSON in the cluster, text on a terminal, one line per decision at debug,
never a pod object or a token."""

from __future__ import annotations

import io
import json
import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from raygate.process import logs
from raygate.server.cli import _parser
from testkit.builders import make_node, make_pod, make_raycluster, uid_for
from testkit.volcano_objects import task_info
from tests.conftest import ServerThread, post_json

SECRET = "s3cr3t-token-do-not-log"
CLUSTER = make_raycluster("rc").autoscaling().group("base", replicas=2, min=2, max=2) \
    .group("over", replicas=6, min=0, max=8).obj()
NODES = [make_node("cpu-1").obj(), make_node("gpu-1").gpus(8).obj()]


def _pod(name: str, group: str = "base", node: str = "") -> dict[str, Any]:
    builder = make_pod(name).ray("rc", group).requests(cpu="4") \
        .annotate("example.com/api-token", SECRET).label("secret-label", SECRET)
    return (builder.on(node) if node else builder).obj()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``configure`` sets the root logger up for the process; put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    own = {name: logging.getLogger(name).level for name in logs.OWN_LOGGERS}
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in own.items():
        logging.getLogger(name).setLevel(old)


def _lines(text: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in text.splitlines() if line]
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
    return lines


def test_json_line_carries_level_logger_message_and_time() -> None:
    record = logging.LogRecord("raygate.scheduler", logging.WARNING, __file__, 1,
                               "filter %s: %d nodes", ("ray/b1", 3), None)
    record.created = 1_800_000_000.25
    line = json.loads(logs.JsonFormatter().format(record))
    assert line == {"time": "2027-01-15T08:00:00.250Z", "level": "warning",
                    "logger": "raygate.scheduler", "message": "filter ray/b1: 3 nodes"}


@pytest.mark.parametrize(("extra", "fields"), [
    (logs.about(namespace="ray", pod="w-1", raycluster="rc", verb="scheduler/filter"),
     {"namespace": "ray", "pod": "w-1", "raycluster": "rc", "verb": "scheduler/filter"}),
    (logs.about(namespace="ray", raycluster="rc"), {"namespace": "ray", "raycluster": "rc"}),
    (logs.about(namespace="ml", pod="", verb=""), {"namespace": "ml"}),  # empty: left out
    ({}, {}),
])
def test_json_line_carries_what_it_is_about_as_fields(
    extra: dict[str, str], fields: dict[str, str],
) -> None:
    logger = logging.getLogger("raygate.test.fields")
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "pod %s", ("ray/w-1",),
                               None, extra=extra)
    line = json.loads(logs.JsonFormatter().format(record))
    assert {k: v for k, v in line.items() if k in logs.FIELDS} == fields
    assert line["message"] == "pod ray/w-1"
    # The text format is the message alone, as before: it names them already.
    text = logging.Formatter(logs.TEXT_FORMAT).format(record)
    assert text.endswith("INFO raygate.test.fields: pod ray/w-1")


def test_json_exception_stays_on_one_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord("raygate.http", logging.ERROR, __file__, 1, "failed", (),
                                   sys.exc_info())
    text = logs.JsonFormatter().format(record)
    assert "\n" not in text
    line = json.loads(text)
    assert line["level"] == "error"
    assert "RuntimeError: boom" in line["exception"]


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(("stream", "chosen"), [(io.StringIO(), "json"), (_Tty(), "text")])
def test_auto_is_text_on_a_terminal_and_json_elsewhere(stream: io.StringIO, chosen: str) -> None:
    assert logs.configure("info", "auto", stream) == chosen
    logging.getLogger("raygate.test").info("hello %s", "there")
    out = stream.getvalue()
    if chosen == "json":
        assert _lines(out)[-1]["message"] == "hello there"
    else:
        assert out.rstrip().endswith("INFO raygate.test: hello there")


@pytest.mark.usefixtures("restore_logging")
def test_debug_is_for_raygate_loggers_only() -> None:
    stream = io.StringIO()
    logs.configure("debug", "json", stream)
    logging.getLogger("raygate.scheduler").debug("mine")
    # The Kubernetes client and urllib3 log whole bodies and headers at debug.
    logging.getLogger("kubernetes.client.rest").debug("response body: {...pod...}")
    logging.getLogger("urllib3.connectionpool").debug("Authorization: Bearer x")
    logging.getLogger("urllib3.connectionpool").warning("retrying")
    assert [line["message"] for line in _lines(stream.getvalue())] == ["mine", "retrying"]


def test_configure_refuses_unknown_values() -> None:
    with pytest.raises(ValueError, match="log format 'xml'"):
        logs.configure("info", "xml")
    with pytest.raises(ValueError, match="log level 'loud'"):
        logs.configure("loud", "json")


def test_cli_log_format_option() -> None:
    assert _parser().parse_args(["serve"]).log_format == "auto"
    assert _parser().parse_args(["serve", "--log-format", "json"]).log_format == "json"
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--log-format", "xml"])


@pytest.mark.usefixtures("restore_logging")
def test_one_debug_line_per_decision_and_never_a_pod(
    server: ServerThread, client: httpx.Client
) -> None:
    server.publish(*NODES, CLUSTER, _pod("b1", node="gpu-1"), _pod("b2", node="cpu-1"),
                   _pod("o1", "over", node="gpu-1"))
    stream = io.StringIO()
    logs.configure("debug", "json", stream)
    names = ["cpu-1", "gpu-1"]
    post_json(client, "/scheduler/filter", {"Pod": _pod("b3"), "NodeNames": names})
    post_json(client, "/scheduler/prioritize", {"Pod": _pod("o2", "over"), "NodeNames": names})
    post_json(client, "/volcano/predicate", {"task": task_info(_pod("b4")),
                                             "node": {"Name": "gpu-1"}})
    # Preempt with a floor victim: raygate protects it and says so at info.
    post_json(client, "/scheduler/preempt", {"Pod": make_pod("t", "ml").requests(
        cpu="8", nvidia_com_gpu="4").priority(100).obj(), "NodeNameToMetaVictims": {
        "gpu-1": {"Pods": [{"UID": uid_for("Pod", "ray", "b1")},
                           {"UID": uid_for("Pod", "ray", "o1")}]}}})
    client.post("/scheduler/filter", content=json.dumps({"Pod": {"metadata": SECRET}}))
    lines = _lines(stream.getvalue())
    decisions = [line for line in lines if line["level"] == "debug"
                 and line["logger"] in ("raygate.scheduler", "raygate.volcano")]
    # preempt decides the preemptor's placement as filter does (it drops the nodes filter
    # would refuse): a decision, so a line too.
    assert [d["message"].split(":")[0] for d in decisions] == [
        "filter ray/b3", "prioritize ray/o2", "predicate ray/b4", "preempt ml/t"]
    # What each line is about, as fields of their own.
    assert [{k: d.get(k) for k in logs.FIELDS} for d in decisions] == [
        {"namespace": "ray", "pod": "b3", "raycluster": "rc", "verb": "scheduler/filter"},
        {"namespace": "ray", "pod": "o2", "raycluster": "rc", "verb": "scheduler/prioritize"},
        {"namespace": "ray", "pod": "b4", "raycluster": "rc", "verb": "volcano/predicate"},
        {"namespace": "ml", "pod": "t", "raycluster": None, "verb": "scheduler/preempt"}]
    (preempt,) = [line for line in lines if line["level"] == "info"
                  and line["message"].startswith("preempt ml/t on gpu-1: protected ['ray/b1 (")]
    assert {k: preempt.get(k) for k in logs.FIELDS} == {
        "namespace": "ml", "pod": "t", "raycluster": None, "verb": "scheduler/preempt"}
    text = stream.getvalue()
    assert SECRET not in text
    for key in ("containers", "annotations", "\\\"spec\\\"", "resources"):
        assert key not in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve_writes_json_lines_when_not_on_a_terminal() -> None:
    http, grpc_port = _free_port(), _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "raygate", "serve", "--demo", "--log-level", "debug",
         "--http-addr", f"127.0.0.1:{http}", "--grpc-addr", f"127.0.0.1:{grpc_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{http}/readyz")
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[0]
                assert time.monotonic() < deadline, "raygate did not start"
                time.sleep(0.05)
        pod = make_pod("w", "default").requests(cpu="1").obj()
        httpx.post(f"http://127.0.0.1:{http}/scheduler/filter",
                   json={"Pod": pod, "NodeNames": ["a"]})
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0]
    assert process.returncode == 0, output
    lines = _lines(output)
    messages = [line["message"] for line in lines]
    assert any(m.startswith("loaded demo cluster") for m in messages), messages
    assert "filter default/w: unmanaged (not-a-ray-pod): not a Ray pod" in messages
