"""API tokens as clients send them: ``Authorization: Bearer <token>``.

One reading of the header for every way in (the REST API, the live streams, the
WebSocket, ``/v1/`` and ``/mcp``), so that a header one of them accepts is not
refused, or read differently, by another.
"""

from __future__ import annotations

SCHEME = "bearer"


def bearer_token(header: str | bytes | None) -> str | None:
    """The token an ``Authorization`` header carries.

    ``None`` when there is no header or it names another scheme (the caller may try
    other credentials); ``""`` when it says Bearer but carries no usable token (none,
    more than one word, or characters outside ASCII, which no token has)."""
    if header is None:
        return None
    text = header.decode("latin-1") if isinstance(header, bytes) else header
    scheme, _, credentials = text.strip().partition(" ")
    if scheme.lower() != SCHEME:
        return None
    token = credentials.strip()
    if not token.isascii() or any(character.isspace() for character in token):
        return ""
    return token
