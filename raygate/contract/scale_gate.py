"""A KubeRay scale-gate entry (``workerGroupSpecs[].scaleStrategy.scaleGate[]``,
kuberay#5094) as every side of raygate reads it: the policy's status, the writer, the
uninstall and ``raygate-autoscaler``. Imports only the standard library, so the policy may
import it.

The entry names its gate by ``type`` (the last readable revision of kuberay#5094) or by
``name`` (its earlier ones); a reader that has no schema takes either. raygate's own gates
are named under ``raygate.io/``."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["GATE_KEYS", "PREFIX", "gate_key", "is_raygates"]

PREFIX = "raygate.io/"
"""Every gate raygate writes is named under it; it removes only those."""
GATE_KEYS = ("type", "name")
"""Where an entry names its gate, in order of preference."""


def gate_key(entry: object) -> tuple[str, str]:
    """The key that names ``entry``'s gate, and the gate; ("", "") when neither key holds a
    name (or the entry is no object). Any mapping: the cache keeps entries read-only
    (``MappingProxyType``), JSON gives dicts."""
    if isinstance(entry, Mapping):
        for key in GATE_KEYS:
            name = entry.get(key)
            if isinstance(name, str) and name:
                return key, name
    return "", ""


def is_raygates(gate: str) -> bool:
    """Whether ``gate`` is one of raygate's (named under ``PREFIX``)."""
    return gate.startswith(PREFIX)
