"""The YAML config file: read, validated key by key, its policy section loadable alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from raygate.contract.command import ConfigError
from raygate.policy.config import PolicyConfig, policy_config_from_mapping
from raygate.server.config.settings import BY_KEY, InvalidValue, did_you_mean, problem, show
from raygate.server.files import file_stamp, yaml_problem

Stamp = tuple[int, int, int, int]


def stamp_of(path: str) -> Stamp | None:
    """What changes when the file does (``raygate.server.files``); None when it is missing."""
    try:
        return file_stamp([path])[0]
    except OSError:
        return None


@dataclass(frozen=True)
class ConfigFile:
    """One reading of the config file, valid or not."""

    path: str
    stamp: Stamp | None
    """Taken before the file was read: a change during the read is seen next time."""
    server: Mapping[str, Any]
    """Setting name -> value, for the valid ``server:`` keys present."""
    server_raw: Mapping[str, Any]
    """Dotted key -> value as written, every leaf of ``server:`` (to tell what changed)."""
    policy: PolicyConfig | None
    """None when the ``policy:`` section (or the whole file) is invalid."""
    policy_keys: frozenset[str]
    problems: tuple[str, ...]
    """Everything wrong, each with its path; ``policy is None`` iff some are policy's."""
    parsed: bool = True
    """False when the file could not be read or parsed at all."""


def _flatten(data: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from _flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, data


def _read_server(data: object, where: str, values: dict[str, Any],
                 problems: list[str]) -> None:
    """``server:`` walked against the keys of ``SETTINGS``, every problem collected."""
    def walk(node: object, prefix: str) -> None:
        if node is None:
            return  # `tls:` with nothing under it: as if absent
        path = f"server.{prefix}" if prefix else "server"
        if not isinstance(node, Mapping):
            problems.append(f"{where}: {path}: expected a mapping, got {show(node)}")
            return
        below = prefix + "." if prefix else ""
        children = {k[len(below):].split(".")[0] for k in BY_KEY if k.startswith(below)}
        for raw_key, value in node.items():
            key = str(raw_key)
            dotted = below + key
            if key not in children:
                problems.append(f"{where}: server.{dotted}: unknown setting"
                                + did_you_mean(key, sorted(children)))
            elif dotted in BY_KEY:
                setting = BY_KEY[dotted]
                try:
                    values[setting.name] = setting.convert(value, False)
                except InvalidValue as exc:
                    problems.append(problem(f"{where}: server.{dotted}", str(exc), value))
            else:
                walk(value, dotted)
    walk(data, "")


def read_config_file(path: str) -> ConfigFile:
    """Read and check ``path``; never raises for what is in the file (see ``problems``)."""
    stamp = stamp_of(path)
    problems: list[str] = []

    def broken(problem: str) -> ConfigFile:
        return ConfigFile(path, stamp, {}, {}, None, frozenset(), (problem,), parsed=False)

    try:
        data: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        return broken(f"{path}: cannot read: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        return broken(f"{path}: not UTF-8 text: {exc.reason}")
    except yaml.YAMLError as exc:
        return broken(f"{path}: not valid YAML: {yaml_problem(exc)}")
    if data is None:
        data = {}  # an empty file: every default
    if not isinstance(data, dict):
        return broken(f"{path}: expected a mapping at the top level "
                      "(sections server: and policy:)")
    sections = ("server", "policy")
    problems.extend(f"{path}: {key}: unknown section" + did_you_mean(str(key), list(sections))
                    for key in data if key not in sections)
    server: dict[str, Any] = {}
    _read_server(data.get("server"), path, server, problems)
    policy_data = data.get("policy") or {}
    policy: PolicyConfig | None
    try:
        policy = policy_config_from_mapping(policy_data, f"{path}: policy")
    except ConfigError as exc:
        problems.extend(exc.problems)
        policy = None
    keys = frozenset(str(k) for k in policy_data) if isinstance(policy_data, Mapping) else (
        frozenset())
    return ConfigFile(path, stamp, server, dict(_flatten(data.get("server"), "server")),
                      policy, keys, tuple(problems))


def load_config_file(path: str) -> PolicyConfig:
    """The policy of a config file (``raygate check`` and ``explain``); the whole file is
    checked, and any problem raises ``ConfigError``."""
    config = read_config_file(path)
    if config.problems or config.policy is None:
        raise ConfigError(list(config.problems))
    return config.policy
