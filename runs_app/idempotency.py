"""``Idempotency-Key``: what a key may be, and the fingerprint of the request it
was sent with, the same for every way a run is started (the REST API, ``/v1/``
and the MCP server's ``run_start``).

A key is recorded on the run it started with the fingerprint of its request; the
same key again with the same request returns that run, with another request it is
refused (the key was reused).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

MAX_KEY_LENGTH = 200
KEY_RULE = f"1 to {MAX_KEY_LENGTH} printable ASCII characters"


class InvalidIdempotencyKey(ValueError):
    """A key that breaks :data:`KEY_RULE`."""

    def __init__(self) -> None:
        super().__init__(f"An idempotency key is {KEY_RULE}.")


def idempotency_key_checked(raw: str | None) -> str | None:
    """``raw`` if it is a valid key (``None`` if none was sent); otherwise
    :class:`InvalidIdempotencyKey`."""
    if raw is None:
        return None
    if not 0 < len(raw) <= MAX_KEY_LENGTH or not raw.isprintable() or not raw.isascii():
        raise InvalidIdempotencyKey
    return raw


def request_fingerprint(data: Any) -> str:
    """A digest of a request's content, whatever the order of its keys."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
