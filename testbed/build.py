"""Build the testbed's real components from their Go modules, into a cache outside the repo.

Each component is a small Go module of ours under ``testbed/modules/<name>/``: a go.mod
that pins the upstream module, its go.sum, and a ``tools.go`` naming the commands. Its
binaries go to ``<cache>/<name>-<version>/`` (``~/.cache/raygate/testbed`` unless
``RAYGATE_TESTBED_CACHE`` says otherwise); a stamp there holds the hash of go.mod and
go.sum, so a changed pin rebuilds and an unchanged one costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["COMPONENTS", "BuildError", "Component", "build_all", "cache_root"]

MODULES = Path(__file__).resolve().parent / "modules"


class BuildError(Exception):
    """A component could not be fetched or built; the message names it and its module."""


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    """The upstream Go module our go.mod pins (its version is the component's)."""
    commands: dict[str, str]
    """Binary name -> Go package path of its ``main``."""
    data: dict[str, str]
    """Folder in the cache -> folder inside the upstream module copied there (CRDs)."""
    stamp: dict[str, str] = field(default_factory=dict)
    """``-X`` link flags: what a release build writes into the binary (its version;
    ``{version}``, ``{major}`` and ``{minor}`` are the pinned module version's)."""
    toolchain: str = ""
    """``GOTOOLCHAIN`` for this module's ``go`` commands only ("" keeps the machine's Go):
    a module whose go.mod needs a newer Go than the machine has names the release the go
    command then fetches through the module proxy (``golang.org/toolchain``)."""

    @property
    def directory(self) -> Path:
        return MODULES / self.name

    @property
    def version(self) -> str:
        text = (self.directory / "go.mod").read_text()
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(self.module)}\s+(v\S+)", text, re.M)
        if not match:
            raise BuildError(f"{self.name}: {self.directory}/go.mod does not require {self.module}")
        return match.group(1)

    @property
    def pin(self) -> str:
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum", "tools.go"):
            path = self.directory / name
            digest.update(path.read_bytes() if path.is_file() else b"")
        digest.update(self.ldflags.encode())
        digest.update(self.toolchain.encode())
        return digest.hexdigest()

    @property
    def ldflags(self) -> str:
        major, minor = self.version.removeprefix("v").split(".")[:2]
        values = {"version": self.version, "major": major, "minor": minor}
        return " ".join(["-s", "-w", *(f"-X {key}={value.format(**values)}"
                                       for key, value in sorted(self.stamp.items()))])

    def path(self, binary: str) -> Path:
        return cache_root() / f"{self.name}-{self.version}" / binary


COMPONENTS = {c.name: c for c in (
    Component("etcd", "go.etcd.io/etcd/server/v3", {"etcd": "go.etcd.io/etcd/server/v3"}, {}),
    Component("kubernetes", "k8s.io/kubernetes", {
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    }, {}, stamp={
        # A `go build` of the module says v0.0.0-master+$Format:%H$, which clients that
        # parse the server's version refuse (Kueue exits on it): stamp it as a release.
        "k8s.io/component-base/version.gitVersion": "{version}",
        "k8s.io/component-base/version.gitMajor": "{major}",
        "k8s.io/component-base/version.gitMinor": "{minor}",
    }),
    Component("kuberay", "github.com/ray-project/kuberay/ray-operator",
              {"kuberay-operator": "github.com/ray-project/kuberay/ray-operator"},
              {"crds": "config/crd/bases"}),
    Component("cert-manager", "github.com/cert-manager/cert-manager", {},
              {"crds": "deploy/crds"}),
    Component("volcano", "volcano.sh/volcano",
              {"vc-scheduler": "volcano.sh/volcano/cmd/scheduler",
               "vc-controller-manager": "volcano.sh/volcano/cmd/controller-manager"},
              {"crds": "config/crd/volcano/bases"}),
    Component("kueue", "sigs.k8s.io/kueue", {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
              {"crds": "config/components/crd/bases", "webhook": "config/components/webhook"}),
    Component("kwok", "sigs.k8s.io/kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
              {"stages": "kustomize/stage"}),
    # v1.15.0's go.mod says go 1.26.9, newer than the machine's Go: its build alone runs
    # under go1.27.3 (the newer release these machines approve; ~76 MB from the proxy).
    Component("karpenter", "sigs.k8s.io/karpenter", {"karpenter": "sigs.k8s.io/karpenter/kwok"},
              {"crds": "kwok/charts/crds", "nodeclass-crds": "kwok/apis/crds"},
              toolchain="go1.27.3"),
    Component("helm", "helm.sh/helm/v3", {"helm": "helm.sh/helm/v3/cmd/helm"}, {}, stamp={
        # What helm's Makefile writes for a release: its version, and the Kubernetes
        # version `helm template` and `helm lint` assume without a cluster (client-go
        # v0.37 of its go.mod: 1.37; else 1.20, and charts needing newer would fail).
        "helm.sh/helm/v3/internal/version.version": "{version}",
        "helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor": "1",
        "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor": "37",
        "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor": "1",
        "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor": "37",
    }),
)}


def cache_root() -> Path:
    return Path(os.environ.get("RAYGATE_TESTBED_CACHE")
                or Path.home() / ".cache" / "raygate" / "testbed")


def _say(message: str) -> None:
    print(f"testbed: {message}", file=sys.stderr, flush=True)


def _go(component: Component, *args: str) -> str:
    """Run ``go`` in the component's module; a refusal names the component and module."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly -trimpath", "CGO_ENABLED": "0"}
    if component.toolchain:
        env["GOTOOLCHAIN"] = component.toolchain
    result = subprocess.run(["go", *args], cwd=component.directory, env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        refused = re.search(r"(403|404|410) |not available|reading https?://|no matching versions",
                            result.stderr)
        why = "the module proxy refused a module" if refused else "go failed"
        raise BuildError(f"{component.name} ({component.module} {component.version}): {why}: "
                         f"go {' '.join(args)}\n{tail}")
    return result.stdout


def _writable(tree: Path) -> None:
    """Files copied from the module cache keep its read-only modes; a rebuild must be able
    to replace them."""
    if tree.is_dir():
        for folder, _, _ in os.walk(tree):
            Path(folder).chmod(0o755)


def build(component: Component, *, force: bool = False) -> Path:
    """Build one component unless its cache folder holds this pin already."""
    target = cache_root() / f"{component.name}-{component.version}"
    stamp = target / ".pin"
    if not force and stamp.is_file() and stamp.read_text() == component.pin:
        _say(f"{component.name} {component.version}: cached in {target}")
        return target
    started = time.monotonic()
    building = f" and building {', '.join(component.commands)}" if component.commands else ""
    _say(f"{component.name} {component.version}: fetching {component.module} (what the "
         f"module proxy has not given this machine yet){building}")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for binary, package in component.commands.items():
        begun = time.monotonic()
        _go(component, "build", f"-ldflags={component.ldflags}", "-o", str(staging / binary),
            package)
        _say(f"{component.name}: built {binary} in {time.monotonic() - begun:.0f} s")
    if component.data:
        # The module's own files, at the version (and hash) go.mod and go.sum pin.
        source = Path(json.loads(_go(component, "mod", "download", "-json",
                                     component.module))["Dir"])
        for folder, inside in component.data.items():
            shutil.copytree(source / inside, staging / folder)
        _writable(staging)
    (staging / ".pin").write_text(component.pin)
    _writable(target)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    _say(f"{component.name} {component.version}: ready in {time.monotonic() - started:.0f} s "
         f"({target})")
    return target


def build_all(names: list[str] | None = None, *, force: bool = False) -> None:
    if shutil.which("go") is None and Path("/usr/local/go/bin/go").is_file():
        # Where the Go distribution installs itself; a shell profile puts it on PATH.
        os.environ["PATH"] += os.pathsep + "/usr/local/go/bin"
    if shutil.which("go") is None:
        raise BuildError("the go command is not on PATH: the testbed builds its components "
                         "from Go modules")
    started = time.monotonic()
    for name in names or list(COMPONENTS):
        if name not in COMPONENTS:
            raise BuildError(f"unknown component {name!r}; known: {', '.join(COMPONENTS)}")
        build(COMPONENTS[name], force=force)
    _say(f"all components ready in {time.monotonic() - started:.0f} s")
