"""What the image is made of, checked without Docker: the wheel it installs builds and its
console scripts run from a fresh virtualenv; the Dockerfile's stages, base image and pip
steps agree with pyproject.toml and the lock files (requirements/); the image name and
version are the same in pyproject.toml, the kustomize component, the chart and the
Makefile; the release workflow builds what the Dockerfile describes."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from requirements import base_image, lock

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
IMAGE = "ghcr.io/raygate-dev/raygate"
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", re.sub(r"^\s*#.*\n", "", text, flags=re.M))
    return [(m[1].upper(), m[2].strip()) for m in
            re.finditer(r"^\s*(\w+)\s+(.*)$", joined, re.M)]


INSTRUCTIONS = _instructions(DOCKERFILE)
GLOBAL_ARGS = dict(a.split("=", 1) for i, a in INSTRUCTIONS[
    :[i for i, _ in INSTRUCTIONS].index("FROM")] if i == "ARG")


BUILD_REQUIRES = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"][
    "requires"]


def _installed(text: str) -> bool:
    requirement = Requirement(text)
    try:
        version = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return requirement.specifier.contains(version, prereleases=True)


def _pins(name: str) -> dict[str, tuple[Version, list[str]]]:
    """Lock file -> {package: (version, hashes)}."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "requirements" / name).read_text())
    pins: dict[str, tuple[Version, list[str]]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            requirement, *hashes = line.split(" --hash=")
            package, version = requirement.strip().split("==")
            pins[canonicalize_name(package)] = (Version(version), hashes)
    return pins


def test_the_lock_files_are_current() -> None:
    assert lock.stale() == [], "run: python requirements/lock.py"
    assert lock.main(["--check"]) == 0


@pytest.mark.parametrize(("name", "requirements"), [
    ("runtime.txt", [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["server"]]),
    ("build.txt", BUILD_REQUIRES),
])
def test_every_requirement_is_pinned_by_hash(name: str, requirements: list[str]) -> None:
    pins = _pins(name)
    linux = {"sys_platform": "linux", "platform_system": "Linux",
             "python_version": lock.python_version()}
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(linux):
            continue
        version, _ = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version, prereleases=True), (text, version)
    for package, (_, hashes) in pins.items():
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h.strip())
                              for h in hashes), package
    assert "raygate" not in pins  # the image installs its own wheel, built in the image


def test_the_base_image_is_one_pinned_python() -> None:
    """Both stages FROM the same image, of a Python pyproject accepts and the lock was
    resolved for; by digest it must be a real one (no placeholder)."""
    version = GLOBAL_ARGS["PYTHON_VERSION"]
    assert Requirement(f"python{PROJECT['requires-python']}").specifier.contains(version)
    assert lock.python_version() == ".".join(version.split(".")[:2])
    ref = base_image.reference(DOCKERFILE, "PYTHON_IMAGE")  # refuses a placeholder digest
    assert ref.name == f"python:{version}-slim-bookworm"
    if ref.digest is None:
        assert "make pin-base-images" in DOCKERFILE  # says how to pin it
    stages = [a for i, a in INSTRUCTIONS if i == "FROM"]
    assert stages == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]


def test_the_image_installs_by_hash_only() -> None:
    runs = [a for i, a in INSTRUCTIONS if i == "RUN"]
    installs = [c.strip() for run in runs for c in run.split("&&") if "pip install" in c]
    assert installs
    for command in installs:
        assert "--require-hashes -r /requirements/" in command or (
            "--no-deps" in command and command.endswith("/wheels/*.whl")), command
    assert any("pip wheel" in r and "--no-deps" in r and "--no-build-isolation" in r
               for r in runs)
    for _, arguments in (x for x in INSTRUCTIONS if x[0] == "COPY"):
        if not arguments.startswith("--from"):
            *sources, _ = arguments.split()
            assert all((ROOT / s).exists() for s in sources), arguments


def test_the_image_runs_as_the_deployment_expects() -> None:
    deployment = yaml.safe_load((ROOT / "deploy/base/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    user = [a for i, a in INSTRUCTIONS if i == "USER"][-1]
    assert user == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    exposed = {int(p) for i, a in INSTRUCTIONS if i == "EXPOSE" for p in a.split()}
    assert exposed == {p["containerPort"] for p in pod["containers"][0]["ports"]}
    entrypoint = [a for i, a in INSTRUCTIONS if i == "ENTRYPOINT"][-1]
    assert entrypoint == '["raygate"]' and "raygate" in PROJECT["scripts"]


def test_one_image_name_and_version_everywhere() -> None:
    component = yaml.safe_load((ROOT / "deploy/image/kustomization.yaml").read_text())
    assert component["images"] == [{"name": "raygate", "newName": IMAGE, "newTag": VERSION}]
    chart_dir = ROOT / "deploy/helm/raygate"
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    assert values["image"]["repository"] == IMAGE and values["image"]["tag"] == ""
    made = subprocess.run(["make", "-s", "-n", "image"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    assert f"docker build -t {IMAGE}:{VERSION} ." in made
    # No manifest names another raygate image.
    for path in (ROOT / "deploy").rglob("*.yaml"):
        for image in re.findall(r"^\s*image:\s*(\S+)", path.read_text(), re.M):
            assert not image.startswith("raygate:"), (path, image)


def _workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def test_the_release_workflow_builds_and_attaches_on_a_tag() -> None:
    workflow = _workflow()
    assert workflow[True]["push"]["tags"]  # YAML 1.1 reads the key `on` as true
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    uses = {s["uses"].split("@")[0] for s in steps if "uses" in s}
    assert {"actions/checkout", "docker/setup-qemu-action", "docker/setup-buildx-action",
            "docker/login-action", "docker/build-push-action"} <= uses
    builds = {s["with"]["file"]: s["with"] for s in steps
              if s.get("uses", "").startswith("docker/build-push-action")}
    assert set(builds) == {"Dockerfile", "deploy/ray-autoscaler/Dockerfile"}
    assert set(builds["Dockerfile"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert builds["Dockerfile"]["tags"] == "${{ env.IMAGE }}:${{ steps.version.outputs.version }}"
    assert all(b["push"] is True for b in builds.values())
    assert IMAGE in WORKFLOW.read_text()
    script = "\n".join(s.get("run", "") for s in steps)
    assert "helm package deploy/helm/raygate" in script and "gh release upload" in script
    assert "pyproject.toml" in script  # the tag must be the package's version


def test_the_release_builds_from_the_base_images_it_pinned() -> None:
    """A tag alone releases: the pin step runs before any build, on the checkout the builds
    read (a path context, not buildx's own git checkout), and each image records the base
    it was built from under the step output base_image.py writes."""
    steps = [s for job in _workflow()["jobs"].values() for s in job["steps"]]
    (pin,) = [i for i, s in enumerate(steps)
              if "requirements/base_image.py pin" in s.get("run", "")]
    assert steps[pin]["id"] == "base" and '--github-output "$GITHUB_OUTPUT"' in steps[pin]["run"]
    builds = [i for i, s in enumerate(steps)
              if s.get("uses", "").startswith("docker/build-push-action")]
    assert pin < min(builds)
    assert pin > next(i for i, s in enumerate(steps)
                      if s.get("uses", "").startswith("docker/setup-buildx-action"))
    outputs = {b.dockerfile: b.output for b in base_image.BASES}
    for i in builds:
        build = steps[i]["with"]
        assert build["context"] == "."
        assert (f"org.opencontainers.image.base.name=${{{{ steps.base.outputs."
                f"{outputs[build['file']]} }}}}") in build["labels"]
    assert set(outputs) == {"Dockerfile", "deploy/ray-autoscaler/Dockerfile"}
    assert "ARG PYTHON_IMAGE" not in WORKFLOW.read_text()  # no refusal of an unpinned tag


def _index(*platforms: str) -> bytes:
    manifests = [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "digest": "sha256:" + "ab" * 32, "size": 1,
                  "platform": {"os": p.split("/")[0], "architecture": p.split("/")[1]}}
                 for p in platforms]
    # buildx's attestation manifests: unknown/unknown, never a platform to build.
    manifests.append({"digest": "sha256:" + "cd" * 32,
                      "platform": {"os": "unknown", "architecture": "unknown"}})
    return json.dumps({"schemaVersion": 2, "manifests": manifests}, indent=3).encode()


def _copy_dockerfiles(tmp_path: Path) -> Path:
    for base in base_image.BASES:
        target = tmp_path / base.dockerfile
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / base.dockerfile, target)
    return tmp_path


def test_pinning_writes_the_digest_of_the_bytes_the_registry_served(tmp_path: Path) -> None:
    root = _copy_dockerfiles(tmp_path)
    served = {"python": _index("linux/amd64", "linux/arm64"), "rayproject/ray": _index(
        "linux/amd64")}
    asked: list[str] = []

    def fetch(image: str) -> bytes:
        asked.append(image)
        return served[image.partition(":")[0]]

    output = tmp_path / "github-output"
    assert base_image.main(["pin", "--github-output", str(output)], root, fetch) == 0
    digest = "sha256:" + hashlib.sha256(served["python"]).hexdigest()
    text = (root / "Dockerfile").read_text()
    version = GLOBAL_ARGS["PYTHON_VERSION"]
    # A literal tag: the digest is that tag's, whatever PYTHON_VERSION becomes later.
    assert f"\nARG PYTHON_IMAGE=python:{version}-slim-bookworm@{digest}\n" in text
    assert asked[0] == f"python:{version}-slim-bookworm"
    assert output.read_text().splitlines()[0] == (
        f"python_image=python:{version}-slim-bookworm@{digest}")
    assert [a for i, a in _instructions(text) if i == "FROM"] == [
        a for i, a in INSTRUCTIONS if i == "FROM"]
    # Pinned: fetched by its digest, checked, left as it is.
    asked.clear()
    assert base_image.main(["pin"], root, fetch) == 0
    assert asked[0].endswith(f"@{digest}") and (root / "Dockerfile").read_text() == text
    # The registry serving other bytes for that digest: refused.
    served["python"] = _index("linux/amd64", "linux/arm64", "linux/s390x")
    assert base_image.main(["pin"], root, fetch) == 1


@pytest.mark.parametrize(("raw", "platforms", "error"), [
    (_index("linux/amd64"), ("linux/amd64", "linux/arm64"), "no manifest for linux/arm64"),
    (b'{"schemaVersion": 2, "config": {}, "layers": []}', ("linux/amd64", "linux/arm64"),
     "not an index of platforms"),
    (b"<html>rate limited</html>", ("linux/amd64",), "not JSON"),
])
def test_an_index_that_cannot_build_every_platform_is_refused(
        raw: bytes, platforms: tuple[str, ...], error: str) -> None:
    with pytest.raises(base_image.BaseImageError, match=error):
        base_image.index_digest(raw, platforms, "python:x")


def test_one_image_without_an_index_serves_one_platform() -> None:
    raw = b'{"schemaVersion": 2, "config": {}, "layers": []}'
    assert base_image.index_digest(raw, ("linux/amd64",), "rayproject/ray:x") == (
        "sha256:" + hashlib.sha256(raw).hexdigest())


@pytest.mark.parametrize(("line", "error"), [
    ("ARG PYTHON_IMAGE=python:3.11.7-slim@sha256:" + "0" * 64, "a placeholder"),
    ("ARG PYTHON_IMAGE=python:3.11.7-slim@sha256:abc", "is not sha256:"),
    ("ARG PYTHON_IMAGE=python", "is not <image>:<tag>"),
    ("ARG PYTHON_IMAGE=python:${UNSET}", "is not <image>:<tag>"),
    ("ARG OTHER=python:3.11", "no `ARG PYTHON_IMAGE=...` line"),
])
def test_a_base_that_is_not_an_image_reference_is_refused(line: str, error: str) -> None:
    with pytest.raises(base_image.BaseImageError, match=error):
        base_image.reference(line + "\n", "PYTHON_IMAGE")


def test_the_offline_check_reads_every_base(capsys: pytest.CaptureFixture[str]) -> None:
    assert base_image.main(["check"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == [b.dockerfile for b in base_image.BASES]


def test_the_wheel_builds_and_its_console_scripts_run(tmp_path: Path) -> None:
    """The build stage's `pip wheel .`, of exactly what its COPY lines copy, installed
    alone into a fresh virtualenv whose dependencies are this environment's; run from
    elsewhere, so the checkout is not what is imported."""
    source = tmp_path / "src"
    source.mkdir()
    for _, arguments in (x for x in INSTRUCTIONS if x[0] == "COPY"):
        *copied, destination = arguments.split()
        if not arguments.startswith("--from") and not destination.startswith("/"):
            for name in copied:
                target = source / (name if destination == "./" else destination)
                if (ROOT / name).is_dir():
                    shutil.copytree(ROOT / name, target,
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(ROOT / name, target)
    wheels = tmp_path / "wheels"
    # As the image does, with the build backend already installed (here when this
    # environment's satisfies pyproject's build requirements; else pip fetches it).
    isolation = [] if all(_installed(r) for r in BUILD_REQUIRES) else ["--use-pep517"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    *(isolation or ["--no-build-isolation"]), "--wheel-dir", str(wheels),
                    str(source)], check=True, timeout=300, capture_output=True)
    (wheel,) = wheels.glob(f"raygate-{VERSION}-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert f"raygate-{VERSION}.dist-info/licenses/LICENSE" in names
    assert "raygate/server/openapi.json" in names
    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=True)
    python = fresh / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    str(wheel)], check=True, timeout=300, capture_output=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    # The dependencies: this environment's site-packages, after the fresh one's own.
    (Path(site.stdout.strip()) / "dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([str(python), "-c", "import raygate; print(raygate.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(fresh))
    for script in PROJECT["scripts"]:
        result = subprocess.run([str(fresh / "bin" / script), "--help"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"usage: {script}"), result.stdout[:200]
