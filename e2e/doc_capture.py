"""A page's command blocks run on the testbed: each is checked against what the real
components print now, or rewritten from it.

A captured block in a page is an HTML comment naming its step, then a ``console`` block
of commands (``$ ``) each followed by its output::

    <!-- capture: pods -->
    ```console
    $ kubectl -n ray get pods -L raygate.io/role,raygate.io/rule
    NAME                  READY   STATUS    RESTARTS   AGE   ROLE   RULE
    ...
    ```

``Page.step(name)`` runs that block's commands in order, in one ``bash`` (so a shell
variable set by one command is there for the next), stderr with stdout, as an operator's
terminal shows them. Then, by default, each output must equal the page's once both are
``normalised``: what changes from one run to the next (ages, names' random suffixes, UIDs,
addresses, times, metric values, column widths, the order of rows named by such names) is
left out of the comparison, nothing else. With ``RAYGATE_CAPTURE_DOCS=1`` the block's
outputs are rewritten in the page from this run instead: a page's outputs are only ever
what the testbed printed.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CAPTURE", "Block", "Page", "blocks", "normalised", "render"]

CAPTURE = os.environ.get("RAYGATE_CAPTURE_DOCS", "") == "1"
PROMPT = "$ "
_BLOCK = re.compile(r"^(?P<indent>[ ]*)<!-- capture: (?P<name>[\w-]+) -->\n"
                    r"(?P=indent)```console\n(?P<body>.*?)^(?P=indent)```$", re.S | re.M)
_SEPARATOR = "@@raygate-doc-capture@@"
ID = "<id>"

# What varies between two runs on the same cluster, in the order it is replaced.
_VARYING: tuple[tuple[re.Pattern[str], str], ...] = (
    # A generated name's suffix (KubeRay's pods, kube-api-access volumes): 5 of the API
    # server's consonants and digits after a dash.
    (re.compile(r"(?<=[a-z0-9]-)[bcdfghjklmnpqrstvwxz2456789]{5}\b"), ID),
    (re.compile(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b"), "<uid>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<address>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d [+-]\d{4}"), "<time>"),
    (re.compile(r"\b[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4} GMT\b"), "<time>"),
    # An event seen again: "12s (x3 over 40s)".
    (re.compile(r" ?\(x\d+ over [^)]*\)"), ""),
    (re.compile(r"(?<![\w.])\d+(?:ms|[smhdy])(?:\d+(?:ms|[smh]))*(?![\w.])|<invalid>"),
     "<age>"),
    # A Prometheus sample: the series stays, its value goes.
    (re.compile(r"^([a-zA-Z_:][\w:]*(?:\{.*\})?) \S+$", re.M), r"\1 <value>"),
    (re.compile(r"[ \t]+"), " "),
)


def normalised(output: str) -> list[str]:
    """``output`` without what varies between runs, a line each; rows named by a
    generated name (``<id>``), next to each other, sorted: they list in name order."""
    text = output
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    lines = [line.strip() for line in text.strip("\n").splitlines()]
    ordered: list[str] = []
    run: list[str] = []
    for line in [*lines, ""]:
        if ID in line:
            run.append(line)
            continue
        ordered += sorted(run)
        run = []
        ordered.append(line)
    return ordered[:-1]


@dataclass
class Block:
    """One captured block: its step's name, commands and their outputs as the page has
    them, and where it sits in the page."""

    name: str
    indent: str
    commands: list[str]
    outputs: list[str]
    span: tuple[int, int]


def blocks(text: str) -> dict[str, Block]:
    """The page's captured blocks by step name (each name once)."""
    found: dict[str, Block] = {}
    for match in _BLOCK.finditer(text):
        indent = match["indent"]
        commands: list[str] = []
        outputs: list[list[str]] = []
        for raw in match["body"].splitlines():
            line = raw.removeprefix(indent)
            if commands and commands[-1].endswith("\\") and not outputs[-1]:
                commands[-1] += "\n" + line  # a command continued on the next line
            elif line.startswith(PROMPT):
                commands.append(line.removeprefix(PROMPT))
                outputs.append([])
            elif commands:
                outputs[-1].append(line)
        if match["name"] in found:
            raise ValueError(f"two blocks capture the step {match['name']!r}")
        found[match["name"]] = Block(match["name"], indent, commands,
                                     ["\n".join(o) for o in outputs], match.span("body"))
    return found


def render(block: Block, outputs: list[str]) -> str:
    """The block's body with ``outputs``, trailing blanks dropped."""
    lines: list[str] = []
    for command, output in zip(block.commands, outputs, strict=True):
        lines += [*(PROMPT + command).split("\n"), *output.splitlines()]
    return "".join(f"{block.indent}{line}".rstrip() + "\n" for line in lines)


@dataclass
class Page:
    """A page whose blocks run with ``env`` in ``cwd``. ``addresses`` maps what the page
    says (``localhost:8888``, a port-forward) to where the testbed serves it: replaced in
    each command before it runs, and back in its output."""

    path: Path
    env: Mapping[str, str]
    cwd: Path
    addresses: Mapping[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def step(self, name: str) -> None:
        """Run the block of step ``name``; check its outputs, or rewrite them."""
        block = blocks(self.path.read_text()).get(name)
        assert block is not None, f"{self.path.name} has no block <!-- capture: {name} -->"
        outputs = self.run(block.commands)
        self.ran.append(name)
        if CAPTURE:
            text = self.path.read_text()
            block = blocks(text)[name]
            start, end = block.span
            self.path.write_text(text[:start] + render(block, outputs) + text[end:])
            return
        problems = [self._diff(command, said, now) for command, said, now
                    in zip(block.commands, block.outputs, outputs, strict=True)]
        problems = [p for p in problems if p]
        assert not problems, (f"{self.path.name}, step {name!r}: the testbed prints "
                              "otherwise now (RAYGATE_CAPTURE_DOCS=1 rewrites the page "
                              "from a run)\n" + "\n".join(problems))

    def run(self, commands: list[str]) -> list[str]:
        script = ["set +e", *(f"{{ {self._here(c)}\n}} 2>&1; printf '\\n%s\\n' "
                              f"{_SEPARATOR}" for c in commands)]
        done = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True,
                              text=True, env=dict(self.env), cwd=self.cwd, timeout=120,
                              check=False)
        parts = done.stdout.split(f"\n{_SEPARATOR}\n")
        assert len(parts) == len(commands) + 1, done.stdout + done.stderr
        return [self._there(part).strip("\n") for part in parts[:-1]]

    def missing(self) -> list[str]:
        """The page's blocks no step ran."""
        return sorted(set(blocks(self.path.read_text())) - set(self.ran))

    def _here(self, command: str) -> str:
        for said, real in self.addresses.items():
            command = command.replace(said, real)
        return command

    def _there(self, output: str) -> str:
        for said, real in self.addresses.items():
            output = output.replace(real, said)
        return output

    @staticmethod
    def _diff(command: str, said: str, now: str) -> str:
        before, after = normalised(said), normalised(now)
        if before == after:
            return ""
        lines = difflib.unified_diff(before, after, "the page", "the testbed", lineterm="")
        return f"$ {command}\n" + "\n".join(lines)
