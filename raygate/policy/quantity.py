"""Kubernetes resource quantities as integer milli-units.

Every quantity is held as ``ceil(value * 1000)``: ``"500m"`` CPU is 500, ``"2"`` is 2000,
``"1Gi"`` memory is 1073741824000. Integers keep sums exact (Kubernetes itself rounds
quantities up to the nearest milli-unit when it compares them) and make comparisons cheap.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

__all__ = ["QuantityError", "parse_milli"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# The grammar of resource.Quantity (k8s.io/apimachinery/pkg/api/resource/quantity.go):
# <signedNumber><suffix>, where suffix is binarySI, decimalSI or a decimal exponent (e3, E-2).
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


_MAX_VALUE = 2**63 - 1
_MAX_MILLI = Decimal(_MAX_VALUE) * 1000
"""Kubernetes reads a quantity's value as an int64 (``Quantity.Value``). Bounded here
before the integer is built: ``1e99999`` as an int takes half a second, a request of them
much longer."""


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=4096, typed=True)  # typed: True == 1.0 must not hit 1.0's entry
def parse_milli(quantity: str | int | float) -> int:
    """Return the quantity in milli-units, rounded up like Kubernetes does.

    Accepts the numbers YAML manifests often carry unquoted (``cpu: 2``, ``cpu: 0.5``).
    Cached: clusters repeat the same few quantity strings over and over.
    """
    if isinstance(quantity, bool):
        raise QuantityError(f"not a quantity: {quantity!r}")
    if isinstance(quantity, int):
        if abs(quantity) > _MAX_VALUE:
            raise QuantityError(f"quantity {quantity!r} is out of range (beyond 2^63-1, the "
                                "int64 Kubernetes reads it as)")
        return quantity * 1000
    text = repr(quantity) if isinstance(quantity, float) else quantity.strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"not a quantity: {quantity!r}")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise QuantityError(f"not a quantity: {quantity!r}") from exc
    suffix = match["suffix"] or ""
    try:
        if suffix in _BINARY:
            value = number * _BINARY[suffix]
        elif suffix in _DECIMAL:
            value = number * _DECIMAL[suffix]
        else:
            value = number.scaleb(int(suffix[1:]))
        milli = value * 1000
    except ArithmeticError:
        # An exponent beyond the decimal context's range ("1e999999999", ".5E-32232238541"):
        # InvalidOperation or Overflow, not a number anyone means.
        raise QuantityError(f"not a quantity: {quantity!r} (exponent out of range)") from None
    if abs(milli) > _MAX_MILLI:
        raise QuantityError(f"quantity {quantity!r} is out of range (beyond 2^63-1, the "
                            "int64 Kubernetes reads it as)")
    return int(milli.to_integral_value(rounding=ROUND_CEILING))
