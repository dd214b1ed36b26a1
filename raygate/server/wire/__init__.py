"""msgspec structs for the JSON raygate reads and writes, decoding only the fields used."""

from collections.abc import Callable
from typing import TypeVar

import msgspec

from raygate.contract.errors import BadRequest

__all__ = ["DECODE_ERRORS", "decode"]

DECODE_ERRORS: tuple[type[Exception], ...] = (msgspec.DecodeError, RecursionError)
"""What decoding untrusted JSON may raise: msgspec's own errors (``ValidationError`` is
a ``DecodeError``), and ``RecursionError`` for nesting deeper than the interpreter's
recursion limit (a thousand-odd levels: no Kubernetes object comes close)."""

B = TypeVar("B")
T = TypeVar("T")


def decode(decoder: Callable[[B], T], body: B, what: str = "request", at: str = "") -> T:
    """``decoder(body)``, or a ``BadRequest`` "cannot decode <what>: <msgspec's error>".

    msgspec's message carries the JSON path of what it refused (`` - at `$.spec` ``),
    relative to ``body``; ``at``, when given, is where ``body`` sits in the request (a
    part decoded on its own), and the path is made the request's.
    """
    try:
        return decoder(body)
    except DECODE_ERRORS as exc:
        message = str(exc)
        if at:
            message = (message.replace("`$", f"`{at}") if " - at `$" in message
                       else f"{message} - at `{at}`")
        raise BadRequest(f"cannot decode {what}: {message}") from None

