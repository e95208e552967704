"""Live delivery latency: an event's commit to its subscribers' receive, through
goaai's real path, against the bare channel layer's own group_send -> receive.

    .venv/bin/python bench/live_delivery.py [--db sqlite|postgres|both]
        [--events E] [--subscribers 1,10,100] [--layers memory,redis,pubsub]
        [--burst B]

goaai's path: a service writes an event inside ``sessions_app.eventlog.recording`` on a
session (one transaction that numbers and stores it); after the commit
``publish_events`` queues it for the publisher thread, which sends it to the
session's channel-layer group; each subscriber (a channel with a receive loop and
the consumer's ``Sequencer``, as ``SessionConsumer`` has) takes it. The clock starts
right after COMMIT (a callback that runs before the publishing one) and stops when
the subscriber's ``receive`` returns; the writing thread hands nothing else to the
subscribers' loop until every subscriber has the event (the loop waits for the
event's number, then for the thread's answer), so that the loop's work in between
is goaai's alone. The baseline is ``group_send`` -> ``receive``
to the same subscribers on the same layer, with nothing of goaai in between. The two
alternate in chunks, so that drift on a shared machine hits both alike. Events are
sent one at a time (the next once every subscriber has the previous one): this
measures latency, not throughput.

The burst phase then writes B events back to back, as fast as the database
commits them, to the largest number of subscribers, which fill gaps from the
database as the consumer does (``Sequencer.fill``). It counts what the layer
delivered live, what the subscribers had to read from the database, and what was
still missing once the burst was over.

Layers: ``memory`` (goaai's InMemoryChannelLayer, channels' with cheaper upkeep; subscribers run on the loop
registered with ``publisher.attach_loop``, as a server's consumers do), ``redis``
(channels_redis' RedisChannelLayer) and ``pubsub`` (goaai's RedisPubSubChannelLayer,
the one ``REDIS_URL`` selects: channels_redis' pub/sub layer, to which committing
threads publish directly), both on a redis-server of the benchmark's own. Target: goaai p99 <= 2x the bare layer's p99.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import sys
import time
import uuid
from contextlib import nullcontext
from typing import Any

from _common import arguments, private_redis, run_each_database, setup_django

LAYERS = {
    "memory": ("InMemoryChannelLayer", {"BACKEND": "goaai.channel_layers.InMemoryChannelLayer"}),
    "redis": ("RedisChannelLayer", {"BACKEND": "channels_redis.core.RedisChannelLayer"}),
    "pubsub": (
        "RedisPubSubChannelLayer",
        {"BACKEND": "goaai.channel_layers.RedisPubSubChannelLayer"},
    ),
}
CHUNK = 50
# How long a delivery may take before it counts as lost.
DELIVERY_TIMEOUT = 2.0
BARE_GROUP = "bench.bare"


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


class Bench:
    """One layer, N subscribers: the two paths measured against each other."""

    def __init__(self, layer: Any, session_id: uuid.UUID, subscribers: int, first: int) -> None:
        self.layer = layer
        self.first = first
        # The number of the last event goaai's path wrote.
        self.last_seq = first
        self.session_id = session_id
        self.n = subscribers
        self.commit_time: dict[int, float] = {}
        self.sent_time: dict[int, float] = {}
        self.goaai: list[float] = []
        self.bare: list[float] = []
        # Arrivals per event ("g", seq) or ("b", i), and who waits for them to be complete.
        self.arrivals: dict[tuple[str, int], int] = {}
        self.waiters: dict[tuple[str, int], asyncio.Future[None]] = {}
        self.lost = 0
        self.tasks: list[asyncio.Task[None]] = []
        # The database writes run on one thread of their own (one connection).
        self.writer = concurrent.futures.ThreadPoolExecutor(1)

    def write_event(self, index: int) -> int:
        """goaai's path: one event recorded in its own transaction; returns its seq."""
        from django.db import transaction

        from sessions_app.eventlog import recording

        with recording(self.session_id, expect=1) as batch:
            batch.add("memory.stored", {"key": f"k{index}", "scope": "session", "version": 1})
            seq = batch.last_seq + 1
            # Runs right after COMMIT, before the publishing callback that the
            # batch's flush registers on leaving the block.
            transaction.on_commit(lambda: self.commit_time.__setitem__(seq, time.perf_counter()))
        return seq

    def arrived(self, key: tuple[str, int]) -> None:
        count = self.arrivals.get(key, 0) + 1
        self.arrivals[key] = count
        if count == self.n:
            waiter = self.waiters.pop(key, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def subscriber(self, channel: str) -> None:
        from sessions_app.streams import Sequencer

        sequencer = Sequencer(session_id=self.session_id, last=self.first)
        while True:
            message = await self.layer.receive(channel)
            now = time.perf_counter()
            if message["type"] == "session.events":
                _, gap = sequencer.take(message["events"])
                if gap:  # a lost message: start again after what arrived
                    sequencer.last = max(sequencer.held)
                    sequencer.held.clear()
                for event in message["events"]:
                    if event["seq"] <= self.first:
                        continue  # the session's own creation, published late
                    self.goaai.append(now - self.commit_time[event["seq"]])
                    self.arrived(("g", event["seq"]))
            elif message["type"] == BARE_GROUP:
                self.bare.append(now - self.sent_time[message["i"]])
                self.arrived(("b", message["i"]))

    async def start(self) -> None:
        from sessions_app.publisher import session_group
        from sessions_app.streams import subscribe

        for _ in range(self.n):
            channel = await self.layer.new_channel()
            # subscribe() is what the consumers call: it also registers this loop for
            # the in-memory layer's deliveries.
            await subscribe(self.layer, session_group(self.session_id), channel)
            await self.layer.group_add(BARE_GROUP, channel)
            self.tasks.append(asyncio.create_task(self.subscriber(channel)))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        results = await asyncio.gather(*self.tasks, return_exceptions=True)
        self.writer.shutdown()
        failed = [r for r in results if not isinstance(r, asyncio.CancelledError | type(None))]
        if failed:
            raise RuntimeError(f"{len(failed)} subscribers failed") from failed[0]

    async def complete(self, key: tuple[str, int]) -> None:
        if self.arrivals.get(key, 0) >= self.n:
            return
        waiter = asyncio.get_running_loop().create_future()
        self.waiters[key] = waiter
        try:
            await asyncio.wait_for(waiter, DELIVERY_TIMEOUT)
        except TimeoutError:
            self.lost += 1
            self.waiters.pop(key, None)

    async def one_goaai(self, index: int) -> None:
        # The write's thread tells the loop nothing while the event is on its way:
        # the loop waits for the subscribers' arrivals of the next number, and only
        # then for the thread's answer (which must be that number).
        self.last_seq += 1
        written = self.writer.submit(self.write_event, index)
        await self.complete(("g", self.last_seq))
        seq = await asyncio.wrap_future(written)
        if seq != self.last_seq:
            raise RuntimeError(f"event {seq} was written where {self.last_seq} was expected")

    async def one_bare(self, index: int) -> None:
        self.sent_time[index] = time.perf_counter()
        await self.layer.group_send(BARE_GROUP, {"type": BARE_GROUP, "i": index})
        await self.complete(("b", index))

    async def measure(self, events: int) -> None:
        # Warm-up: connections, prepared statements, the publisher thread.
        for i in range(10):
            await self.one_goaai(-1 - i)
            await self.one_bare(-1 - i)
        self.goaai.clear()
        self.bare.clear()
        self.lost = 0
        for start in range(0, events, CHUNK):
            for i in range(start, min(events, start + CHUNK)):
                await self.one_goaai(i)
            for i in range(start, min(events, start + CHUNK)):
                await self.one_bare(i)


async def burst(
    layer: Any, session_id: uuid.UUID, first: int, subscribers: int, events: int
) -> dict[str, int]:
    """B events written back to back; subscribers that fill gaps from the database."""
    from sessions_app.publisher import publisher, session_group
    from sessions_app.streams import Sequencer, subscribe

    listeners = [
        _BurstListener(Sequencer(session_id=session_id, last=first)) for _ in range(subscribers)
    ]
    tasks = []
    for listener in listeners:
        channel = await layer.new_channel()
        await subscribe(layer, session_group(session_id), channel)
        tasks.append(asyncio.create_task(listener.listen(layer, channel)))

    def write_all() -> None:
        from sessions_app.eventlog import recording

        for i in range(events):
            with recording(session_id, expect=1) as batch:
                batch.add("memory.stored", {"key": f"b{i}", "scope": "session", "version": 1})
        publisher.drain(timeout=60)

    last = first + events
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(1) as writer:
        await asyncio.get_running_loop().run_in_executor(writer, write_all)
    await _settled([listener.sequencer for listener in listeners], last)
    elapsed = time.perf_counter() - started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    expected = events * subscribers
    return {
        "expected": expected,
        "live": sum(listener.live for listener in listeners),
        "filled": sum(listener.filled for listener in listeners),
        "missing_at_end": sum(last - listener.sequencer.last for listener in listeners),
        "ms": round(elapsed * 1000),
    }


class _BurstListener:
    """A subscriber of the burst, which fills gaps from the database as the consumer
    does: how many events the layer delivered to it, and how many it had to read."""

    def __init__(self, sequencer: Any) -> None:
        self.sequencer = sequencer
        self.live = 0
        self.filled = 0

    async def listen(self, layer: Any, channel: str) -> None:
        while True:
            message = await layer.receive(channel)
            if message["type"] != "session.events":
                continue
            ready, gap = self.sequencer.take(message["events"])
            self.live += len(ready)
            if gap:
                self.filled += len(await self.sequencer.fill())


async def _settled(sequencers: list[Any], last: int) -> None:
    """Wait until every subscriber is done or nothing moves for a second."""
    progress, quiet_since = -1, time.perf_counter()
    while time.perf_counter() - quiet_since < 1.0:
        done = sum(s.last for s in sequencers)
        if done == last * len(sequencers):
            break
        if done != progress:
            progress, quiet_since = done, time.perf_counter()
        await asyncio.sleep(0.01)


def new_session(owner: Any) -> tuple[uuid.UUID, int]:
    """A fresh session and the last sequence number it already has."""
    from goaai.runtime import rt
    from sessions_app.models import Session
    from sessions_app.publisher import publisher

    session = rt.create_session(owner=owner, agent="assistant")
    # Its creation event goes out before anyone measured subscribes.
    publisher.drain()
    return session.id, Session.objects.get(pk=session.id).last_event_seq


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:8.0f}"


async def run_layer(
    name: str, counts: list[int], events: int, burst_events: int, owner: Any
) -> list[str]:
    from channels.layers import get_channel_layer

    from sessions_app.publisher import publisher

    layer = get_channel_layer()
    lines = []
    for count in counts:
        session_id, first = await asyncio.to_thread(new_session, owner)
        bench = Bench(layer, session_id, count, first)
        await bench.start()
        try:
            await bench.measure(events)
        finally:
            await bench.stop()
        await asyncio.to_thread(publisher.drain)
        g, b = sorted(bench.goaai), sorted(bench.bare)
        g50, g99 = statistics.median(g), percentile(g, 0.99)
        b50, b99 = statistics.median(b), percentile(b, 0.99)
        lines.append(
            f"{LAYERS[name][0]:24} {count:4}  {fmt(g50)} {fmt(g99)}   {fmt(b50)} {fmt(b99)}   "
            f"{g99 / b99:6.2f}x  {g50 / b50:6.2f}x  {bench.lost:4}"
        )
        print(lines[-1], flush=True)
    if burst_events:
        session_id, first = await asyncio.to_thread(new_session, owner)
        result = await burst(layer, session_id, first, max(counts), burst_events)
        lines.append(f"  burst {burst_events} events x {max(counts)} subscribers: {result}")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400, help="events per path and configuration")
    parser.add_argument("--subscribers", default="1,10,100")
    parser.add_argument("--layers", default="memory,redis,pubsub")
    parser.add_argument(
        "--burst", type=int, default=500, help="events of the burst phase (0: none)"
    )
    args = parser.parse_args()
    extra = [
        *("--events", str(args.events), "--subscribers", args.subscribers),
        *("--layers", args.layers, "--burst", str(args.burst)),
    ]
    if run_each_database(__file__, args, extra):
        return
    setup_django(args.db, args.postgres)
    names = args.layers.split(",")
    # The Redis layers talk to a redis-server of the benchmark's own.
    with private_redis() if any(n != "memory" for n in names) else nullcontext("") as redis:
        measure(args, names, redis)


def measure(args: argparse.Namespace, names: list[str], redis: str) -> None:
    from django.contrib.auth import get_user_model
    from django.test import override_settings

    counts = [int(n) for n in args.subscribers.split(",")]
    owner = get_user_model().objects.create_user(username=f"bench-{uuid.uuid4().hex[:8]}")
    print(f"\n== live delivery on {args.db}: {args.events} events per path, latencies in us ==")
    print(
        f"{'layer':24} {'subs':>4}  {'goaai p50':>8} {'p99':>8}   {'bare p50':>8} {'p99':>8}   "
        f"{'p99 ratio':>7} {'p50 ratio':>7} lost"
    )
    for name in names:
        backend = dict(LAYERS[name][1])
        if name != "memory":
            backend["CONFIG"] = {"hosts": [redis]}
        # The layer is read from the settings on first use; changing the setting
        # resets channels' cache, and the publisher asks for the layer every message.
        with override_settings(CHANNEL_LAYERS={"default": backend}):
            asyncio.run(run_layer(name, counts, args.events, args.burst, owner))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
