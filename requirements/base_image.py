"""The base images the release builds from, pinned by digest: `FROM` a tag alone builds
from whatever the tag points to that day, and a release must say what it is made of.

    python requirements/base_image.py check   # offline: every base parses; pinned ones well formed
    python requirements/base_image.py pin     # needs `docker buildx` and a registry

``pin`` reads each base's image index from its registry (``docker buildx imagetools
inspect --raw``), takes the sha256 of exactly those bytes as the digest, refuses an index
that lacks a platform the release builds, and writes ``<image>:<tag>@sha256:<digest>``
into the Dockerfile's ``ARG``. A base already pinned is fetched by its digest and checked
the same way (the bytes must hash to it) and left as it is. Run it and commit the result
to pin by hand; the release workflow (.github/workflows/release.yml) runs it on every tag,
so a tag pushed before anyone pinned still builds every architecture from one digest, and
the image's labels and the release's notes record which.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Base:
    """One Dockerfile's base image: the ``ARG`` that names it and the platforms the
    release builds from it."""

    dockerfile: str
    arg: str
    platforms: tuple[str, ...]
    output: str
    """The step output (and build argument) the release workflow reads it under."""


BASES = (
    Base("Dockerfile", "PYTHON_IMAGE", ("linux/amd64", "linux/arm64"), "python_image"),
    # Ray publishes one architecture per tag: the autoscaler image is amd64 only.
    Base("deploy/ray-autoscaler/Dockerfile", "RAY_IMAGE", ("linux/amd64",), "ray_image"),
)


@dataclass(frozen=True)
class Reference:
    name: str
    """Repository and tag, the Dockerfile's ARGs expanded: python:3.11.7-slim-bookworm."""
    digest: str | None

    def __str__(self) -> str:
        return f"{self.name}@{self.digest}" if self.digest else self.name


class BaseImageError(Exception):
    """A base image cannot be read, or its registry's index is not what the release needs."""


def _args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))


def reference(text: str, arg: str) -> Reference:
    """The base ``ARG arg=...`` of a Dockerfile's text names, earlier ARGs expanded."""
    args = _args(text)
    if arg not in args:
        raise BaseImageError(f"no `ARG {arg}=...` line")
    value = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m[1], m[0]), args[arg])
    name, _, digest = value.partition("@")
    if "$" in name or not re.fullmatch(r"[\w./-]+:[\w.-]+", name):
        raise BaseImageError(f"{arg}: {value!r} is not <image>:<tag>[@sha256:<digest>]")
    if digest and not DIGEST.fullmatch(digest):
        raise BaseImageError(f"{arg}: {digest!r} is not sha256:<64 hex digits>")
    if digest and len(set(digest.removeprefix("sha256:"))) <= 4:
        raise BaseImageError(f"{arg}: {digest} is a placeholder, not a digest")
    return Reference(name, digest or None)


def pinned(text: str, arg: str, ref: Reference) -> str:
    """The Dockerfile's text with ``ARG arg`` set to ``ref`` (a literal tag: a digest
    belongs to one tag, so it must not follow a version ARG changed later)."""
    if ref.digest is None or not DIGEST.fullmatch(ref.digest):
        raise BaseImageError(f"{arg}: pin to a sha256 digest, not {ref.digest!r}")
    new, count = re.subn(rf"^ARG {arg}=\S+$", f"ARG {arg}={ref}", text, flags=re.M)
    if count != 1:
        raise BaseImageError(f"{count} `ARG {arg}=...` lines, expected one")
    return new


def index_digest(raw: bytes, platforms: tuple[str, ...], name: str) -> str:
    """The digest of an image index as the registry served it (the sha256 of its bytes),
    once it is known to hold a manifest for every platform."""
    try:
        index = json.loads(raw)
    except ValueError as exc:
        raise BaseImageError(f"{name}: the registry's answer is not JSON: {exc}") from exc
    if not isinstance(index, dict):
        raise BaseImageError(f"{name}: the registry's answer is not a manifest")
    manifests = index.get("manifests")
    if not isinstance(manifests, list):
        # One image, no index (Ray's tags are one architecture each, amd64 unsuffixed):
        # enough when one platform is built, and buildx refuses it if it is another.
        if "layers" in index and len(platforms) == 1:
            return "sha256:" + hashlib.sha256(raw).hexdigest()
        raise BaseImageError(f"{name}: not an index of platforms, but {len(platforms)} "
                             "are built from it")
    found = {f"{p.get('os')}/{p.get('architecture')}" for m in manifests
             if isinstance(m, dict) and isinstance(p := m.get("platform"), dict)}
    missing = [p for p in platforms if p not in found]
    if missing:
        raise BaseImageError(f"{name}: no manifest for {', '.join(missing)} "
                             f"(the index has {', '.join(sorted(found)) or 'none'})")
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def inspect_raw(image: str) -> bytes:
    """The bytes of ``image``'s manifest or index, from its registry."""
    result = subprocess.run(["docker", "buildx", "imagetools", "inspect", "--raw", image],
                            capture_output=True, timeout=120, check=False)
    if result.returncode != 0:
        raise BaseImageError(f"{image}: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def pin(base: Base, text: str, fetch: Callable[[str], bytes] = inspect_raw) -> Reference:
    """``base`` pinned: its tag's current index, or the index of the digest already
    pinned, checked against the bytes the registry serves."""
    ref = reference(text, base.arg)
    digest = index_digest(fetch(str(ref)), base.platforms, str(ref))
    if ref.digest is not None and digest != ref.digest:
        raise BaseImageError(f"{ref}: the registry's index hashes to {digest}")
    return Reference(ref.name, digest)


def main(argv: list[str] | None = None, root: Path = ROOT,
         fetch: Callable[[str], bytes] = inspect_raw) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("check", "pin"))
    parser.add_argument("--github-output", type=Path,
                        help="append <output>=<reference> for each base (the release's steps)")
    options = parser.parse_args(argv)
    problems: list[str] = []
    lines: list[str] = []
    for base in BASES:
        path = root / base.dockerfile
        text = path.read_text()
        try:
            if options.command == "check":
                ref = reference(text, base.arg)
                print(f"{base.dockerfile}: {ref}" + ("" if ref.digest else " (not pinned)"))
                continue
            ref = pin(base, text, fetch)
        except BaseImageError as exc:
            problems.append(f"{base.dockerfile}: {exc}")
            continue
        path.write_text(pinned(text, base.arg, ref))
        print(f"{base.dockerfile}: {base.arg}={ref}")
        lines.append(f"{base.output}={ref}")
    if options.github_output is not None and not problems:
        with options.github_output.open("a") as out:
            out.write("".join(f"{line}\n" for line in lines))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
