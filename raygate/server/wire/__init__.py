"""msgspec structs for the JSON raygate reads and writes, decoding only the fields used."""

import msgspec

__all__ = ["DECODE_ERRORS"]

DECODE_ERRORS: tuple[type[Exception], ...] = (msgspec.DecodeError, RecursionError)
"""What decoding untrusted JSON may raise: msgspec's own errors (``ValidationError`` is
a ``DecodeError``), and ``RecursionError`` for nesting deeper than the interpreter's
recursion limit (a thousand-odd levels: no Kubernetes object comes close)."""
