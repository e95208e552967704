"""A cap on request bodies for the ASGI server, before Django reads them.

Under ASGI, Django reads a request's whole body (into memory, then a temporary
file) before any view runs, so a view cannot refuse an oversized upload before it
has filled the disk. This wrapper refuses a body announced larger than the limit
with a 413 at once, and stops reading one sent without a length once it passes the
limit. API paths (``/api/``, ``/v1/`` and ``/mcp``) have the API's limit
(``GOAAI_API_MAX_BODY_BYTES``); the other pages, whose forms are small, ``GOAAI_MAX_BODY_BYTES``.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

# The OpenAI-compatible endpoints, which answer errors in OpenAI's shape.
OPENAI_PREFIX = "/v1/"


def _limit(path: str) -> int:
    # The MCP endpoint takes JSON-RPC messages, as small as the API's bodies.
    if path.startswith(("/api/", OPENAI_PREFIX)) or path in ("/mcp", "/mcp/"):
        return int(settings.GOAAI_API_MAX_BODY_BYTES)
    return int(settings.GOAAI_MAX_BODY_BYTES)


def _too_large_body(path: str, limit: int) -> bytes:
    detail = f"The request body is larger than {limit} bytes."
    if path.startswith(OPENAI_PREFIX):
        error = {
            "message": detail,
            "type": "invalid_request_error",
            "param": None,
            "code": "payload_too_large",
        }
        return json.dumps({"error": error}).encode()
    return json.dumps(
        {
            "type": "client_error",
            "errors": [{"code": "payload_too_large", "detail": detail, "attr": None}],
        }
    ).encode()


async def _too_large(send: Any, limit: int, path: str = "") -> None:
    body = _too_large_body(path, limit)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: 413 for bodies over the limit, without storing them."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = _limit(path)
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        declared = next((v for k, v in headers if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit, path)
            return
        received = 0
        exceeded = False

        async def limited_receive() -> dict[str, Any]:
            nonlocal received, exceeded
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Django stops reading at a disconnect and sends nothing; the
                    # 413 is sent below, once it has returned.
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        started = False

        async def tracked_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, tracked_send)
        if exceeded and not started:
            await _too_large(send, limit, path)
