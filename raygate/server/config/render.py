"""``raygate serve --print-config``: the effective settings as a config file, with where
each value came from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from raygate.policy.config import (
    policy_config_to_mapping,
)
from raygate.process.version import raygate_version
from raygate.server.config.load import Loaded, Origin, authz_enabled
from raygate.server.config.settings import SETTINGS


def _yaml_value(value: Any) -> str:
    if isinstance(value, tuple):  # safe_dump writes lists, not tuples
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20,
                          allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def render_config(loaded: Loaded, environ: Mapping[str, str]) -> str:
    """The effective settings as a config file (valid YAML, the same layout; every value
    spelled out) with where each came from as a trailing comment."""
    settings, origins = loaded.settings, loaded.origins
    lines = ["# raygate serve: effective settings; each value's origin is the comment "
             "after it",
             "# (precedence: flag > env RAYGATE_* > file > default).",
             f"# raygate {raygate_version()}"]
    source = ("the demo cluster" if settings.demo else
              "snapshot " + ", ".join(settings.snapshots) if settings.snapshots else
              f"kubeconfig {settings.kubeconfig}" if settings.kubeconfig else
              "in-cluster config, else $KUBECONFIG, else ~/.kube/config")
    where = next((origins[n].comment() for n in ("demo", "snapshots", "kubeconfig")
                  if getattr(settings, n)), "default")
    lines.append(f"# cluster state: {source} ({where})")
    if settings.context:
        lines.append(f"# context: {settings.context} ({origins['context'].comment()})")
    if settings.config_file:
        lines.append(f"# config file: {settings.config_file} "
                     f"({origins['config_file'].comment()}; its policy: is reloaded on change)")
    authz = "on" if authz_enabled(settings, environ) else "off"
    lines.append(f"# authz: {authz}" + (
        f" (auto: {'in-cluster' if authz == 'on' else 'not in-cluster'})"
        if settings.authz == "auto" else ""))

    def emit(indent: int, key: str, value: Any, origin: Origin) -> None:
        line = f"{'  ' * indent}{key}: {_yaml_value(value)}"
        lines.append(f"{line:<40}  # {origin.comment()}")

    lines.append("server:")
    open_sections: list[str] = []
    for s in SETTINGS:
        *sections, leaf = s.key.split(".")
        common = 0
        while (common < min(len(sections), len(open_sections))
               and sections[common] == open_sections[common]):
            common += 1
        for depth in range(common, len(sections)):
            lines.append(f"{'  ' * (depth + 1)}{sections[depth]}:")
        open_sections = sections
        emit(len(sections) + 1, leaf, getattr(settings, s.name), origins[s.name])
    lines.append("policy:")
    for key, value in policy_config_to_mapping(settings.policy).items():
        emit(1, key, value, origins[f"policy.{key}"])
    return "\n".join(lines) + "\n"
