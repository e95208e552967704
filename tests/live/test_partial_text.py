"""A client that connects in the middle of an answer gets the whole answer: over the
WebSocket and over Server-Sent Events, the text streamed so far (from its
checkpoint, at offset 0) before ``caught_up``, then the live deltas, with no
character missing and none twice.

The story streams a word every 10 ms and the loop checkpoints every 0.2 s here, so
that a client joins well after the first checkpoint and well before the end, with
pieces published between the checkpoint it reads and the moment it joined (the
hole the stitcher must fill from the next checkpoint).
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import OperationalError, connections

from goaai.asgi import application
from goaai.runtime import loop, rt
from goaai.runtime.models import scripted
from goaai.runtime.models.scripted import STORY
from runs_app.models import Turn
from sessions_app import streams
from sessions_app.publisher import session_group
from sessions_app.services import api_token_create
from tests.live.test_session_socket import frames_until, is_event, url
from tests.live.test_sse import Stream, events_path, is_frame

TIMEOUT = 10


@pytest.fixture
def story_pace(monkeypatch) -> None:
    monkeypatch.setattr(scripted, "STORY_PACE", 0.01)
    monkeypatch.setattr(loop, "CHECKPOINT_SECONDS", 0.2)


@pytest.fixture
def headers(owner) -> list[tuple[bytes, bytes]]:
    _, raw = api_token_create(user_id=owner.pk, name="partial text")
    return [(b"authorization", f"Bearer {raw}".encode())]


@database_sync_to_async
def start_story(owner: Any) -> tuple[UUID, UUID]:
    session = rt.create_session(owner=owner)
    return session.id, rt.start("assistant", "tell me a story", session=session.id).run_id


def _checkpointed(run_id: UUID, at_least: int) -> str:
    """Waits until the run's turn has checkpointed ``at_least`` characters."""
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            try:
                text = (
                    Turn.objects.filter(run_id=run_id, ended_at__isnull=True)
                    .values_list("response_text", flat=True)
                    .first()
                )
            except OperationalError:
                # SQLite's shared in-memory test database refuses a read while the
                # run writes, where a real one waits: ask again.
                text = None
            if text and len(text) >= at_least:
                return text
            time.sleep(0.02)
    finally:
        connections.close_all()
    raise AssertionError("the story was never checkpointed")


checkpointed = sync_to_async(_checkpointed, thread_sensitive=False)


def check_stitched(deltas: list[dict[str, Any]], final: str, before_caught_up: int) -> None:
    """The deltas of one turn, in order: the first from offset 0, each beginning
    where the one before ended, together the final text."""
    assert deltas, "no text was streamed"
    assert before_caught_up >= 1, "the text so far did not come before caught_up"
    assert deltas[0]["offset"] == 0
    assert len(deltas[0]["text"]) >= 40, "the catch-up did not send the text streamed so far"
    position = 0
    for frame in deltas:
        assert frame["offset"] == position, "a hole or a duplicate in the streamed text"
        assert frame["text"]
        position += len(frame["text"])
    assert "".join(frame["text"] for frame in deltas) == final == STORY
    # And the answer was still streaming when the client joined.
    assert len(deltas) > before_caught_up


@pytest.mark.django_db(transaction=True)
async def test_a_socket_joining_mid_answer_gets_the_text_from_its_start_then_the_rest(
    runtime, owner, headers, story_pace, on_postgres
):
    session, run = await start_story(owner)
    await checkpointed(run, 60)

    socket = WebsocketCommunicator(application, url(session), headers=headers)
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    try:
        frames = await frames_until(socket, is_event("message.completed"))
    finally:
        await socket.disconnect(timeout=TIMEOUT)

    caught_up = next(i for i, f in enumerate(frames) if f["type"] == "caught_up")
    deltas = [f for f in frames if f["type"] == "delta"]
    assert {(d["run"], d["turn"]) for d in deltas} == {(str(run), deltas[0]["turn"])}
    final = frames[-1]["event"]["data"]["text"]
    before = sum(1 for f in frames[:caught_up] if f["type"] == "delta")
    check_stitched(deltas, final, before)
    # The catch-up text came after the turn's own turn.started.
    started = next(
        i
        for i, f in enumerate(frames)
        if f["type"] == "event" and f["event"]["type"] == "turn.started"
    )
    assert started < frames.index(deltas[0]) < caught_up


@pytest.mark.django_db(transaction=True)
async def test_an_event_stream_joining_mid_answer_gets_the_text_from_its_start_then_the_rest(
    runtime, owner, headers, story_pace
):
    session, run = await start_story(owner)
    await checkpointed(run, 60)

    stream = Stream(events_path(session), headers=headers)
    assert (await stream.open())[0] == 200
    try:
        frames = await stream.frames_until(is_frame("message.completed"))
    finally:
        await stream.close()

    caught_up = next(i for i, f in enumerate(frames) if f.get("event") == "caught_up")
    deltas = [f["data"] for f in frames if f.get("event") == "delta"]
    assert all("id" not in f for f in frames if f.get("event") == "delta")
    assert {d["run"] for d in deltas} == {str(run)}
    final = frames[-1]["data"]["data"]["text"]
    before = sum(1 for f in frames[:caught_up] if f.get("event") == "delta")
    check_stitched(deltas, final, before)


@pytest.mark.django_db(transaction=True)
async def test_a_hole_in_the_live_pieces_is_filled_from_the_next_checkpoint(
    runtime, owner, headers, monkeypatch
):
    # Made by hand: a running run whose turn checkpointed "Once upon", then pieces
    # sent straight to the group as the publisher sends them, one beyond a hole.
    monkeypatch.setattr(streams, "REREAD_SECONDS", 0.0)
    store = rt.store

    @database_sync_to_async
    def streaming_run() -> tuple[UUID, UUID, UUID]:
        session = rt.create_session(owner=owner)
        created = store.create_run(
            session_id=session.id, agent="assistant", input="hi", labels={}, metadata={}, policy={}
        )
        store.claim_run(created.id, owner="w1", lease_seconds=60)
        turn = store.start_turn(run_id=created.id, index=0, model="scripted", messages=[])
        store.checkpoint_turn(turn_id=turn, text="Once upon")
        return session.id, created.id, turn

    session, run, turn = await streaming_run()
    socket = WebsocketCommunicator(application, url(session), headers=headers)
    assert (await socket.connect(timeout=TIMEOUT))[0]
    try:
        frames = await frames_until(socket, lambda f: f["type"] == "caught_up")
        assert [f for f in frames if f["type"] == "delta"] == [
            {"type": "delta", "run": str(run), "turn": str(turn), "offset": 0, "text": "Once upon"}
        ]

        async def piece(offset: int, text: str) -> None:
            await get_channel_layer().group_send(
                session_group(session),
                {
                    "type": "run.delta",
                    "run": str(run),
                    "turn": str(turn),
                    "offset": offset,
                    "text": text,
                },
            )

        await piece(5, "upon")  # had already: dropped
        await piece(9, " a")  # follows on
        await piece(17, " there")  # beyond a hole (" time,"): held
        assert await socket.receive_json_from(timeout=TIMEOUT) == {
            "type": "delta",
            "run": str(run),
            "turn": str(turn),
            "offset": 9,
            "text": " a",
        }
        assert await socket.receive_nothing(0.2)
        await database_sync_to_async(store.checkpoint_turn)(
            turn_id=turn, text="Once upon a time, there lived"
        )
        await piece(23, " lived")
        # The checkpoint read again fills the hole; the held pieces it covers go.
        assert await socket.receive_json_from(timeout=TIMEOUT) == {
            "type": "delta",
            "run": str(run),
            "turn": str(turn),
            "offset": 11,
            "text": " time, there lived",
        }
        assert await socket.receive_nothing(0.2)
    finally:
        await socket.disconnect(timeout=TIMEOUT)
