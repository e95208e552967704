"""The session-list WebSocket, ``/ws/sessions/``: one user's session-level changes
(created, renamed, each run's status, ended, deleted), through the real ASGI
application, with runs on worker threads publishing to this test's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import UUID

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from goaai.asgi import application
from goaai.runtime import rt
from runs_app.sessions import session_end
from sessions_app.publisher import user_group
from sessions_app.services import api_token_create, session_delete, session_update

TIMEOUT = 5
PATH = "/ws/sessions/"

Headers = list[tuple[bytes, bytes]]
OpenSocket = Callable[..., Awaitable[WebsocketCommunicator]]


@pytest.fixture
async def open_socket(runtime) -> AsyncIterator[OpenSocket]:
    """Connects sockets, and disconnects them all when the test ends."""
    opened: list[WebsocketCommunicator] = []

    async def connect(headers: Headers | None = None, path: str = PATH) -> WebsocketCommunicator:
        socket = WebsocketCommunicator(application, path, headers=headers or [])
        opened.append(socket)
        connected, _ = await socket.connect(timeout=TIMEOUT)
        assert connected
        return socket

    yield connect
    for socket in opened:
        # One that timed out was cancelled, and one that crashed raised already.
        if not socket.future.done():
            await socket.disconnect(timeout=TIMEOUT)


@database_sync_to_async
def auth_of(user: Any) -> Headers:
    _, raw = api_token_create(user_id=user.pk, name="session list")
    return [(b"authorization", f"Bearer {raw}".encode())]


async def ready(socket: WebsocketCommunicator) -> WebsocketCommunicator:
    assert await socket.receive_json_from(timeout=TIMEOUT) == {"type": "ready"}
    return socket


async def changes_until(socket: WebsocketCommunicator, kind: str) -> list[dict[str, Any]]:
    """The changes received up to and including the first of type ``kind``."""
    changes = []
    while True:
        frame = await socket.receive_json_from(timeout=TIMEOUT)
        assert frame["type"] == "event", frame
        changes.append(frame["event"])
        if frame["event"]["type"] == kind:
            return changes


@database_sync_to_async
def create_session(owner: Any) -> UUID:
    return rt.create_session(owner=owner).id


@database_sync_to_async
def start(session_id: UUID) -> UUID:
    return rt.start("assistant", "calculate 2 * (3 + 4)", session=session_id).run_id


async def finished(run_id: UUID) -> None:
    """Wait until the run's worker thread is done with it: SQLite's shared in-memory
    test database refuses a second writer ("table is locked") instead of waiting."""
    await sync_to_async(rt.executor.wait, thread_sensitive=False)(run_id, TIMEOUT)


@pytest.mark.django_db(transaction=True)
async def test_a_session_s_life_arrives_as_changes_with_its_id(open_socket, owner):
    socket = await ready(await open_socket(await auth_of(owner)))

    session = await create_session(owner)
    created = await changes_until(socket, "session.created")
    await database_sync_to_async(session_update)(session_id=session, title="Colours")
    renamed = await changes_until(socket, "session.updated")
    run = await start(session)
    run_changes = await changes_until(socket, "run.completed")
    await finished(run)
    await database_sync_to_async(session_end)(session_id=session)
    ended = await changes_until(socket, "session.ended")
    await database_sync_to_async(session_delete)(session_id=session)
    deleted = await changes_until(socket, "session.deleted")

    assert [(c["type"], c["session"]) for c in created] == [("session.created", str(session))]
    assert [(c["type"], c["data"]["title"]) for c in renamed] == [("session.updated", "Colours")]
    # A run's status changes, and none of its turns, tool calls or usage.
    assert [(c["type"], c["run"], c["session"]) for c in run_changes] == [
        ("run.created", str(run), str(session)),
        ("run.started", str(run), str(session)),
        ("run.completed", str(run), str(session)),
    ]
    assert run_changes[-1]["data"]["output"] == "2 * (3 + 4) = 14"
    assert [(c["type"], c["session"]) for c in ended] == [("session.ended", str(session))]
    assert [(c["type"], c["session"], c["seq"]) for c in deleted] == [
        ("session.deleted", str(session), None)
    ]
    # Changes carry the log's sequence numbers, in order.
    seqs = [c["seq"] for c in created + renamed + run_changes + ended]
    assert seqs == sorted(seqs)
    assert seqs[0] == 1
    assert await socket.receive_nothing(0.1)


@pytest.mark.django_db(transaction=True)
async def test_another_user_s_changes_never_arrive(open_socket, owner, other_user):
    alice = await ready(await open_socket(await auth_of(owner)))
    bob = await ready(await open_socket(await auth_of(other_user)))

    session = await create_session(owner)
    run = await start(session)
    alice_saw = await changes_until(alice, "run.completed")
    await finished(run)
    await database_sync_to_async(session_update)(session_id=session, title="Private")
    alice_saw += await changes_until(alice, "session.updated")
    await database_sync_to_async(session_delete)(session_id=session)
    await changes_until(alice, "session.deleted")
    # Bob's own change is the first thing his socket receives: nothing of Alice's
    # was queued before it.
    bobs = await create_session(other_user)
    bob_saw = await changes_until(bob, "session.created")

    assert [c["type"] for c in alice_saw] == [
        "session.created",
        "run.created",
        "run.started",
        "run.completed",
        "session.updated",
    ]
    assert [(c["type"], c["session"]) for c in bob_saw] == [("session.created", str(bobs))]
    assert await bob.receive_nothing(0.1)


@pytest.mark.django_db(transaction=True)
async def test_the_list_socket_needs_credentials_and_this_site_s_origin(open_socket, owner):
    anonymous = await open_socket()
    bad_token = await open_socket([(b"authorization", b"Bearer goa_nope")])
    foreign = await open_socket([*await auth_of(owner), (b"origin", b"http://evil.example")])
    by_query = await open_socket(path=f"{PATH}?token=goa_nope")

    for socket, code in ((anonymous, 4401), (bad_token, 4401), (foreign, 4403), (by_query, 4401)):
        message = await socket.receive_output(timeout=TIMEOUT)
        assert (message["type"], message.get("code")) == ("websocket.close", code)
    # Refused sockets joined no user's group.
    assert user_group(owner.pk) not in get_channel_layer().groups


@pytest.mark.django_db(transaction=True)
async def test_the_list_socket_answers_pings_and_bad_frames(open_socket, owner):
    socket = await ready(await open_socket(await auth_of(owner)))

    await socket.send_to(text_data='{"type": "subscribe"}')
    unknown = await socket.receive_json_from(timeout=TIMEOUT)
    await socket.send_to(text_data="nope")
    invalid = await socket.receive_json_from(timeout=TIMEOUT)
    await socket.send_json_to({"type": "ping"})
    pong = await socket.receive_json_from(timeout=TIMEOUT)

    assert (unknown["type"], unknown["code"]) == ("error", "unknown_type")
    assert (invalid["type"], invalid["code"]) == ("error", "invalid_json")
    assert pong == {"type": "pong"}
