"""Write the image's lock files from pyproject.toml: every package the Dockerfile installs,
pinned, with the hash of each of its files on PyPI (pip then installs them with
--require-hashes, on amd64 and arm64 alike).

    python requirements/lock.py          # rewrite requirements/*.txt (needs `pip install uv`)
    python requirements/lock.py --check  # fail if pyproject.toml changed since (offline)

- ``runtime.txt``: raygate's dependencies with its ``server`` extra, resolved for Linux
  and the image's Python (the Dockerfile's ``PYTHON_VERSION``).
- ``build.txt``: what builds raygate's wheel (``[build-system] requires``).

Each file's first lines name the sha256 of the inputs it was resolved from, so a test can
tell, without the network, that it is current.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "requirements"
DOCKERFILE = ROOT / "Dockerfile"
INPUTS_LINE = re.compile(r"^# inputs: sha256:(?P<digest>[0-9a-f]{64})$", re.M)


def python_version() -> str:
    """The image's Python (major.minor), from the Dockerfile's ``ARG PYTHON_VERSION``."""
    match = re.search(r"^ARG PYTHON_VERSION=(\d+\.\d+)\.\d+$", DOCKERFILE.read_text(), re.M)
    if match is None:
        raise SystemExit(f"{DOCKERFILE}: no `ARG PYTHON_VERSION=X.Y.Z` line")
    return match.group(1)


def inputs() -> dict[str, list[str]]:
    """Lock file name -> the requirements it is resolved from."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {"runtime.txt": [*project["project"]["dependencies"],
                            *project["project"]["optional-dependencies"]["server"]],
            "build.txt": list(project["build-system"]["requires"])}


def inputs_digest(requirements: list[str]) -> str:
    return hashlib.sha256(json.dumps([python_version(), requirements]).encode()).hexdigest()


def stale() -> list[str]:
    """The lock files that are missing or were resolved from other inputs."""
    out = []
    for name, requirements in inputs().items():
        path = HERE / name
        match = INPUTS_LINE.search(path.read_text()) if path.is_file() else None
        if match is None or match["digest"] != inputs_digest(requirements):
            out.append(name)
    return out


def lock(name: str, requirements: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "requirements.in"
        source.write_text("\n".join(requirements) + "\n")
        result = subprocess.run(
            [sys.executable, "-m", "uv", "pip", "compile", str(source), "--quiet",
             "--generate-hashes", "--no-header", "--no-annotate",
             "--python-version", python_version(), "--python-platform", "linux",
             *(["--no-emit-package", "raygate"] if name == "runtime.txt" else [])],
            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"uv pip compile ({name}) failed:\n{result.stderr}")
    header = (f"# {name}: written by requirements/lock.py from pyproject.toml; do not edit.\n"
              f"# inputs: sha256:{inputs_digest(requirements)}\n")
    (HERE / name).write_text(header + result.stdout)
    print(f"requirements/{name}: {result.stdout.count('==')} packages")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only say whether the lock files are current (no network)")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"requirements/{name} is not current: run python requirements/lock.py",
                  file=sys.stderr)
        return 1 if names else 0
    for name, requirements in inputs().items():
        lock(name, requirements)
    return 0


if __name__ == "__main__":
    sys.exit(main())
