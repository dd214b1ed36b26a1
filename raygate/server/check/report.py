"""What ``raygate check`` found, as a table or JSON, with its summary and exit status."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

import msgspec

from raygate.policy.lint.manifest import RAY_KINDS
from raygate.policy.lint.model import Finding, LintCluster, Severity
from raygate.server.check import schema

__all__ = ["EXIT_CLEAN", "EXIT_FOUND", "EXIT_NOTHING", "EXIT_UNUSABLE", "Located", "Report",
           "render"]

EXIT_CLEAN = 0
EXIT_FOUND = 1  # an error (with --strict, also a warning)
EXIT_UNUSABLE = 2  # a usage error, or a file that could not be read at all
EXIT_NOTHING = 3  # no Ray object in any file (or the cluster), and no error either


@dataclass(frozen=True, slots=True)
class Located:
    finding: Finding
    file: str = ""
    line: int | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass
class Report:
    findings: list[Located] = field(default_factory=list)
    files: int = 0
    """Files read (unreadable ones are in ``unreadable``); 0 for a live cluster."""
    live: bool = False
    checked: Counter[str] = field(default_factory=Counter)
    """Ray objects checked, by kind."""
    clusters: list[LintCluster] = field(default_factory=list)
    """What the rules saw of each RayCluster checked (embedded ones too)."""
    unreadable: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    """Objects that are not KubeRay's, by kind: read, and left alone."""
    kuberay: str | None = schema.DEFAULT_VERSION
    """The KubeRay version whose CRDs the files were checked against; live, the one whose
    RayCluster CRD the cluster serves (None: one raygate does not ship, or unread)."""
    served: bool = False
    """Live: the findings were read against the RayCluster schema the cluster serves."""

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.finding.severity is severity)

    def exit_code(self, strict: bool) -> int:
        if self.unreadable:
            return EXIT_UNUSABLE
        failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
        if any(f.finding.severity in failing for f in self.findings):
            return EXIT_FOUND
        return EXIT_NOTHING if not self.checked else EXIT_CLEAN

    def summary(self) -> str:
        """``3 RayClusters in 2 files against KubeRay v1.7.0: 2 errors, 1 warning; not Ray,
        left alone: 2 Service, 1 ConfigMap``."""
        kinds = [_count(self.checked[k], k) for k in RAY_KINDS if self.checked[k]]
        where = "in the cluster" if self.live else f"in {_count(self.files, 'file')}"
        against = f" against KubeRay {schema.release(self.kuberay)}" if self.kuberay else ""
        if self.served:
            against = (f" against KubeRay {schema.release(self.kuberay)}'s RayCluster CRD, "
                       "which it serves" if self.kuberay else " against the RayCluster CRD it "
                       "serves")
        tally = [_count(self.count(s), s.value) for s in Severity if self.count(s)]
        unreadable = f" ({_count(len(self.unreadable), 'file')} not read)" \
            if self.unreadable else ""
        skipped = ", ".join(f"{n} {kind}" for kind, n in sorted(self.skipped.items()))
        return (f"{', '.join(kinds) or '0 Ray objects'} {where}{unreadable}{against}: "
                f"{', '.join(tally) or 'no findings'}"
                f"{f'; not Ray, left alone: {skipped}' if skipped else ''}")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 or word == 'info' else 's'}"


class _JsonFinding(msgspec.Struct):
    id: str
    severity: str
    object: str
    path: str
    message: str
    fix: str
    file: str
    line: int | None


class _JsonSummary(msgspec.Struct):
    text: str
    files: int
    checked: dict[str, int]
    errors: int
    warnings: int
    info: int
    unreadable: list[str]
    skipped: dict[str, int]
    kuberay: str | None
    exit_code: int


class _JsonReport(msgspec.Struct):
    findings: list[_JsonFinding]
    summary: _JsonSummary


def render(report: Report, output: str, strict: bool, out: TextIO) -> None:
    if output == "json":
        out.write(msgspec.json.encode(_JsonReport(
            [_JsonFinding(f.id, f.severity.value, f.object, f.path, f.message, f.fix, at.file,
                          at.line) for at in report.findings for f in (at.finding,)],
            _JsonSummary(report.summary(), report.files, dict(report.checked),
                         report.count(Severity.ERROR), report.count(Severity.WARNING),
                         report.count(Severity.INFO), report.unreadable,
                         dict(report.skipped),
                         schema.release(report.kuberay) if report.kuberay else None,
                         report.exit_code(strict)))).decode() + "\n")
        return
    for at in report.findings:
        f = at.finding
        head = " ".join(part for part in (f"{at.where}:" if at.where else "", f.id,
                                          f"{f.severity.value:<7}", f.object) if part)
        out.write(f"{head.rstrip()}{f'  {f.path}' if f.path else ''}\n"
                  f"    {f.message}\n    fix: {f.fix}\n")
    out.write(report.summary() + "\n")
