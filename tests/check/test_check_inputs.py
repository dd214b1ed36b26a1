"""`raygate check` on what it is given: a table of bad inputs (each case of issue #21's
list among them), stdin, the summary, the CLI's JSON output and exit codes, documents
checked independently, other tools' documents, Helm charts and folders."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raygate.policy.config import PolicyConfig
from raygate.policy.lint.model import Severity
from raygate.server.check.inputs import DEFAULT_MAX_BYTES
from raygate.server.check.report import EXIT_CLEAN, EXIT_FOUND, EXIT_NOTHING, EXIT_UNUSABLE
from raygate.server.check.run import check_files, run_check
from raygate.server.cli import main
from testkit.builders import Obj
from tests.check.manifests import GROUPS, cron, embedded, good, with_

# The table of bad inputs: what a file holds, what `raygate check` must say of it.

def _yaml(*objects: object) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


@dataclass(frozen=True)
class Bad:
    name: str
    content: str | bytes | Callable[[Path], None]
    """The file's text, or something that writes it."""
    exit_code: int
    findings: list[tuple[str, str]] = field(default_factory=list)
    """(id, a part of its message or path) of each finding, in order."""
    summary: str = ""
    stderr: str = ""
    args: tuple[str, ...] = ()
    object: str = ""
    """What the findings name, when that is the point of the case."""


def generated() -> Obj:
    cluster = good()
    cluster["metadata"]["generateName"] = f"{cluster['metadata'].pop('name')}-"
    return cluster


def _huge_base64(path: Path) -> None:
    with path.open("wb") as file:
        for _ in range(50):
            file.write(b"QUJD" * (2**18))  # 1 MiB of base64 at a time


TYPE_ERRORS = _yaml(
    with_(with_(good(), f"{GROUPS}.0.replicas", "two"), f"{GROUPS}.1.maxReplicas", [8]),
    with_(embedded("RayJob", good()), "spec.rayClusterSpec.enableInTreeAutoscaling", "yes"))
BAD_INPUTS = [
    Bad("an empty file", "", EXIT_NOTHING, [],
        "0 Ray objects in 1 file against KubeRay v1.7.0: no findings"),
    Bad("comments and empty documents only", "# nothing\n---\n---\n", EXIT_NOTHING),
    Bad("a ConfigMap", _yaml({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "c"}, "data": {"a": "b"}}), EXIT_NOTHING,
        [], "0 Ray objects in 1 file against KubeRay v1.7.0: no findings; not Ray, left "
            "alone: 1 ConfigMap"),
    *(Bad(f"someone else's {kind} (not a misspelled Ray kind)",
          _yaml({"apiVersion": api, "kind": kind, "metadata": {"name": "x"}}), EXIT_NOTHING)
      for api, kind in (("v1", "Service"), ("batch/v1", "CronJob"),
                        ("cluster.x-k8s.io/v1beta1", "Cluster"))),
    Bad("a RayCluster and the Redis Service beside it", _yaml(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "redis"}}, good()),
        EXIT_CLEAN, [], "1 RayCluster in 1 file against KubeRay v1.7.0: no findings; not "
                        "Ray, left alone: 1 Service"),
    Bad("a bare string", "just some text\n", EXIT_FOUND,
        [("RG102", "a string, not a Kubernetes object")],
        "0 Ray objects in 1 file against KubeRay v1.7.0: 1 error"),
    Bad("a bare list", "[1, 2]", EXIT_FOUND, [("RG102", "a list")]),
    Bad("kind: RayClustr", _yaml(with_(good(), "kind", "RayClustr")), EXIT_FOUND,
        [("RG103", "unknown kind 'RayClustr' (did you mean 'RayCluster'?)")]),
    Bad("kind: Raycluster under apiVersion v1", _yaml(with_(with_(
        good(), "kind", "Raycluster"), "apiVersion", "v1")), EXIT_FOUND,
        [("RG103", "did you mean 'RayCluster'?")]),
    Bad("an unknown ray.io kind", _yaml(with_(good(), "kind", "RayThing")), EXIT_FOUND,
        [("RG103", "unknown kind 'RayThing'")]),
    Bad("a RayCluster under another group", _yaml(with_(good(), "apiVersion", "ray.dev/v1")),
        EXIT_FOUND, [("RG103", "served as ray.io/v1, not ray.dev/v1")]),
    Bad("a RayJob whose rayClusterSpec breaks RG004",
        _yaml(embedded("RayJob", with_(good(), f"{GROUPS}.1.minReplicas", 9))),
        EXIT_FOUND, [("RG004", "spec.rayClusterSpec.workerGroupSpecs[1].minReplicas")],
        "1 RayJob in 1 file against KubeRay v1.7.0: 1 error"),
    Bad("50 MB of base64", _huge_base64, EXIT_UNUSABLE, [],
        "0 Ray objects in 0 files (1 file not read) against KubeRay v1.7.0: no findings",
        "50 MiB, over the size limit of 8 MiB (--max-size)"),
    Bad("a file over a --max-size given", _yaml(good()), EXIT_UNUSABLE, [],
        stderr="over the size limit of 200 bytes", args=("--max-size", "200")),
    Bad("minReplicas -1", _yaml(with_(good(), f"{GROUPS}.1.minReplicas", -1)), EXIT_FOUND,
        [("RG011", "has minReplicas -1")]),
    Bad("a missing headGroupSpec", _yaml(with_(good(), "spec.headGroupSpec", None)),
        EXIT_FOUND, [("RG105", "spec.headGroupSpec")]),
    Bad("no spec at all", _yaml({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                 "metadata": {"name": "rc"}}),
        EXIT_FOUND, [("RG105", "spec")]),
    Bad("several type errors in one file, all reported", TYPE_ERRORS, EXIT_FOUND,
        [("RG105", f"{GROUPS}[0].replicas"), ("RG105", f"{GROUPS}[1].maxReplicas"),
         ("RG105", "spec.rayClusterSpec.enableInTreeAutoscaling")],
        "1 RayCluster, 1 RayJob in 1 file against KubeRay v1.7.0: 3 errors"),
    Bad("a syntax error loses only its own document",
        _yaml(with_(good(), f"{GROUPS}.1.minReplicas", 9)) + "---\n{ broken: [\n---\n"
        + _yaml(with_(good(), f"{GROUPS}.0.replicas", 1)), EXIT_FOUND,
        [("RG004", "minReplicas"), ("RG101", "not valid YAML"), ("RG005", "replicas")],
        "2 RayClusters in 1 file against KubeRay v1.7.0: 2 errors, 1 warning"),
    Bad("a key given twice (kubectl's strict decoding refuses it)",
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: rc}\nspec:\n"
        "  headGroupSpec: {template: {spec: {containers: []}}}\n"
        "  headGroupSpec: {rayStartParams: {}}\n", EXIT_FOUND,
        [("RG101", "duplicate key 'headGroupSpec' at line 6, column 3")]),
    Bad("YAML aliases that expand a billion times",
        'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
            f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
            f"*{chr(97 + i)},*{chr(97 + i)}]\n" for i in range(8)),
        EXIT_FOUND, [("RG101", "aliases expand it")]),
    Bad("not UTF-8", b"\xff\xfe\x00k\x00i\x00n\x00d", EXIT_UNUSABLE, [], stderr="not UTF-8"),
    Bad("a RayCronJob: its jobTemplate's RayCluster checked", _yaml(
        cron(with_(good(), f"{GROUPS}.1.minReplicas", 9))), EXIT_FOUND,
        [("RG004", "spec.jobTemplate.rayClusterSpec.workerGroupSpecs[1].minReplicas")],
        "1 RayCronJob in 1 file against KubeRay v1.7.0: 1 error"),
    Bad("a KubeRay 1.7 field", _yaml(with_(good(), "spec.networkPolicy", {"mode": "DenyAll"})),
        EXIT_CLEAN),
    Bad("a KubeRay 1.7 field checked against 1.6",
        _yaml(with_(good(), "spec.networkPolicy", {"mode": "DenyAll"})), EXIT_FOUND,
        [("RG105", "spec.networkPolicy")],
        "1 RayCluster in 1 file against KubeRay v1.6.1: 1 error",
        args=("--kuberay-version", "1.6")),
    Bad("a worker group's priority (new in KubeRay 1.7) against 1.6",
        _yaml(with_(good(), f"{GROUPS}.1.priority", 10)), EXIT_FOUND,
        [("RG105", f"{GROUPS}[1].priority")], args=("--kuberay-version", "1.6")),
    Bad("a worker group's priority against 1.7",
        _yaml(with_(good(), f"{GROUPS}.1.priority", 10)), EXIT_CLEAN),
    Bad("an object named by generateName, shown by it", _yaml(with_(
        generated(), f"{GROUPS}.1.minReplicas", 9)), EXIT_FOUND,
        [("RG004", "minReplicas")], object="RayCluster ray/rc-<generated>"),
    Bad("ray.io/v1alpha1, checked as v1", _yaml(with_(good(), "apiVersion", "ray.io/v1alpha1")),
        EXIT_CLEAN, [("RG103", "checked as ray.io/v1")]),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c.name for c in BAD_INPUTS])
def test_bad_inputs(case: Bad, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "input.yaml"
    if callable(case.content):
        case.content(path)
    elif isinstance(case.content, bytes):
        path.write_bytes(case.content)
    else:
        path.write_text(case.content)
    assert main(["check", *case.args, "--output", "json", str(path)]) == case.exit_code
    captured = capsys.readouterr()
    reply = json.loads(captured.out)
    found = reply["findings"]
    assert len(found) == len(case.findings), found
    for finding, (rule, text) in zip(found, case.findings, strict=True):
        assert finding["id"] == rule
        assert text in finding["message"] + finding["path"], finding
        assert finding["file"] == str(path)
        assert case.object in finding["object"]
    assert reply["summary"]["exit_code"] == case.exit_code
    if case.summary:
        assert reply["summary"]["text"] == case.summary
    assert case.stderr in captured.err
    assert bool(captured.err) == bool(case.stderr)


def test_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    """`-` reads stdin; a stream gets the size limit too, read no further than it."""
    manifest = _yaml(with_(good(), f"{GROUPS}.1.minReplicas", 9)).encode()
    out = io.StringIO()
    assert run_check(["-"], "text", False, PolicyConfig(), stdin=io.BytesIO(manifest),
                     out=out) == EXIT_FOUND
    assert out.getvalue().startswith("<stdin>:1: RG004 error   RayCluster ray/rc  ")
    assert out.getvalue().endswith("\n1 RayCluster in 1 file against KubeRay v1.7.0: 1 error\n")

    stream = io.BytesIO(b"QUJD" * (DEFAULT_MAX_BYTES // 2))
    errors = io.StringIO()
    report = check_files(["-"], PolicyConfig(), stdin=stream, errors=errors)
    assert report.unreadable == ["<stdin>: more than 8 MiB, over the size limit of 8 MiB "
                                 "(--max-size)"]
    assert stream.tell() == DEFAULT_MAX_BYTES + 1
    assert errors.getvalue() == f"raygate: {report.unreadable[0]}\n"


def test_summary_counts_and_lines(tmp_path: Path) -> None:
    """Three RayClusters in two files: an error (RG004), two warnings (RG002, RG005)."""
    first = tmp_path / "a.yaml"
    first.write_text(_yaml(with_(good(), f"{GROUPS}.1.minReplicas", 9),
                           with_(good(), f"{GROUPS}.1.numOfHosts", 2)))
    second = tmp_path / "b.yaml"
    second.write_text(_yaml(with_(good(), f"{GROUPS}.0.replicas", 1)))
    out = io.StringIO()
    assert run_check([str(first), str(second)], "text", False, PolicyConfig(),
                     out=out) == EXIT_FOUND
    lines = out.getvalue().splitlines()
    assert lines[-1] == "3 RayClusters in 2 files against KubeRay v1.7.0: 1 error, 2 warnings"
    second_document = first.read_text().splitlines().index("---") + 1
    assert [line.split(" ")[:2] for line in lines if not line.startswith(" ")][:-1] == [
        [f"{first}:1:", "RG004"], [f"{first}:{second_document}:", "RG002"],
        [f"{second}:1:", "RG005"]]


def test_a_file_not_read_leaves_the_others_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean = tmp_path / "clean.yaml"
    clean.write_text(_yaml(good()))
    assert main(["check", str(tmp_path / "missing.yaml"), str(clean)]) == EXIT_UNUSABLE
    captured = capsys.readouterr()
    assert "missing.yaml: cannot read: No such file or directory" in captured.err
    assert captured.out == ("1 RayCluster in 1 file (1 file not read) against KubeRay v1.7.0: "
                            "no findings\n")


def test_cli_json_output_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = tmp_path / "error.json"
    error.write_text(json.dumps(with_(good(), f"{GROUPS}.1.minReplicas", 9)))
    warning = tmp_path / "warning.json"
    warning.write_text(json.dumps(with_(good(), f"{GROUPS}.1.numOfHosts", 2)))
    assert main(["check", "--output", "json", str(error)]) == EXIT_FOUND
    reply = json.loads(capsys.readouterr().out)
    assert reply["findings"] == [{
        "id": "RG004", "severity": "error", "object": "RayCluster ray/rc",
        "path": f"{GROUPS}[1].minReplicas",
        "message": "worker group 'over' has minReplicas 9 > maxReplicas 8",
        "fix": "make minReplicas <= maxReplicas", "file": str(error), "line": None}]
    assert reply["summary"] == {
        "text": "1 RayCluster in 1 file against KubeRay v1.7.0: 1 error", "files": 1,
        "checked": {"RayCluster": 1}, "errors": 1, "warnings": 0, "info": 0, "unreadable": [],
        "skipped": {}, "kuberay": "v1.7.0", "exit_code": 1}
    assert main(["check", str(warning)]) == EXIT_CLEAN
    assert "RG002 warning" in capsys.readouterr().out
    assert main(["check", "--strict", str(warning)]) == EXIT_FOUND
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["check", "--strict", str(empty)]) == EXIT_NOTHING  # not 1: nothing to fail
    assert main(["check", str(empty), str(warning)]) == EXIT_CLEAN
    assert main(["check", "--strict", str(empty), str(warning)]) == EXIT_FOUND
    capsys.readouterr()
    with pytest.raises(SystemExit) as usage:
        main(["check", "--max-size", "lots", str(warning)])
    assert usage.value.code == EXIT_UNUSABLE
    assert "not a size in bytes: 'lots'" in capsys.readouterr().err


# A bad document never changes what is said of the others: checking documents together
# says what checking each alone says, in order, and counts each Ray object once.
DOCUMENTS = [
    _yaml(good()),
    _yaml(with_(good(), f"{GROUPS}.1.minReplicas", 9)),
    _yaml(with_(good(), f"{GROUPS}.0.replicas", "two")),
    _yaml(embedded("RayJob", with_(good(), "spec.enableInTreeAutoscaling", False))),
    _yaml(with_(good(), "kind", "RayClustr")),
    _yaml({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    "plain text\n",
    "{ broken: [\n",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.sampled_from(range(len(DOCUMENTS))), min_size=1, max_size=6))
def test_documents_are_checked_independently(picks: list[int], tmp_path: Path) -> None:
    def said(text: str) -> tuple[list[tuple[str, str, str]], int]:
        path = tmp_path / "doc.yaml"
        path.write_text(text)
        report = check_files([str(path)], PolicyConfig())
        return ([(f.finding.id, f.finding.path, re.sub(r"line \d+", "line N", f.finding.message))
                 for f in report.findings if f.finding.id != "RG104"],
                sum(report.checked.values()))

    alone = [said(DOCUMENTS[i]) for i in picks]
    together = said("---\n".join(DOCUMENTS[i] for i in picks))
    assert together == ([f for found, _ in alone for f in found], sum(n for _, n in alone))


@pytest.mark.parametrize(("document", "left_alone"), [
    ({"groups": [{"name": "g", "rules": []}]}, "Prometheus rule file"),
    ({"panels": [], "schemaVersion": 39, "title": "t"}, "Grafana dashboard"),
    ({"groups": []}, None),  # nothing says it is a rule file: no kind is RG102 still
    ({"groups": [{"name": "g"}]}, None),
    ({"kind": "", "groups": [{"rules": []}]}, None),  # meant as a Kubernetes object
])
def test_other_tools_documents_are_left_alone(tmp_path: Path, document: Obj,
                                             left_alone: str | None) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document))
    report = check_files([str(path)], PolicyConfig())
    assert [f.finding.id for f in report.findings] == ([] if left_alone else ["RG102"])
    assert dict(report.skipped) == ({left_alone: 1} if left_alone else {})


@pytest.mark.parametrize("given", ["folder", "chart"])
def test_a_helm_chart_in_a_folder_is_one_hint_to_render_it(tmp_path: Path, given: str) -> None:
    """A chart's templates are manifests only once helm renders them and its values files
    never are: one RG106 hint naming the command, not an error per file; the manifests
    beside it are checked as before."""
    chart = tmp_path / "charts" / "ray"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: ray\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("replicas: 2\n")
    (chart / "templates" / "rc.yaml").write_text(
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata:\n  name: {{ .Release.Name }}\n"
        "spec:\n  {{- toYaml .Values.spec | nindent 2 }}\n")
    (tmp_path / "rc.yaml").write_text(_yaml(with_(good(), f"{GROUPS}.1.minReplicas", 9)))
    report = check_files([str(tmp_path if given == "folder" else chart)], PolicyConfig())
    found = [(f.file, f.finding.id, f.finding.severity) for f in report.findings]
    hint = (str(chart / "Chart.yaml"), "RG106", Severity.INFO)
    if given == "folder":
        assert found == [(str(tmp_path / "rc.yaml"), "RG004", Severity.ERROR), hint]
    else:
        assert found == [hint]
        assert report.exit_code(strict=True) == EXIT_NOTHING
    (located,) = [f for f in report.findings if f.finding.id == "RG106"]
    assert located.finding.fix == f"render it first: helm template ray {chart} [-f VALUES] " \
        "| raygate check -"


def test_a_folder_is_read_like_kubectl_apply_f(tmp_path: Path) -> None:
    """Its .yaml, .yml and .json files, its subfolders' too, in name order; others not."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.yml").write_text(_yaml(with_(good(), f"{GROUPS}.1.minReplicas", 9)))
    (tmp_path / "a.json").write_text(json.dumps(with_(good(), f"{GROUPS}.0.replicas", 1)))
    (tmp_path / "README.md").write_text("# not a manifest\n")
    report = check_files([str(tmp_path)], PolicyConfig())
    assert (report.files, [(f.file, f.finding.id) for f in report.findings]) == (
        2, [(str(tmp_path / "a.json"), "RG005"), (str(tmp_path / "b" / "two.yml"), "RG004")])
