"""Server-Sent Events as goaai sends them: one frame encoder, one keep-alive and
one response type for every stream (the session streams and ``/v1/``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from django.http import StreamingHttpResponse

# A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15.0
KEEPALIVE = ": keep-alive\n\n"


def frame(data: Any, *, event: str | None = None, event_id: int | None = None) -> str:
    """One event: its optional ``id`` and ``event`` lines, then its data as compact
    JSON (one line: JSON escapes every newline inside strings)."""
    return encoded_frame(
        json.dumps(data, separators=(",", ":"), ensure_ascii=False), event=event, event_id=event_id
    )


def encoded_frame(data: str, *, event: str | None = None, event_id: int | None = None) -> str:
    """One event whose data is JSON already encoded (compact, on one line)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    if event is not None:
        head += f"event: {event}\n"
    return f"{head}data: {data}\n\n"


def event_stream(frames: AsyncIterator[str]) -> StreamingHttpResponse:
    """A response that sends ``frames`` as they come."""
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # tell nginx not to buffer the stream
    return response
