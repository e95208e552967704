"""The ASGI server refuses oversized bodies before Django stores them."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from goaai.asgi import application
from sessions_app.services import api_token_create

pytestmark = pytest.mark.django_db(transaction=True)


def http_scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict:
    """The ASGI scope of an HTTP request from 127.0.0.1."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def call(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]]):
    """Run one HTTP request through the ASGI application; returns the status, the
    body and how many body chunks the application read."""
    scope = http_scope("POST", path, headers)
    read = 0

    async def receive():
        nonlocal read
        if read < len(chunks):
            read += 1
            return {
                "type": "http.request",
                "body": chunks[read - 1],
                "more_body": read < len(chunks),
            }
        # The client stays connected while it waits for the answer.
        await asyncio.Future()

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body, read


async def test_a_body_announced_too_large_is_refused_unread(settings):
    settings.GOAAI_API_MAX_BODY_BYTES = 100
    status, body, read = await call(
        "/api/v1/sessions/", [b"x" * 50] * 10, [(b"content-length", b"500")]
    )
    assert status == 413
    assert json.loads(body)["errors"][0]["code"] == "payload_too_large"
    assert read == 0


async def test_a_body_without_a_length_stops_being_read_past_the_limit(settings):
    settings.GOAAI_API_MAX_BODY_BYTES = 100
    status, body, read = await call("/api/v1/sessions/", [b"x" * 60] * 50, [])
    assert status == 413
    assert json.loads(body)["type"] == "client_error"
    assert read == 2  # 120 bytes: past the limit, and not a chunk more


async def test_pages_outside_the_api_have_their_own_limit(settings):
    settings.GOAAI_MAX_BODY_BYTES = 1000
    status, _, read = await call("/accounts/login/", [b"x" * 600] * 5, [])
    assert status == 413
    assert read == 2


async def test_a_body_within_the_limit_reaches_the_api(owner):
    _, raw = await database_sync_to_async(api_token_create)(user_id=owner.pk, name="t")
    payload = json.dumps({"agent": "assistant", "title": "small"}).encode()
    status, body, _ = await call(
        "/api/v1/sessions/",
        [payload[:10], payload[10:]],
        [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"authorization", f"Bearer {raw}".encode()),
        ],
    )
    assert status == 201, body
    assert json.loads(body)["title"] == "small"
