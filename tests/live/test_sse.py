"""The live streams as Server-Sent Events: ``/api/v1/sessions/{id}/events/stream/``
and the per-user ``/api/v1/sessions/stream/``.

Requests go to the real ASGI application as a server would send them: the request,
then nothing until the client goes away (``http.disconnect``). The response body is
read chunk by chunk as it streams, and a stream that ends must leave no member in
its channel-layer group.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import UUID

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.test import Client

from goaai.asgi import application
from goaai.runtime import rt
from sessions_app.models import RunEvent
from sessions_app.publisher import session_group, user_group
from sessions_app.services import api_token_create, session_delete, session_update

TIMEOUT = 5
REMEMBER = "remember my favourite colour is green"

Headers = list[tuple[bytes, bytes]]


class Stream:
    """One GET request to the ASGI application, read the way an SSE client reads."""

    def __init__(self, path: str, query: str = "", headers: Headers | None = None) -> None:
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(b"host", b"localhost"), *(headers or [])],
            "client": ("127.0.0.1", 40000),
            "server": ("localhost", 8000),
        }
        self.requested = False
        self.gone = asyncio.Event()
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.buffer = ""
        self.ended = False
        self.task: asyncio.Task[None] | None = None

    async def receive(self) -> dict[str, Any]:
        if not self.requested:
            self.requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        await self.sent.put(message)

    async def open(self) -> tuple[int, dict[str, str]]:
        """Send the request; returns the response's status and headers."""
        self.task = asyncio.create_task(application(self.scope, self.receive, self.send))
        start = await asyncio.wait_for(self.sent.get(), TIMEOUT)
        assert start["type"] == "http.response.start", start
        headers = {name.decode().lower(): value.decode() for name, value in start["headers"]}
        return start["status"], headers

    async def chunk(self) -> str:
        message = await asyncio.wait_for(self.sent.get(), TIMEOUT)
        assert message["type"] == "http.response.body", message
        self.ended = not message.get("more_body", False)
        return message.get("body", b"").decode()

    async def body(self) -> str:
        """All of a response that is not a stream."""
        text = ""
        while not self.ended:
            text += await self.chunk()
        return text

    async def frame(self) -> dict[str, Any]:
        """The next frame: its fields (``data`` decoded from JSON), or ``comment``."""
        while "\n\n" not in self.buffer:
            assert not self.ended, f"the stream ended: {self.buffer!r}"
            self.buffer += await self.chunk()
        text, self.buffer = self.buffer.split("\n\n", 1)
        frame: dict[str, Any] = {}
        for line in text.split("\n"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "":
                frame["comment"] = value
            elif field == "data":
                frame["data"] = json.loads(value)
            else:
                assert field not in frame, text
                frame[field] = value
        return frame

    async def frames_until(self, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        frames = []
        while True:
            frames.append(await self.frame())
            if done(frames[-1]):
                return frames

    async def close(self) -> None:
        """The client goes away; the application must end the response."""
        self.gone.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, TIMEOUT)


OpenStream = Callable[..., Awaitable[tuple[Stream, int, dict[str, str]]]]


# Fixtures


@pytest.fixture
async def request_stream(runtime) -> AsyncIterator[OpenStream]:
    """Sends requests, and makes sure every client is gone when the test ends."""
    opened: list[Stream] = []

    async def open_stream(
        path: str, query: str = "", headers: Headers | None = None
    ) -> tuple[Stream, int, dict[str, str]]:
        stream = Stream(path, query, headers)
        opened.append(stream)
        status, response_headers = await stream.open()
        return stream, status, response_headers

    yield open_stream
    for stream in opened:
        if stream.task is not None and not stream.task.done():
            await stream.close()


@pytest.fixture
def auth(owner) -> Headers:
    _, raw = api_token_create(user_id=owner.pk, name="sse")
    return bearer(raw)


@pytest.fixture
def session(runtime, owner) -> UUID:
    """A session with one finished run: 15 stored events."""
    session = rt.create_session(owner=owner)
    rt.run("assistant", REMEMBER, session=session.id, timeout=30)
    return session.id


# Helpers


def bearer(raw: str) -> Headers:
    return [(b"authorization", f"Bearer {raw}".encode())]


def events_path(session_id: UUID | str) -> str:
    return f"/api/v1/sessions/{session_id}/events/stream/"


LIST_PATH = "/api/v1/sessions/stream/"


@database_sync_to_async
def stored(session_id: UUID, after: int = 0) -> list[dict[str, Any]]:
    rows = RunEvent.objects.filter(session_id=session_id, seq__gt=after).order_by("seq")
    return [json.loads(json.dumps(row.as_dict())) for row in rows]


def is_frame(event: str, count: int = 1) -> Callable[[dict[str, Any]], bool]:
    """A ``done`` for :meth:`Stream.frames_until`: the ``count``-th ``event``."""
    seen = 0

    def done(frame: dict[str, Any]) -> bool:
        nonlocal seen
        seen += frame.get("event") == event
        return seen == count

    return done


def event_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if "id" in f]


def check_event_frames(frames: list[dict[str, Any]], log: list[dict[str, Any]]) -> None:
    """Each stored event as one frame: ``id`` its seq, ``event`` its type, ``data`` it."""
    assert [f["data"] for f in frames] == log
    assert [(f["id"], f["event"]) for f in frames] == [(str(e["seq"]), e["type"]) for e in log]


async def no_subscribers(group: str) -> None:
    """The group is empty once the stream has cleaned up."""
    assert not get_channel_layer().groups.get(group)


# The session's event stream


@pytest.mark.django_db(transaction=True)
async def test_the_stream_sends_the_backlog_then_caught_up_then_live_events(
    request_stream, session, auth
):
    stream, status, headers = await request_stream(events_path(session), headers=auth)

    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache"
    assert await stream.frame() == {"retry": "2000"}
    backlog = await stream.frames_until(is_frame("caught_up"))
    check_event_frames(backlog[:-1], await stored(session))
    assert backlog[-1] == {"event": "caught_up", "data": {"seq": 15}}

    run = await database_sync_to_async(rt.start)("assistant", REMEMBER, session=session)
    live = await stream.frames_until(is_frame("run.completed"))

    check_event_frames(event_frames(live), await stored(session, 15))
    deltas = [f for f in live if f.get("event") == "delta"]
    message = next(f["data"]["data"] for f in live if f.get("event") == "message.completed")
    # Deltas have no id (they are not stored, a client cannot resume from one).
    assert all(set(f) == {"event", "data"} for f in deltas)
    assert {(f["data"]["run"], f["data"]["turn"]) for f in deltas} == {
        (str(run.run_id), message["turn"])
    }
    assert "".join(f["data"]["text"] for f in deltas) == message["text"]

    await stream.close()
    await no_subscribers(session_group(session))


@pytest.mark.django_db(transaction=True)
async def test_last_event_id_or_after_resumes_after_that_event(request_stream, session, auth):
    log = await stored(session)
    for how, query, headers in (
        ("Last-Event-ID", "", [*auth, (b"last-event-id", b"9")]),
        ("?after=", "after=9", auth),
        # Both: the header wins. A browser's EventSource sends Last-Event-ID when it
        # reconnects, to the URL it first opened, whose ?after= is older.
        ("both", "after=3", [*auth, (b"last-event-id", b"9")]),
    ):
        stream, status, _ = await request_stream(events_path(session), query, headers)
        assert status == 200, how

        frames = await stream.frames_until(is_frame("caught_up"))

        check_event_frames(event_frames(frames), log[9:])
        assert frames[-1]["data"] == {"seq": 15}, how
        await stream.close()
    await no_subscribers(session_group(session))


@pytest.mark.django_db(transaction=True)
async def test_a_live_event_after_a_gap_is_sent_after_the_missing_ones(
    request_stream, session, auth, monkeypatch
):
    stream, _, _ = await request_stream(events_path(session), "after=15", auth)
    await stream.frames_until(is_frame("caught_up"))
    # Two changes whose live messages are lost; then a duplicate and the last one.
    monkeypatch.setattr("sessions_app.eventlog.publish_events", lambda events, owner_id=None: None)
    for title in ("one", "two"):
        await database_sync_to_async(session_update)(session_id=session, title=title)
    missed = await stored(session, 15)
    layer = get_channel_layer()

    for events in ([missed[0]], [missed[0]], [missed[1]]):
        await layer.group_send(session_group(session), {"type": "session.events", "events": events})
    frames = [await stream.frame() for _ in missed]

    check_event_frames(frames, missed)
    await stream.close()
    await no_subscribers(session_group(session))


@pytest.mark.django_db(transaction=True)
async def test_a_gap_larger_than_max_live_gap_ends_the_stream_with_resync(
    request_stream, session, auth, monkeypatch
):
    monkeypatch.setattr("sessions_app.streams.MAX_LIVE_GAP", 2)
    monkeypatch.setattr("sessions_app.api.sse.MAX_LIVE_GAP", 2)
    stream, _, _ = await request_stream(events_path(session), "after=15", auth)
    await stream.frames_until(is_frame("caught_up"))
    log = await stored(session)

    ahead = {**log[-1], "seq": 19}
    await get_channel_layer().group_send(
        session_group(session), {"type": "session.events", "events": [ahead]}
    )

    assert await stream.frame() == {"event": "resync", "data": {"after": 15}}
    # The server ends the response itself, and leaves the group.
    while not stream.ended:
        assert await stream.chunk() == ""
    await no_subscribers(session_group(session))


@pytest.mark.django_db(transaction=True)
async def test_without_credentials_the_answer_is_401_in_the_api_s_error_shape(
    request_stream, session
):
    stream, status, headers = await request_stream(events_path(session))

    assert status == 401
    assert headers["content-type"] == "application/json"
    assert headers["www-authenticate"].startswith("Bearer")
    body = json.loads(await stream.body())
    assert body["type"] == "client_error"
    assert [e["code"] for e in body["errors"]] == ["not_authenticated"]
    assert set(body["errors"][0]) == {"code", "detail", "attr"}
    # A token that does not work is the same.
    stream, status, _ = await request_stream(events_path(session), headers=bearer("goa_nope"))
    assert status == 401
    assert json.loads(await stream.body())["errors"][0]["code"] == "not_authenticated"
    await no_subscribers(session_group(session))


@pytest.mark.django_db(transaction=True)
async def test_someone_else_s_session_is_404_like_a_missing_one(
    request_stream, session, other_user
):
    _, raw = await database_sync_to_async(api_token_create)(user_id=other_user.pk, name="bob")

    theirs, status, _ = await request_stream(events_path(session), headers=bearer(raw))
    missing, missing_status, _ = await request_stream(
        events_path("00000000-0000-0000-0000-000000000000"), headers=bearer(raw)
    )

    assert status == missing_status == 404
    body = json.loads(await theirs.body())
    assert body == json.loads(await missing.body())
    assert [e["code"] for e in body["errors"]] == ["not_found"]
    await no_subscribers(session_group(session))


@pytest.mark.django_db(transaction=True)
async def test_a_bad_last_event_id_is_400(request_stream, session, auth):
    for how, query, headers in (
        ("negative", "", [*auth, (b"last-event-id", b"-1")]),
        ("not a number", "", [*auth, (b"last-event-id", b"abc")]),
        ("bad after", "after=1.5", auth),
        # "²" passes str.isdigit() but not int(): a 400, not a server error.
        ("other digits", "after=%C2%B2", auth),
    ):
        stream, status, _ = await request_stream(events_path(session), query, headers)

        assert status == 400, how
        body = json.loads(await stream.body())
        assert body["type"] == "validation_error", how
        assert body["errors"][0]["attr"] == "after", how
    await no_subscribers(session_group(session))


@pytest.mark.django_db(transaction=True)
async def test_the_browser_session_cookie_and_staff_may_stream(
    request_stream, session, owner, staff
):
    cookie = await sync_to_async(cookie_of)(owner)
    _, staff_token = await database_sync_to_async(api_token_create)(user_id=staff.pk, name="ops")

    for who, headers in (("cookie", [cookie]), ("staff", bearer(staff_token))):
        stream, status, _ = await request_stream(events_path(session), "after=14", headers)

        assert status == 200, who
        frames = await stream.frames_until(is_frame("caught_up"))
        assert [(f.get("id"), f.get("event")) for f in frames] == [
            (None, None),  # retry
            ("15", "run.completed"),
            (None, "caught_up"),
        ], who


def cookie_of(user: Any) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


@pytest.mark.django_db(transaction=True)
async def test_a_client_gone_before_the_stream_starts_leaves_no_subscriber(session, auth):
    group = session_group(session)
    stream = Stream(events_path(session), headers=auth)
    layer = get_channel_layer()

    async def receive() -> dict[str, Any]:
        # The request, then the client goes away as soon as the stream has joined its
        # group, which can be before the response has started (a client that drops
        # the connection at once, as a reconnecting EventSource may).
        if not stream.requested:
            stream.requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        while not layer.groups.get(group):
            await asyncio.sleep(0)
        joined.set()
        return {"type": "http.disconnect"}

    joined = asyncio.Event()
    await asyncio.wait_for(application(stream.scope, receive, stream.send), TIMEOUT)

    assert joined.is_set()

    await no_subscribers(group)


# The per-user stream of session changes


@pytest.mark.django_db(transaction=True)
async def test_the_user_stream_sends_the_caller_s_session_changes(
    request_stream, runtime, owner, other_user, auth
):
    stream, status, headers = await request_stream(LIST_PATH, headers=auth)
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert [await stream.frame(), await stream.frame()] == [
        {"retry": "2000"},
        {"event": "ready", "data": {}},
    ]
    # Bob's token once alice's stream is open: the test database (SQLite in memory,
    # shared cache) fails a read of a table another connection is writing at once,
    # where a file database waits.
    _, raw = await database_sync_to_async(api_token_create)(user_id=other_user.pk, name="bob")
    bobs, _, _ = await request_stream(LIST_PATH, headers=bearer(raw))

    session = (await database_sync_to_async(rt.create_session)(owner=owner)).id
    await database_sync_to_async(session_update)(session_id=session, title="Colours")
    frames = await stream.frames_until(is_frame("session.updated"))
    await database_sync_to_async(session_delete)(session_id=session)
    frames += await stream.frames_until(is_frame("session.deleted"))

    assert [(f["event"], f["data"]["session"]) for f in frames] == [
        ("session.created", str(session)),
        ("session.updated", str(session)),
        ("session.deleted", str(session)),
    ]
    assert frames[1]["data"]["data"] == {"title": "Colours"}
    # Bob's stream heard none of it: its next frame is his own change.
    assert [await bobs.frame(), await bobs.frame()] == [
        {"retry": "2000"},
        {"event": "ready", "data": {}},
    ]
    his = (await database_sync_to_async(rt.create_session)(owner=other_user)).id
    assert (await bobs.frame())["data"]["session"] == str(his)

    await stream.close()
    await bobs.close()
    await no_subscribers(user_group(owner.pk))
    await no_subscribers(user_group(other_user.pk))


@pytest.mark.django_db(transaction=True)
async def test_the_user_stream_needs_credentials(request_stream, runtime):
    stream, status, _ = await request_stream(LIST_PATH)

    assert status == 401
    assert json.loads(await stream.body())["errors"][0]["code"] == "not_authenticated"
