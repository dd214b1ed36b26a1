"""``raygate.contract.scale_gate.gate_key``: which key names a scale-gate entry's gate, as
JSON gives entries (dicts) and as the cache keeps them (read-only mappings)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from raygate.contract.scale_gate import gate_key


@pytest.mark.parametrize(("entry", "key"), [
    ({"type": "raygate.io/no-node-coming"}, ("type", "raygate.io/no-node-coming")),
    ({"name": "kueue.k8s.io/quota-exceeded"}, ("name", "kueue.k8s.io/quota-exceeded")),
    ({"type": "a", "name": "b"}, ("type", "a")),  # type first: the last revision's key
    ({"type": "", "name": "b"}, ("name", "b")),
    # The cache's entries (cache.convert): the admission status reads these.
    (MappingProxyType({"type": "raygate.io/thrash-guard"}), ("type", "raygate.io/thrash-guard")),
    ({"reason": "no key"}, ("", "")),
    ({"type": 3}, ("", "")),
    ("raygate.io/no-node-coming", ("", "")),
    (None, ("", "")),
])
def test_the_key_that_names_an_entrys_gate(entry: object, key: tuple[str, str]) -> None:
    assert gate_key(entry) == key
