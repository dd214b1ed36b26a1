from __future__ import annotations

import pytest

from raygate.plugin.quantity import QuantityError, parse_milli

CASES = [
    ("8", 8000),
    ("500m", 500),
    ("0.5", 500),
    ("1.5", 1500),
    ("100n", 1),  # rounded up to the next milli-unit, as Kubernetes does
    ("1Ki", 1024 * 1000),
    ("32Gi", 32 * 2**30 * 1000),
    ("1G", 10**9 * 1000),
    ("1e3", 10**6),
    ("1E-3", 1),
    ("+2", 2000),
    (".5", 500),
    (2, 2000),
    (0.25, 250),
]


@pytest.mark.parametrize(("quantity", "milli"), CASES, ids=[str(c[0]) for c in CASES])
def test_parses_kubernetes_quantities(quantity: str | int | float, milli: int) -> None:
    assert parse_milli(quantity) == milli


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5 Gi", "Gi", "1KiB", "--1"])
def test_refuses_what_is_not_a_quantity(bad: str) -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        parse_milli(bad)


def test_refuses_booleans() -> None:
    with pytest.raises(QuantityError):
        parse_milli(True)
