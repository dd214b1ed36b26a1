from __future__ import annotations

import pytest

from raygate.policy.quantity import QuantityError, parse_milli

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


@pytest.mark.parametrize("huge", ["1e999999999", ".36E-32232238541", "1e99999",
                                  "9223372036854775808", "-1e30", "8Ei", 1e300, 2**63])
def test_refuses_quantities_out_of_range_at_once(huge: str | int | float) -> None:
    """Beyond the decimal context (was an uncaught InvalidOperation: a 500) or beyond an
    int64 (``1e99999`` took half a second to build as an integer)."""
    with pytest.raises(QuantityError, match="out of range"):
        parse_milli(huge)


def test_the_largest_quantities_in_range() -> None:
    assert parse_milli("9223372036854775807") == (2**63 - 1) * 1000
    assert parse_milli("7Ei") == 7 * 2**60 * 1000
    assert parse_milli("1e-999999") == 1  # rounded up to a milli-unit, as Kubernetes does


def test_refuses_booleans() -> None:
    with pytest.raises(QuantityError):
        parse_milli(True)


def test_refuses_booleans_after_their_equal_number_was_cached() -> None:
    """True == 1.0 with the same hash: an untyped cache answered True with 1.0's 1000
    whenever an earlier caller had parsed a `cpu: 1.0`, so the test above failed by order."""
    assert parse_milli(1.0) == 1000
    with pytest.raises(QuantityError):
        parse_milli(True)
