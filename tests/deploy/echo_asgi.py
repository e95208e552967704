"""A tiny ASGI application for the nginx tests: it records every request it gets.

Each HTTP request, once its whole body has arrived, is appended as one JSON line
to the file named by ``GOAAI_ECHO_RECORD`` (method, path, body size, the proxy
headers) and answered 200; under ``/slow/`` the answer waits a second, so that
whatever nginx buffered for it is still there to be seen, and a path ending in
``/stream/`` (and ``/mcp`` and ``/v1/...``, whose answers are event streams too) gets two events
1.5 seconds apart (after 8 MiB more with ``?large``).
A WebSocket is accepted and each text message sent back.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

_PROXY_HEADERS = (b"host", b"x-forwarded-for", b"x-forwarded-proto", b"connection")


def _record(entry: dict[str, Any]) -> None:
    with open(os.environ["GOAAI_ECHO_RECORD"], "a") as record:
        record.write(json.dumps(entry) + "\n")


async def _http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"] if k in _PROXY_HEADERS}
    _record({"method": scope["method"], "path": scope["path"], "bytes": size, **headers})
    if scope["path"].startswith("/slow/"):
        await asyncio.sleep(1)
    path = scope["path"]
    if path.endswith("/stream/") or path == "/mcp" or path.startswith("/v1/"):
        await _stream(send, large=scope["query_string"] == b"large")
        return
    body = json.dumps({"bytes": size}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _stream(send: Any, *, large: bool) -> None:
    # Two events a second and a half apart, as Server-Sent Events arrive; with
    # ?large, 8 MiB of events first, more than a client that does not read takes.
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    if large:
        event = b"data: " + b"x" * 65000 + b"\n\n"
        for _ in range(128):
            await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
    await asyncio.sleep(1.5)
    await send({"type": "http.response.body", "body": b"data: second\n\n"})


async def _websocket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    _record({"websocket": scope["path"]})
    while True:
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
        elif message["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": message.get("text") or ""})
        else:
            return


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await _http(scope, receive, send)
    elif scope["type"] == "websocket":
        await _websocket(scope, receive, send)
