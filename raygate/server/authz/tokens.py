"""The bearer token of a request, HTTP header or gRPC metadata alike."""

from __future__ import annotations


def bearer_token(header: bytes | str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (the scheme is
    case-insensitive, RFC 9110 §11.1); None for anything else, including two headers
    joined by ", " or a token with blanks in it."""
    if header is None:
        return None
    value = header.decode("latin-1") if isinstance(header, bytes) else header
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c in token for c in " \t,"):
        return None
    return token
