"""Live fan-out: many WebSocket subscribers of one streaming session, on one server.

One daphne server (as ``make run`` starts it: SQLite, the thread executor, ``DEBUG``
off; the in-memory channel layer, or with ``--redis`` the layer ``REDIS_URL`` selects)
holds one session. Each round, a process of its own opens ``N`` WebSocket
subscribers of that session (``/ws/sessions/<id>/?batch=1``, as the chat page asks:
a step's events in one frame; ``--frames events`` for one frame per event, as a
client that does not ask gets them; authenticated by an API token),
waits until each has caught up, then posts a message whose answer streams word by
word (the scripted model's story: about 150 words, plus the run's events) and reads
every socket until the run has ended on each. Rounds alternate the subscriber
counts (``--subscribers 100 500``).

For every event frame a subscriber receives, its delay is the time it arrived less
the time the event was written (``created_at``; one machine, one clock). Printed per
subscriber count: p50 and p99 of those delays over all (event, subscriber) pairs,
the delta frames a subscriber received, whether each subscriber got every event of
the run once and in order, and the server's CPU time per round. Target: p99 at the
largest count within 2x the p99 at the smallest.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import gc
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from _common import ROOT, free_port, private_redis
from _common import server_environment as common_environment
from api_throughput import RUN_RATE, stop
from capacity import call, cpu_seconds, start_server

MESSAGE = "tell me a story"
ENDED = {"run.completed", "run.failed", "run.canceled", "run.timed_out"}
# How an event of those types begins in a frame (events are sent as compact JSON).
ENDED_MARKS = tuple(f'"type":"{kind}"'.encode() for kind in sorted(ENDED))
TARGET = 2.0


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--subscribers", type=int, nargs="+", default=[100, 500], help="counts to compare"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per subscriber count")
    parser.add_argument(
        "--redis",
        action="store_true",
        help="give the server REDIS_URL (RedisPubSubChannelLayer), on a redis-server of "
        "the benchmark's own",
    )
    parser.add_argument(
        "--server",
        choices=["daphne", "uvicorn"],
        default="daphne",
        help="the ASGI server (uvicorn speaks WebSocket through the websockets package; "
        "the subscribers ask for no compression)",
    )
    parser.add_argument(
        "--frames",
        choices=["steps", "events"],
        default="steps",
        help="steps: the subscribers ask for a step's events in one frame (?batch=1, as "
        "the chat page does); events: one frame per event (clients that do not ask)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file and the log")
    return parser.parse_args()


@dataclass
class Subscriber:
    """What one socket received of the round's run."""

    # (run, seq, delay) of each event frame, as received
    events: list[tuple[str, int, float]] = field(default_factory=list)
    deltas: int = 0
    types: list[str] = field(default_factory=list)


def setup_database(url: str) -> tuple[str, str]:
    """The user's API token, and the session all subscribers follow."""
    os.environ.update(
        DATABASE_URL=url, DJANGO_SETTINGS_MODULE="goaai.settings", LOG_LEVEL="WARNING", DEBUG="0"
    )
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from goaai.runtime import rt
    from sessions_app.services import api_token_create

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("fanout", password=None)
    _, raw = api_token_create(user_id=user.pk, name="fanout")
    session = rt.create_session(owner=user, agent="assistant", title="Fan-out")
    return raw, str(session.id)


# The subscribers: a process of their own, so that reading 500 sockets does not
# compete with this process's timing. Each socket is read by an asyncio protocol
# that notes the time its bytes arrived and keeps the frames whole, decoding them
# only once the run has ended: a WebSocket client library spends about as much CPU
# on a frame as the server does sending it, and one process reading 500 of them
# would then measure its own backlog (a step's four events are 2,000 frames) rather
# than the server's delivery, which 500 browsers would each read on their own.


class _Reader(asyncio.Protocol):
    """One subscriber's socket: the WebSocket handshake (no extension asked for), then
    every text frame with the time its last byte arrived. Answers pings."""

    def __init__(self, request: bytes, ready: asyncio.Event, run: list[str]) -> None:
        self.request = request
        self.ready = ready
        self.run = run
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.buffer = bytearray()
        self.upgraded = False
        self.frames: list[tuple[float, bytes]] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        arrived = time.time()
        self.buffer += data
        if not self.upgraded:
            head = self.buffer.find(b"\r\n\r\n")
            if head < 0:
                return
            status = bytes(self.buffer[: self.buffer.find(b"\r\n")])
            if b" 101 " not in status:
                self._fail(f"the handshake was refused: {status.decode(errors='replace')}")
                return
            del self.buffer[: head + 4]
            self.upgraded = True
        while (frame := self._frame()) is not None:
            opcode, payload = frame
            if opcode == 0x1:
                self._text(arrived, payload)
            elif opcode == 0x9:
                self._send(0xA, payload)
            elif opcode == 0x8:
                self._fail(f"the server closed the socket: {payload[:2].hex()}")

    def _frame(self) -> tuple[int, bytes] | None:
        """The next whole frame in the buffer (server frames are not masked)."""
        buffer = self.buffer
        if len(buffer) < 2:
            return None
        length, start = buffer[1] & 0x7F, 2
        if length == 126:
            if len(buffer) < 4:
                return None
            length, start = int.from_bytes(buffer[2:4], "big"), 4
        elif length == 127:
            if len(buffer) < 10:
                return None
            length, start = int.from_bytes(buffer[2:10], "big"), 10
        if len(buffer) < start + length:
            return None
        opcode, payload = buffer[0] & 0x0F, bytes(buffer[start : start + length])
        del buffer[: start + length]
        return opcode, payload

    def _text(self, arrived: float, payload: bytes) -> None:
        if not self.ready.is_set():
            if json.loads(payload)["type"] == "caught_up":
                self.ready.set()
            return
        self.frames.append((arrived, payload))
        # The run's end, found in the frame's bytes: decoding the frame here would
        # delay the sockets read after this one (the end's frame is a few kilobytes,
        # decoded for 500 sockets one after the other), and be measured as the
        # server's delay.
        if (
            self.run
            and not self.ended.done()
            and any(mark in payload for mark in ENDED_MARKS)
            and self.run[0].encode() in payload
        ):
            self.ended.set_result(None)

    def _send(self, opcode: int, payload: bytes) -> None:
        """A client frame: masked, as clients must."""
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        assert self.transport is not None
        assert len(payload) < 126
        self.transport.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def _fail(self, why: str) -> None:
        if not self.ended.done():
            self.ended.set_exception(RuntimeError(why))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"the connection was lost: {exc}")

    def close(self) -> None:
        self._send(0x8, (1000).to_bytes(2, "big"))
        assert self.transport is not None
        self.transport.close()

    def received(self, out: Subscriber) -> None:
        """Decode what arrived after catching up into ``out``."""
        for arrived, payload in self.frames:
            frame = json.loads(payload)
            if frame["type"] == "delta":
                out.deltas += 1
                continue
            for event in _events(frame):
                written = dt.datetime.fromisoformat(event["created_at"]).timestamp()
                # The run's first events may come before its id reaches this process.
                out.events.append((str(event.get("run")), int(event["seq"]), arrived - written))
                out.types.append(event["type"])


def _events(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """The events a frame holds: an ``events`` frame's list, an ``event`` frame's one."""
    if frame["type"] == "events":
        events: list[dict[str, Any]] = frame["events"]
        return events
    return [frame["event"]] if frame["type"] == "event" else []


def _handshake(port: int, session: str, token: str, frames: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET /ws/sessions/{session}/{'?batch=1' if frames == 'steps' else ''} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Authorization: Bearer {token}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _follow(port: int, reader: _Reader) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_connection(lambda: reader, "127.0.0.1", port)
    try:
        await reader.ended
    finally:
        reader.close()


def subscribe(
    pipe: Connection, port: int, token: str, session: str, count: int, frames: str
) -> None:
    """Open ``count`` sockets, say so, learn the run to follow, read it to its end."""
    # The measuring process must not pause to collect garbage (its 500 sockets make
    # each full collection long): it lives for one round, and keeps what it makes.
    gc.disable()

    async def main() -> None:
        subscribers = [Subscriber() for _ in range(count)]
        readies = [asyncio.Event() for _ in range(count)]
        run: list[str] = []
        readers = [_Reader(_handshake(port, session, token, frames), r, run) for r in readies]
        tasks = []
        for i, reader in enumerate(readers):
            tasks.append(asyncio.create_task(_follow(port, reader)))
            if i % 25 == 24:
                await asyncio.sleep(0.05)  # connect in batches, as pages open
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
        pipe.send("ready")
        loop = asyncio.get_running_loop()
        run.append(await loop.run_in_executor(None, pipe.recv))
        await asyncio.wait_for(asyncio.gather(*tasks), 300)
        # Decoded once every socket has had the run's end: decoding a socket's frames
        # as soon as it had it would keep this process from reading the others.
        for reader, subscriber in zip(readers, subscribers, strict=True):
            reader.received(subscriber)
        pipe.send([(s.events, s.deltas) for s in subscribers])
        if os.environ.get("FANOUT_BY_TYPE"):
            print_by_type(subscribers)

    asyncio.run(main())


def print_by_type(subscribers: list[Subscriber]) -> None:
    """The delays of each type of event (``FANOUT_BY_TYPE=1``)."""
    by_type: dict[str, list[float]] = {}
    for subscriber in subscribers:
        for (_, _, delay), kind in zip(subscriber.events, subscriber.types, strict=True):
            by_type.setdefault(kind, []).append(delay)
    for kind, delays in by_type.items():
        median, most = statistics.median(delays) * 1000, max(delays) * 1000
        print(f"  {kind:24s} p50 {median:8.1f} ms  max {most:8.1f} ms")


@dataclass
class Round:
    count: int
    delays: list[float]
    deltas: list[int]
    complete: int
    expected: list[int]
    server_cpu: float
    seconds: float


def one_round(port: int, token: str, session: str, count: int, pid: int, frames: str) -> Round:
    parent, child = multiprocessing.Pipe()
    reader = multiprocessing.Process(
        target=subscribe, args=(child, port, token, session, count, frames)
    )
    reader.start()
    if not parent.poll(180) or parent.recv() != "ready":
        reader.kill()
        raise RuntimeError(f"{count} subscribers did not all catch up")
    before = last_seq(port, token, session)
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    status, body = call(
        port, token, "POST", f"/api/v1/sessions/{session}/runs/", {"input": MESSAGE}
    )
    if status != 201:
        reader.kill()
        raise RuntimeError(f"posting the message: {status} {body}")
    parent.send(str(body["id"]))
    results = parent.recv()
    seconds = time.perf_counter() - started
    reader.join()
    server_cpu = cpu_seconds(pid) - cpu
    # What the run wrote, as the database holds it: every subscriber must have it all.
    expected = [
        e["seq"] for e in events_after(port, token, session, before) if e["run"] == body["id"]
    ]
    run = str(body["id"])
    delays = [delay for events, _ in results for r, _, delay in events if r == run]
    complete = sum(1 for events, _ in results if [s for r, s, _ in events if r == run] == expected)
    deltas = [d for _, d in results]
    return Round(count, delays, deltas, complete, expected, server_cpu, seconds)


def events_after(port: int, token: str, session: str, after: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        status, page = call(
            port, token, "GET", f"/api/v1/sessions/{session}/events/?after={after}&limit=500"
        )
        if status != 200:
            raise RuntimeError(f"reading the events: {status} {page}")
        found = page["results"] if isinstance(page, dict) else page
        if not found:
            return events
        events += found
        after = int(found[-1]["seq"])


def last_seq(port: int, token: str, session: str) -> int:
    events = events_after(port, token, session, 0)
    return int(events[-1]["seq"]) if events else 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def server_environment(args: argparse.Namespace, url: str, redis: str) -> dict[str, str]:
    env = common_environment(
        url,
        GOAAI_EXECUTOR="thread",
        # One user opens all the sockets: their limit is for people, not for this.
        GOAAI_RUN_RATE_PER_USER=RUN_RATE,
        GOAAI_RUN_RATE_PER_TOKEN=RUN_RATE,
    )
    if redis:
        env["REDIS_URL"] = redis
    return env


def start(args: argparse.Namespace, env: dict[str, str], port: int, log: Path) -> Any:
    """The server, once it answers."""
    if args.server == "daphne":
        server = start_server(env, port, log)
    else:
        command = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--log-level", "warning", "--ws", "websockets", "goaai.asgi:application"]
        with log.open("wb") as out:
            server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return server
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise RuntimeError(f"the server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def measure(args: argparse.Namespace, folder: Path, redis: str) -> list[Round]:
    url = f"sqlite:///{folder}/bench.sqlite3"
    token, session = setup_database(url)
    port, log = free_port(), folder / "server.log"
    server = start(args, server_environment(args, url, redis), port, log)
    rounds: list[Round] = []
    try:
        for number in range(args.rounds):
            order = args.subscribers if number % 2 == 0 else list(reversed(args.subscribers))
            for count in order:
                done = one_round(port, token, session, count, server.pid, args.frames)
                rounds.append(done)
                print(
                    f"round {number + 1}, {count:4d} subscribers: "
                    f"p50 {statistics.median(done.delays) * 1000:8.1f} ms  "
                    f"p99 {percentile(done.delays, 0.99) * 1000:8.1f} ms  "
                    f"complete {done.complete}/{count}  "
                    f"deltas/subscriber {statistics.median(done.deltas):.0f}  "
                    f"server CPU {done.server_cpu:.2f} s in {done.seconds:.1f} s",
                    flush=True,
                )
    finally:
        stop(server)
    return rounds


def main() -> None:
    args = arguments()
    folder = Path(tempfile.mkdtemp(prefix="goaai-fanout-"))
    try:
        with private_redis() if args.redis else contextlib.nullcontext("") as redis:
            rounds = measure(args, folder, redis)
        report(args, rounds)
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def report(args: argparse.Namespace, rounds: list[Round]) -> None:
    layer = "RedisPubSubChannelLayer" if args.redis else "InMemoryChannelLayer"
    print(
        f"\n{args.server}, {layer}, frames of {'a step' if args.frames == 'steps' else 'an event'}, "
        f"{args.rounds} rounds per count, all (event, subscriber) pairs pooled"
    )
    p99s = {}
    for count in args.subscribers:
        mine = [r for r in rounds if r.count == count]
        delays = [d for r in mine for d in r.delays]
        p99s[count] = percentile(delays, 0.99)
        print(
            f"{count:4d} subscribers: p50 {statistics.median(delays) * 1000:.1f} ms, "
            f"p99 {p99s[count] * 1000:.1f} ms, complete and in order "
            f"{sum(r.complete for r in mine)}/{count * len(mine)}, server CPU "
            f"{statistics.median(r.server_cpu for r in mine):.2f} s a run"
        )
    low, high = min(args.subscribers), max(args.subscribers)
    ratio = p99s[high] / p99s[low]
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"p99 at {high} / p99 at {low}: {ratio:.2f}x (target <= {TARGET}x: {verdict})")
    # A round's p99 rests on a few events; one slow round moves the pooled figure.
    by_round = {
        count: statistics.median(percentile(r.delays, 0.99) for r in rounds if r.count == count)
        for count in (low, high)
    }
    print(
        f"median of the rounds' p99s: {by_round[high] * 1000:.1f} / {by_round[low] * 1000:.1f} ms"
        f" = {by_round[high] / by_round[low]:.2f}x"
    )
    if any(r.complete < r.count for r in rounds):
        sys.exit("some subscribers missed events")


if __name__ == "__main__":
    main()
