"""e2e/doc_capture.py, which holds a page's command blocks to what the testbed prints:
what its comparison leaves out (only what varies from run to run), how it reads and
rewrites a page, and how it runs a block's commands."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from e2e import doc_capture
from e2e.doc_capture import Page, blocks, normalised, render

PODS = """\
NAME                             READY   STATUS    RESTARTS   AGE   ROLE    RULE
ray-demo-baseline-worker-6jqnf   1/1     Running   0          1s    floor   floor-avoids-gpu
ray-demo-baseline-worker-7xlpx   0/1     Pending   0          1s    floor   floor-avoids-gpu
ray-demo-head-8qdjr              2/2     Running   0          1s    head    head-avoids-gpu"""
# The same pods in another run: other names (so another order), ages, column widths.
PODS_AGAIN = """\
NAME                             READY   STATUS    RESTARTS   AGE     ROLE    RULE
ray-demo-baseline-worker-2bfxq   0/1     Pending   0          2m13s   floor   floor-avoids-gpu
ray-demo-baseline-worker-zk4tw   1/1     Running   0          2m13s   floor   floor-avoids-gpu
ray-demo-head-9wwlc              2/2     Running   0          2m14s   head    head-avoids-gpu"""
MESSAGE = ("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node "
           "affinity/selector.")


@pytest.mark.parametrize(("said", "now"), [
    (PODS, PODS_AGAIN),
    ("raygate_placement_gates_total{result=\"gated\"} 3.0",
     "raygate_placement_gates_total{result=\"gated\"} 41.0"),
    ("apiserver_admission_webhook_request_total{code=\"200\"} 5",
     "apiserver_admission_webhook_request_total{code=\"200\"} 12"),
    ("url: https://127.0.0.1:33949/mutate/ray-pods", "url: https://10.0.3.7:443/mutate/ray-pods"),
    ("raygate.io/admitted: f25cbe81-5738-48bf-8565-84cb165a0c63",
     "raygate.io/admitted: 0b1c2d3e-4f50-4617-8899-aabbccddeeff"),
    ("notAfter=Dec  6 09:58:08 2026 GMT", "notAfter=Jan 12 23:01:59 2027 GMT"),
    ("since: 2026-12-04T09:55:01Z", "since: 2027-01-02T03:04:05.678Z"),
    ("Start Time: Thu, 04 Dec 2026 09:53:14 +0000", "Start Time: Fri, 05 Dec 2026 10:00:00 +0000"),
    (f"4s Warning FailedScheduling pod/ray-demo-baseline-worker-cjj67 {MESSAGE}",
     f"12s (x3 over 40s) Warning FailedScheduling pod/ray-demo-baseline-worker-q4lpc {MESSAGE}"),
    ("kube-api-access-xrd6n (ro)", "kube-api-access-b2w9q (ro)"),
    ("a line\n\n", "a line"),
])
def test_what_varies_between_runs_is_left_out(said: str, now: str) -> None:
    assert normalised(said) == normalised(now)


@pytest.mark.parametrize(("said", "now"), [
    # What the page is about: the scheduler's words, a role, a rule, a series, a count of
    # lines, a node, the order of rows that are not named by a generated name.
    (MESSAGE, MESSAGE.replace("node(s) didn't match Pod's node affinity/selector",
                              "raygate: floor-avoids-gpu: GPU node refused")),
    (PODS, PODS.replace("floor   floor-avoids-gpu", "surplus surplus-prefers-cpu", 1)),
    ("raygate_placement_gates_total{result=\"gated\"} 3.0",
     "raygate_placement_gates_total{result=\"failed_open\"} 3.0"),
    (PODS, "\n".join(PODS.splitlines()[:3])),
    ("ray-demo-head-8qdjr   cpu-1", "ray-demo-head-8qdjr   gpu-1"),
    ("Verify return code: 0 (ok)", "Verify return code: 7 (certificate signature failure)"),
    ("first\nsecond", "second\nfirst"),
])
def test_what_the_page_says_is_compared(said: str, now: str) -> None:
    assert normalised(said) != normalised(now)


PAGE = """\
# A page

<!-- capture: one -->
```console
$ echo one
one
$ true
```

1. In a list:

   <!-- capture: two -->
   ```console
   $ printf 'a\\nb\\n' \\
       | sort -r
   b
   a
   ```

```console
$ not captured
```
"""


def test_a_page_is_read_into_its_blocks_and_written_back_unchanged() -> None:
    found = blocks(PAGE)
    assert list(found) == ["one", "two"]
    assert (found["one"].commands, found["one"].outputs) == (["echo one", "true"], ["one", ""])
    two = found["two"]
    assert two.indent == "   "
    assert two.commands == ["printf 'a\\nb\\n' \\\n    | sort -r"]
    assert two.outputs == ["b\na"]
    for block in found.values():
        start, end = block.span
        assert render(block, block.outputs) == PAGE[start:end]


def test_a_step_named_twice_is_refused() -> None:
    twice = PAGE.replace("capture: two", "capture: one")
    with pytest.raises(ValueError, match="two blocks capture the step 'one'"):
        blocks(twice)


def page_at(tmp_path: Path, text: str) -> Page:
    path = tmp_path / "page.md"
    path.write_text(text)
    return Page(path, dict(os.environ), tmp_path, {"localhost:8888": "127.0.0.1:1"})


def test_a_step_runs_its_commands_in_one_shell_and_holds_their_output(tmp_path: Path) -> None:
    page = page_at(tmp_path, PAGE)
    page.step("two")
    page.step("one")
    assert page.ran == ["two", "one"]
    assert page.missing() == []
    changed = page_at(tmp_path, PAGE.replace("$ echo one\none", "$ echo one\nthree"))
    with pytest.raises(AssertionError) as failed:
        changed.step("one")
    assert "step 'one'" in str(failed.value)
    assert str(failed.value).endswith("$ echo one\n--- the page\n+++ the testbed\n"
                                      "@@ -1 +1 @@\n-three\n+one")
    assert changed.missing() == ["two"]


def test_a_capture_rewrites_the_outputs_from_the_run(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doc_capture, "CAPTURE", True)
    text = PAGE.replace("$ echo one\none\n$ true", "$ X=$(echo 127.0.0.1:1)\n$ echo \"$X\" 1>&2")
    page = page_at(tmp_path, text)
    page.step("one")
    # The variable set by one command is there for the next, stderr is shown, and the
    # address the page names stands for the testbed's.
    assert page.path.read_text() == text.replace('1>&2\n', '1>&2\nlocalhost:8888\n')
