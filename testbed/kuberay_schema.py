"""``python -m testbed.kuberay_schema --write``: the structural schemas ``raygate check``
validates against, taken from KubeRay's own CRDs, one file per KubeRay minor release it
supports (``kuberay_crds_1.6.json``, ``kuberay_crds_1.7.json``).

Source: ``config/crd/bases/ray.io_{rayclusters,rayjobs,rayservices,raycronjobs}.yaml`` of
the ``ray-operator`` module. By default the version the testbed pins
(``testbed/modules/kuberay/go.mod``), read from the testbed's cache (``python -m testbed
build kuberay``) or else from the Go module cache; ``--crds FOLDER --release vX.Y.Z`` writes
another release's from its CRD folder (``git show vX.Y.Z:ray-operator/config/crd/bases/...``
of a KubeRay checkout). Kept: the ``openAPIV3Schema`` of the served ``v1`` version of each.
The four embed the same pod template many times over (3 MB of YAML); every schema that
occurs more than once is written once under ``definitions`` and referred to with ``$ref``,
which brings them to a tenth of that. ``--check`` exits 1 when the shipped file differs from
what would be written (tests/check/test_check_schema.py runs it when the module is there).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from testbed.build import COMPONENTS

__all__ = ["SHIPPED_FOLDER", "crd_folder", "pinned_release", "render", "shipped"]

SHIPPED_FOLDER = Path(__file__).resolve().parent.parent / "raygate/server/check"
KINDS = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml",
         "RayService": "ray.io_rayservices.yaml", "RayCronJob": "ray.io_raycronjobs.yaml"}
# A schema shorter than this stays inline: a $ref would cost about as much as it saves.
SHARED_MIN_CHARS = 400


def pinned_release() -> str:
    """The KubeRay release the testbed pins: ``v1.6.1``."""
    return COMPONENTS["kuberay"].version


def shipped(release: str) -> Path:
    """The shipped file of a release's minor version: ``kuberay_crds_1.6.json``."""
    major, minor = release.removeprefix("v").split(".")[:2]
    return SHIPPED_FOLDER / f"kuberay_crds_{major}.{minor}.json"


def crd_folder() -> Path | None:
    """KubeRay's CRD folder at the pinned version, or None when neither cache has it."""
    kuberay = COMPONENTS["kuberay"]
    built = kuberay.path("crds")
    if built.is_dir():
        return built
    modcache = Path(os.environ.get("GOMODCACHE")
                    or Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod")
    source = modcache / f"{kuberay.module}@{kuberay.version}" / "config" / "crd" / "bases"
    return source if source.is_dir() else None


def _v1_schema(path: Path) -> Any:
    crd = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def _subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, str, str | int | None]]:
    """(keyword, hint, key) of every place in ``schema`` that holds a schema (not a value:
    ``default`` and ``enum`` hold data, ``properties`` a map of schemas)."""
    for name in schema.get("properties", {}):
        yield "properties", name, name
    for keyword in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(keyword), dict):
            yield keyword, keyword, None
    for keyword in ("anyOf", "allOf", "oneOf"):
        for i in range(len(schema.get(keyword, ()))):
            yield keyword, keyword, i


def _child(schema: dict[str, Any], keyword: str, key: str | int | None) -> Any:
    return schema[keyword] if key is None else schema[keyword][key]


def _key(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _count(schema: dict[str, Any], counts: Counter[str]) -> None:
    counts[_key(schema)] += 1
    for keyword, _, key in _subschemas(schema):
        _count(_child(schema, keyword, key), counts)


def _share(schema: dict[str, Any], hint: str, counts: Counter[str],
           definitions: dict[str, Any]) -> dict[str, Any]:
    key = _key(schema)
    if counts[key] > 1 and len(key) >= SHARED_MIN_CHARS:
        name = f"{hint}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
        if name not in definitions:
            definitions[name] = {}  # reserved before recursing: names stay in first-seen order
            definitions[name] = _inline(schema, counts, definitions)
        return {"$ref": f"#/definitions/{name}"}
    return _inline(schema, counts, definitions)


def _inline(schema: dict[str, Any], counts: Counter[str],
            definitions: dict[str, Any]) -> dict[str, Any]:
    out = dict(schema)
    for keyword in ("properties", "anyOf", "allOf", "oneOf"):
        if keyword in out:
            out[keyword] = type(out[keyword])(out[keyword])  # copied before replacing entries
    for keyword, hint, key in _subschemas(schema):
        shared = _share(_child(schema, keyword, key), hint, counts, definitions)
        if key is None:
            out[keyword] = shared
        else:
            out[keyword][key] = shared
    return out


def render(folder: Path, release: str) -> str:
    """The shipped file's text for the CRDs in ``folder``, those of KubeRay ``release``."""
    schemas = {kind: _v1_schema(folder / name) for kind, name in KINDS.items()}
    counts: Counter[str] = Counter()
    for schema in schemas.values():
        _count(schema, counts)
    definitions: dict[str, Any] = {}
    kinds = {kind: _share(schema, kind, counts, definitions) for kind, schema in schemas.items()}
    document = {
        "source": f"{COMPONENTS['kuberay'].module} {release} config/crd/bases "
                  f"({', '.join(KINDS.values())}), v1 openAPIV3Schema",
        "generator": "python -m testbed.kuberay_schema --write",
        "kinds": kinds,
        "definitions": definitions,
    }
    return json.dumps(document, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.kuberay_schema",
                                     description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true",
                        help="write the release's kuberay_crds_X.Y.json")
    action.add_argument("--check", action="store_true", help="exit 1 if it is not current")
    parser.add_argument("--crds", type=Path, metavar="FOLDER",
                        help="KubeRay's config/crd/bases of --release (default: the pinned one's)")
    parser.add_argument("--release", metavar="vX.Y.Z", help="the release --crds comes from")
    args = parser.parse_args(argv)
    if bool(args.crds) != bool(args.release):
        parser.error("give --crds and --release together")
    release = args.release or pinned_release()
    folder = args.crds or crd_folder()
    if folder is None:
        print("testbed: KubeRay's CRDs are in neither cache: python -m testbed build kuberay",
              file=sys.stderr)
        return 2
    text = render(folder, release)
    target = shipped(release)
    if args.write:
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target} ({len(text)} bytes) from {folder}")
        return 0
    if target.read_text(encoding="utf-8") != text:
        print(f"{target} is not current: python -m testbed.kuberay_schema --write",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
