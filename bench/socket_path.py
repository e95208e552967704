"""A session's live messages handed to its sockets' consumers, in one process.

N WebSocket connections of one session are opened on goaai's ASGI application
(authentication by an API token, routing, ``SessionConsumer``, goaai's in-memory
layer) with a server ``send`` that only counts the frames, so what is measured is
goaai's own path from the channel layer to the server, without a server's sending.
The baseline, in the same process and alternated with it: the plainest channels
consumer that sends the same frames (channels' ``AsyncWebsocketConsumer``, in the
group, whose handler sends each encoded event; no authentication, no session
middleware; its ``dispatch`` without the hop to a thread that closes old database
connections, as goaai's) on a layer of goaai's in-memory class of its own. Each case
publishes ``--messages`` messages to the group, each either one event or a step of
four (as a run's last step: turn.completed, message.completed, usage,
run.completed), and waits until every socket has sent every frame. Printed:
microseconds per frame for each side (medians of ``--rounds``) and goaai / baseline
(lower is better for goaai).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import tempfile
import time
from typing import Any
from uuid import UUID

from fanout import setup_database


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=500)
    parser.add_argument("--messages", type=int, default=100, help="messages per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


class Server:
    """The sockets' side of the server: connections opened on an application, and
    the frames each has sent since the case began."""

    def __init__(self, application: Any, count: int) -> None:
        self.application = application
        self.count = count
        self.sent = [0] * count
        self.ready = [asyncio.Event() for _ in range(count)]
        self.expected = 0
        self.left = 0
        self.greeted = True
        self.done = asyncio.Event()
        self.inboxes: list[asyncio.Queue[dict[str, Any]]] = []
        self.tasks: list[asyncio.Task[Any]] = []

    def _send(self, index: int) -> Any:
        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.accept":
                # A consumer accepts once it has joined its groups.
                if not self.greeted:
                    self.ready[index].set()
                return
            if message["type"] != "websocket.send":
                raise RuntimeError(f"socket {index}: {message}")
            if not self.ready[index].is_set():
                if '"caught_up"' in message.get("text", ""):
                    self.ready[index].set()
                return
            self.sent[index] += 1
            if self.sent[index] == self.expected:
                self.left -= 1
                if self.left == 0:
                    self.done.set()

        return send

    async def open(self, path: str, headers: list[tuple[bytes, bytes]], greeted: bool) -> None:
        """Connect every socket, each ready once it takes the group's messages:
        ``greeted``, after the consumer's ``caught_up``, else once it accepted."""
        self.greeted = greeted
        for index in range(self.count):
            inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            inbox.put_nowait({"type": "websocket.connect"})
            scope = {
                "type": "websocket",
                "path": path,
                "raw_path": path.encode(),
                "headers": [(b"host", b"127.0.0.1:8000"), *headers],
                "query_string": b"",
                "client": ("127.0.0.1", 10000 + index),
                "server": ("127.0.0.1", 8000),
                "subprotocols": [],
                "asgi": {"version": "3.0"},
            }
            self.inboxes.append(inbox)
            call = self.application(scope, inbox.get, self._send(index))
            self.tasks.append(asyncio.ensure_future(call))
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in self.ready)), 120)

    async def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 60)

    async def case(self, layer: Any, group: str, messages: list[dict[str, Any]], frames: int):
        """Seconds until every socket has sent every frame of ``messages``."""
        self.sent = [0] * self.count
        self.expected, self.left = frames, self.count
        self.done.clear()
        started = time.perf_counter()
        for message in messages:
            await layer.group_send(group, message)
            await asyncio.sleep(0)
        await asyncio.wait_for(self.done.wait(), 300)
        return time.perf_counter() - started


def bare_application() -> tuple[Any, Any]:
    from channels.consumer import get_handler_name
    from channels.generic.websocket import AsyncWebsocketConsumer
    from channels.layers import channel_layers

    from goaai.channel_layers import InMemoryChannelLayer

    channel_layers.set("bare", InMemoryChannelLayer())

    class Bare(AsyncWebsocketConsumer):  # type: ignore[misc]
        channel_layer_alias = "bare"
        groups = ["bare"]

        async def dispatch(self, message: dict[str, Any]) -> None:
            await getattr(self, get_handler_name(message))(message)

        async def session_events(self, message: dict[str, Any]) -> None:
            for text in message["encoded"]:
                await self.send(text_data=f'{{"type":"event","event":{text}}}')

    return Bare.as_asgi(), channel_layers["bare"]


async def measure(args: argparse.Namespace, token: str, session: UUID) -> None:
    from channels.db import database_sync_to_async
    from channels.layers import get_channel_layer

    from goaai.asgi import application
    from sessions_app.models import Session
    from sessions_app.publisher import Written, publisher, session_group

    group = session_group(session)
    seq = [await database_sync_to_async(lambda: Session.objects.get(pk=session).last_event_seq)()]

    def step(size: int, side: str) -> dict[str, Any]:
        """The message of a step of ``size`` events; goaai's sockets take each event
        once, in order: their numbers go on from the last the session's sockets had."""
        now = dt.datetime.now(dt.UTC)
        events = [
            Written(session, None, seq[0] + 1 + n, "usage", {"n": n}, now) for n in range(size)
        ]
        if side == "goaai":
            seq[0] += size
        return publisher._messages(group, (events, None))[0][1]

    goaai = Server(application, args.sockets)
    await goaai.open(
        f"/ws/sessions/{session}/", [(b"authorization", f"Bearer {token}".encode())], True
    )
    bare_app, bare_layer = bare_application()
    bare = Server(bare_app, args.sockets)
    await bare.open("/ws/bare/", [], False)
    layer = get_channel_layer()

    print(f"{args.sockets} sockets, {args.messages} messages a case, {args.rounds} rounds")
    for size in (1, 4):
        frames = args.messages * size
        times: dict[str, list[float]] = {"goaai": [], "bare": []}
        for number in range(args.rounds):
            order = ["goaai", "bare"] if number % 2 == 0 else ["bare", "goaai"]
            for side in order:
                messages = [step(size, side) for _ in range(args.messages)]
                if side == "goaai":
                    seconds = await goaai.case(layer, group, messages, frames)
                else:
                    seconds = await bare.case(bare_layer, "bare", messages, frames)
                times[side].append(seconds / (frames * args.sockets) * 1e6)
        mine, base = statistics.median(times["goaai"]), statistics.median(times["bare"])
        label = "one event a message" if size == 1 else "steps of four events"
        print(
            f"  {label:22s} goaai {mine:6.2f} us a frame  baseline {base:6.2f} us a frame"
            f"  goaai / baseline {mine / base:.2f}x"
        )
    await goaai.close()
    await bare.close()


def main() -> None:
    args = arguments()
    # The reaper would look for runs to take up: there are none, and it only costs.
    os.environ["GOAAI_REAPER_INTERVAL"] = "0"
    with tempfile.TemporaryDirectory(prefix="goaai-sockets-") as folder:
        token, session = setup_database(f"sqlite:///{folder}/bench.sqlite3")
        asyncio.run(measure(args, token, UUID(session)))


if __name__ == "__main__":
    main()
