"""Requests through the server's application cross from the event loop to a thread
once for their middleware and view (goaai.asgi_handler), and keep every middleware's
effect; async views still answer, streamed ones included."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import AsyncToSync
from channels.db import database_sync_to_async

from goaai.asgi import application
from sessions_app.services import api_token_create
from tests.goaai.test_body_limit import http_scope

pytestmark = pytest.mark.django_db(transaction=True)


async def get(path: str, headers: list[tuple[bytes, bytes]] = (), *, until: bytes = b""):
    """One GET through the ASGI application: the status, the headers and the body
    (a streamed one read until ``until`` appears in it, then the client leaves)."""
    scope = http_scope("GET", path, list(headers))
    gone = asyncio.Event()
    sent: list[dict] = []
    asked = False

    async def receive():
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        if until and until in body:
            gone.set()

    await asyncio.wait_for(application(scope, receive, send), 10)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers: dict[bytes, bytes] = {}
    for name, value in start["headers"]:
        known = headers.get(name.lower())
        headers[name.lower()] = value if known is None else known + b"\n" + value
    return start["status"], headers, body


@pytest.fixture
def hops(monkeypatch):
    """How often the loop handed work to a thread, and a thread to the loop."""
    counted = {"to a thread": 0, "to the loop": 0}
    loop_type = type(asyncio.get_event_loop_policy().new_event_loop())
    to_thread = loop_type.run_in_executor
    to_loop = AsyncToSync.__call__

    def run_in_executor(self, executor, func, *args):
        counted["to a thread"] += 1
        return to_thread(self, executor, func, *args)

    def call(self, *args, **kwargs):
        counted["to the loop"] += 1
        return to_loop(self, *args, **kwargs)

    monkeypatch.setattr(loop_type, "run_in_executor", run_in_executor)
    monkeypatch.setattr(AsyncToSync, "__call__", call)
    return counted


@pytest.fixture
async def bearer(owner):
    _, raw = await database_sync_to_async(api_token_create)(user_id=owner.pk, name="t")
    return [(b"authorization", f"Bearer {raw}".encode())]


async def test_an_api_request_crosses_to_a_thread_once_for_its_middleware_and_view(bearer, hops):
    await get("/api/v1/sessions/", bearer)  # the first of a kind warms up
    hops.update({"to a thread": 0, "to the loop": 0})
    status, _, body = await get("/api/v1/sessions/", bearer)
    assert status == 200, body
    # Django's request-started signal, the middleware and the view, the response's
    # close (with the request-finished signal). Django's async chain crossed nine
    # times, and back to the loop once.
    assert hops == {"to a thread": 3, "to the loop": 0}


async def test_every_middleware_still_applies(owner):
    status, headers, _ = await get("/healthz")
    assert status == 200
    assert headers[b"x-frame-options"] == b"DENY"  # clickjacking
    assert headers[b"x-content-type-options"] == b"nosniff"  # security
    status, headers, body = await get("/")
    assert status in (200, 302), body
    assert b"content-security-policy" in headers  # CSP
    # A page for a signed-out visitor sends them to sign in, with the CSRF cookie
    # for the form (sessions, authentication, CSRF).
    status, headers, body = await get("/accounts/login/")
    assert status == 200, body
    assert b"csrftoken" in headers[b"set-cookie"]


async def test_async_views_answer_through_the_sync_chain(bearer, owner):
    from goaai.runtime import rt

    status, _, body = await get("/v1/models", bearer)
    assert status == 200, body
    assert json.loads(body)["object"] == "list"
    session = await database_sync_to_async(rt.create_session)(owner=owner, agent="assistant")
    # A stream of the session's events (an async view whose answer streams on the
    # loop) opens and says it is ready; the client then leaves.
    status, headers, body = await get(
        f"/api/v1/sessions/{session.id}/events/stream/", bearer, until=b"\n\n"
    )
    assert status == 200, body
    assert headers[b"content-type"].startswith(b"text/event-stream")
