"""Revoking a token closes the live streams of the tokens made with it, as it
closes its own."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from goaai.asgi import application
from goaai.runtime import rt
from sessions_app.services import api_token_create, api_token_revoke

TIMEOUT = 5


@database_sync_to_async
def _family(owner):
    """A token, a child made with it and a grandchild made with the child."""
    parent, _ = api_token_create(user_id=owner.pk, name="parent")
    child, child_raw = api_token_create(user_id=owner.pk, name="child", parent=parent)
    _, grandchild_raw = api_token_create(user_id=owner.pk, name="grandchild", parent=child)
    session = rt.create_session(owner=owner)
    return parent.pk, session.id, [child_raw, grandchild_raw]


async def _caught_up(socket: WebsocketCommunicator) -> None:
    while (await socket.receive_json_from(timeout=TIMEOUT))["type"] != "caught_up":
        pass


@pytest.mark.django_db(transaction=True)
async def test_revoking_a_parent_closes_the_sockets_its_children_opened(runtime, owner):
    parent_id, session_id, descendants = await _family(owner)
    sockets = []
    for raw in descendants:
        socket = WebsocketCommunicator(
            application,
            f"/ws/sessions/{session_id}/",
            headers=[(b"authorization", f"Bearer {raw}".encode())],
        )
        connected, _ = await socket.connect(timeout=TIMEOUT)
        assert connected
        await _caught_up(socket)
        sockets.append(socket)

    await database_sync_to_async(api_token_revoke)(token_id=parent_id)

    for socket in sockets:
        frame = await socket.receive_json_from(timeout=TIMEOUT)
        assert frame["type"] == "error"
        assert frame["code"] == "token_revoked"
        closed = await socket.receive_output(timeout=TIMEOUT)
        assert closed == {"type": "websocket.close", "code": 4401}
