"""How a live socket's consumer takes its messages: from the client and from the
channel layer, each source read by a task for the socket's life, every message
handled one at a time; and the frames it sends handed to the server's own ``send``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from sessions_app.api.authentication import websocket_auth
from sessions_app.consumers import _Consumer

TIMEOUT = 5

# Channels closes the thread's old database connections as a socket connects.
pytestmark = pytest.mark.django_db(transaction=True)


class Probe(_Consumer):
    """A consumer that accepts anyone and notes what it handles."""

    opened: list[Probe] = []
    gate: asyncio.Event
    log: list[str]

    async def connect(self) -> None:
        self.log = []
        self.gate = asyncio.Event()
        self.groups_joined = []
        Probe.opened.append(self)
        await self.accept()

    async def slow_thing(self, message: dict[str, Any]) -> None:
        self.log.append("slow started")
        await self.gate.wait()
        self.log.append("slow ended")

    async def quick_thing(self, message: dict[str, Any]) -> None:
        self.log.append(f"quick {message['n']}")

    async def on_ping(self) -> None:
        self.log.append("ping")

    async def broken_thing(self, message: dict[str, Any]) -> None:
        raise RuntimeError("a handler failed")


@pytest.fixture
async def probe() -> Any:
    Probe.opened = []
    socket = WebsocketCommunicator(Probe.as_asgi(), "/ws/probe/")
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    yield socket, Probe.opened[0]
    if not socket.future.done():
        await socket.disconnect(timeout=TIMEOUT)


async def until(condition: Any) -> None:
    async with asyncio.timeout(TIMEOUT):
        while not condition():
            await asyncio.sleep(0.01)


async def test_messages_from_the_layer_and_the_client_are_handled_one_at_a_time(probe):
    socket, consumer = probe
    layer = get_channel_layer()
    await layer.send(consumer.channel_name, {"type": "slow.thing"})
    await until(lambda: consumer.log == ["slow started"])
    await layer.send(consumer.channel_name, {"type": "quick.thing", "n": 1})
    await socket.send_json_to({"type": "ping"})
    # Neither is taken while the first is being handled.
    assert await socket.receive_nothing(0.1)
    assert consumer.log == ["slow started"]

    consumer.gate.set()
    assert await socket.receive_json_from(TIMEOUT) == {"type": "pong"}
    await until(lambda: len(consumer.log) == 4)
    assert consumer.log[:2] == ["slow started", "slow ended"]
    assert sorted(consumer.log[2:]) == ["ping", "quick 1"]


async def test_the_layers_messages_are_handled_in_the_order_they_were_sent(probe):
    _, consumer = probe
    layer = get_channel_layer()
    for n in range(20):
        await layer.send(consumer.channel_name, {"type": "quick.thing", "n": n})
    await until(lambda: len(consumer.log) == 20)
    assert consumer.log == [f"quick {n}" for n in range(20)]


async def test_a_socket_that_disconnects_stops_receiving_from_the_layer(probe):
    socket, consumer = probe
    layer = get_channel_layer()
    await until(lambda: consumer.channel_name in layer._receiving)
    await socket.disconnect(timeout=TIMEOUT)
    assert socket.future.done()
    # Its receive was cancelled, not left waiting on the channel.
    assert consumer.channel_name not in layer._receiving


async def test_a_handler_that_fails_ends_the_socket_with_its_error(probe):
    socket, consumer = probe
    await get_channel_layer().send(consumer.channel_name, {"type": "broken.thing"})
    with pytest.raises(RuntimeError, match="a handler failed"):
        await socket.wait(TIMEOUT)


async def test_a_consumer_sends_through_the_servers_own_send():
    """Nothing wraps the server's ``send`` between the server and a socket's frames
    (channels' session middleware wrapped it to save sessions, which a WebSocket
    never does): a frame to one of many subscribers costs only its own sending."""
    Probe.opened = []
    sent: list[dict[str, Any]] = []

    async def server_send(message: dict[str, Any]) -> None:
        sent.append(message)

    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "websocket.connect"})
    scope = {
        "type": "websocket",
        "path": "/ws/probe/",
        "headers": [(b"cookie", b"sessionid=not-a-session")],
        "query_string": b"",
    }
    app = asyncio.ensure_future(websocket_auth(Probe.as_asgi())(scope, inbox.get, server_send))
    await until(lambda: Probe.opened)
    consumer = Probe.opened[0]
    assert consumer.base_send is server_send
    assert [message["type"] for message in sent] == ["websocket.accept"]
    # The session and the user are still there for the consumer to look at.
    assert consumer.scope["session"].session_key is None
    assert not consumer.scope["user"].is_authenticated
    await inbox.put({"type": "websocket.disconnect", "code": 1000})
    await asyncio.wait_for(app, TIMEOUT)
