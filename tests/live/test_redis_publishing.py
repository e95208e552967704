"""Publishing to the Redis pub/sub layer (the one ``REDIS_URL`` selects) from the
committing thread: the same PUBLISH channels_redis sends, on a connection that
asks Redis for no replies, opened off the committing threads; what it cannot
publish goes through channels_redis' own path."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
import redis
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer as ChannelsRedisLayer
from django.utils import timezone

from goaai import channel_layers, live_frames
from goaai.channel_layers import PUBLISHING_CLIENT_NAME, RedisPubSubChannelLayer
from sessions_app import publisher as publishing
from sessions_app.publisher import Written
from tests.conftest import REDIS_TEST_URL

TIMEOUT = 5


def step(session: Any, *seqs: int) -> tuple[list[Written], None]:
    return [
        Written(session, None, seq, "session.updated", {"seq": seq}, timezone.now()) for seq in seqs
    ], None


def delta(offset: int, text: str, turn: str = "t") -> dict[str, Any]:
    return {"type": "run.delta", "run": "r", "turn": turn, "offset": offset, "text": text}


def publishing_clients() -> list[dict[str, Any]]:
    clients = redis.Redis.from_url(REDIS_TEST_URL).client_list()
    return [c for c in clients if c.get("name") == PUBLISHING_CLIENT_NAME]


@pytest.fixture
def prefix() -> str:
    # Pub/sub channels are not per database: each test publishes under its own prefix.
    return f"test{uuid4().hex[:12]}"


@pytest.fixture
def layer_settings(settings, prefix) -> Iterator[None]:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "goaai.channel_layers.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_TEST_URL], "prefix": prefix},
        }
    }
    yield
    get_channel_layer().close_for_publishing()


async def subscribed(layer: Any, group: str) -> str:
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    return channel


async def received(layer: Any, channel: str, count: int) -> list[dict[str, Any]]:
    return [await asyncio.wait_for(layer.receive(channel), TIMEOUT) for _ in range(count)]


# The layer


@pytest.mark.parametrize("hosts", [1, 2, 3])
async def test_a_groups_channel_and_shard_are_the_ones_channels_redis_uses(hosts):
    urls = [f"redis://127.0.0.1:{6379 + i}/0" for i in range(hosts)]
    ours = RedisPubSubChannelLayer(hosts=urls, prefix="p")
    theirs = ChannelsRedisLayer(hosts=urls, prefix="p")._get_layer()
    for group in [
        "session.0",
        "session.1",
        "user.7",
        *[f"session.{uuid4().hex}" for _ in range(40)],
    ]:
        channel, shard = ours.group_channel(group)
        assert channel == theirs._get_group_channel_name(group)
        assert theirs._shards[shard] is theirs._get_shard(channel)
    assert ours.publishes_now()
    sentinel = [{"master_name": "m", "sentinels": [("127.0.0.1", 26379)]}]
    assert not RedisPubSubChannelLayer(hosts=sentinel).publishes_now()


@pytest.mark.redis
async def test_a_message_published_now_reaches_the_groups_subscribers_and_nothing_answers(prefix):
    layer = RedisPubSubChannelLayer(hosts=[REDIS_TEST_URL], prefix=prefix)
    channel = await subscribed(layer, "session.a")
    assert not layer.publishing_open()
    assert layer.publish_now("session.a", {"type": "x"}) is False  # not open yet

    await asyncio.to_thread(layer.open_for_publishing)
    assert layer.publishing_open()
    messages = [{"type": "x", "n": n, "text": "é" * n} for n in range(300)]

    def publish_all() -> None:
        for message in messages:
            assert layer.publish_now("session.a", message) is True

    await asyncio.to_thread(publish_all)

    assert await received(layer, channel, 300) == messages
    # Redis sent the publishing connection no replies to read.
    connection, _ = layer._publishing[0]
    assert not connection.can_read(timeout=0.1)
    assert len(publishing_clients()) >= 1
    layer.close_for_publishing()
    await layer.flush()


@pytest.mark.redis
async def test_a_connection_redis_closed_raises_at_the_next_write_and_opens_again(
    prefix, monkeypatch
):
    monkeypatch.setattr(channel_layers, "IDLE_SECONDS", 0.0)
    layer = RedisPubSubChannelLayer(hosts=[REDIS_TEST_URL], prefix=prefix)
    channel = await subscribed(layer, "session.a")
    await asyncio.to_thread(layer.open_for_publishing)
    connection, _ = layer._publishing[0]
    host, port = connection._sock.getsockname()[:2]
    (mine,) = [c for c in publishing_clients() if c["addr"] == f"{host}:{port}"]
    assert redis.Redis.from_url(REDIS_TEST_URL).client_kill_filter(_id=mine["id"]) == 1

    def publish_until_it_fails() -> None:
        for _ in range(3):  # the kill may show only after a write
            layer.publish_now("session.a", {"type": "x"})
            time.sleep(0.05)

    with pytest.raises(redis.ConnectionError):
        publish_until_it_fails()
    assert not layer.publishing_open()

    await asyncio.to_thread(layer.open_for_publishing)
    assert layer.publish_now("session.a", {"type": "x", "n": 2})
    message = await asyncio.wait_for(layer.receive(channel), TIMEOUT)
    while message.get("n") != 2:  # a write before the kill showed may have arrived
        message = await asyncio.wait_for(layer.receive(channel), TIMEOUT)
    layer.close_for_publishing()
    await layer.flush()


# The publisher


@pytest.mark.redis
async def test_committed_steps_are_published_by_the_committing_thread_in_order(
    layer_settings, monkeypatch
):
    layer = get_channel_layer()
    assert isinstance(layer, RedisPubSubChannelLayer)
    server = publishing._Publisher()
    server.attach_loop(asyncio.get_running_loop())  # a server: its loop is there
    session = uuid4()
    group = publishing.session_group(session)
    channel = await subscribed(layer, group)
    threads: list[int] = []
    publish_now = layer.publish_now

    def recording(target: str, message: dict[str, Any]) -> bool:
        threads.append(threading.get_ident())
        return publish_now(target, message)

    monkeypatch.setattr(layer, "publish_now", recording)

    # Before the connection is open: the first step goes channels_redis' way, and
    # the publisher's thread opens the connection.
    await asyncio.to_thread(server.send, group, step(session, 1))
    first = await asyncio.wait_for(layer.receive(channel), TIMEOUT)
    assert [event["seq"] for event in first["events"]] == [1]
    async with asyncio.timeout(TIMEOUT):
        while not layer.publishing_open():
            await asyncio.sleep(0.01)

    committing: list[int] = []

    def commit_steps() -> None:
        committing.append(threading.get_ident())
        for seq in range(2, 12):
            server.send(group, step(session, seq))

    await asyncio.to_thread(commit_steps)

    messages = await received(layer, channel, 10)
    assert [m["events"][0]["seq"] for m in messages] == list(range(2, 12))
    assert [len(m["encoded"]) for m in messages] == [1] * 10
    assert set(threads) == set(committing)
    assert not server._handoff
    assert not server._inflight
    assert server._thread is None
    server.detach_loop(asyncio.get_running_loop())


@pytest.mark.redis
async def test_streamed_text_is_joined_per_frame_and_an_event_sends_what_was_held_first(
    layer_settings,
):
    layer = get_channel_layer()
    await asyncio.to_thread(layer.open_for_publishing)
    worker = publishing._Publisher()  # no loop: a Celery worker
    session = uuid4()
    group = publishing.session_group(session)
    channel = await subscribed(layer, group)

    def stream() -> None:
        worker.send(group, delta(0, "Once "))  # at once: opens the frame
        worker.send(group, delta(5, "upon "))  # held
        worker.send(group, delta(10, "a "))  # joined to it
        worker.send(group, step(session, 1))  # the held text first, then the step
        worker.send(group, delta(12, "time"))  # the frame goes on: held
        worker.send(group, delta(16, "."))  # joined, sent when the frame ends

    await asyncio.to_thread(stream)
    messages = await received(layer, channel, 4)

    texts = [m.get("text") or [e["seq"] for e in m["events"]] for m in messages]
    assert texts == ["Once ", "upon a ", [1], "time."]
    assert all("encoded" in m for m in messages)
    assert worker._thread is None  # nothing went the other way


@pytest.mark.redis
async def test_a_step_whose_write_failed_goes_the_other_way_and_the_connection_reopens(
    layer_settings, monkeypatch
):
    layer = get_channel_layer()
    await asyncio.to_thread(layer.open_for_publishing)
    server = publishing._Publisher()
    server.attach_loop(asyncio.get_running_loop())
    session = uuid4()
    group = publishing.session_group(session)
    channel = await subscribed(layer, group)
    failures = [1]
    publish_now = layer.publish_now

    def failing_once(target: str, message: dict[str, Any]) -> bool:
        if failures:
            failures.pop()
            layer.close_for_publishing()
            raise redis.ConnectionError("the connection broke")
        return publish_now(target, message)

    monkeypatch.setattr(layer, "publish_now", failing_once)

    await asyncio.to_thread(server.send, group, step(session, 1))
    message = await asyncio.wait_for(layer.receive(channel), TIMEOUT)
    assert [event["seq"] for event in message["events"]] == [1]  # not lost
    async with asyncio.timeout(TIMEOUT):
        while not layer.publishing_open():
            await asyncio.sleep(0.01)
    await asyncio.to_thread(server.send, group, step(session, 2))
    message = await asyncio.wait_for(layer.receive(channel), TIMEOUT)
    assert [event["seq"] for event in message["events"]] == [2]
    server.detach_loop(asyncio.get_running_loop())


async def test_with_redis_away_a_commit_never_waits_and_the_failure_is_said_once(
    settings, monkeypatch, caplog
):
    monkeypatch.setattr(publishing, "RECONNECT_SECONDS", 0.01)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "goaai.channel_layers.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{port}/0"]},
        }
    }
    worker = publishing._Publisher()
    session = uuid4()
    group = publishing.session_group(session)
    other_way: list[Any] = []
    monkeypatch.setattr(worker, "_send_other_way", lambda *args: other_way.append(args[2]))
    worker._direct._other_way = worker._send_other_way

    def commit_steps() -> float:
        started = time.perf_counter()
        for seq in range(1, 21):
            worker.send(group, step(session, seq))
            time.sleep(0.01)
        return time.perf_counter() - started

    took = await asyncio.to_thread(commit_steps)

    assert took < 20 * 0.01 + 0.5  # no commit waited for a connection
    assert [item[0][0].seq for item in other_way] == list(range(1, 21))
    warnings = [r for r in caplog.records if "Connecting to Redis" in r.getMessage()]
    assert [r.levelname for r in warnings if r.levelname == "WARNING"] == ["WARNING"]


# What one server's subscribers of a group get from Redis


@pytest.mark.redis
async def test_a_group_message_is_decoded_once_for_all_of_this_servers_members(prefix, monkeypatch):
    layer = RedisPubSubChannelLayer(hosts=[REDIS_TEST_URL], prefix=prefix)
    channels = [await subscribed(layer, "session.a") for _ in range(5)]
    decoded: list[bytes] = []
    deserialize = layer._serializer.deserialize

    def counting(data: bytes) -> Any:
        decoded.append(data)
        return deserialize(data)

    monkeypatch.setattr(layer._serializer, "deserialize", counting)
    message = {"type": "session.events", "events": [{"seq": 1}], "encoded": ['{"seq":1}']}

    await layer.group_send("session.a", message)
    got = [await asyncio.wait_for(layer.receive(channel), TIMEOUT) for channel in channels]

    assert got == [message] * 5
    assert len(decoded) == 1
    # Sent to one channel, a message is its own.
    await layer.send(channels[0], {"type": "x"})
    assert await asyncio.wait_for(layer.receive(channels[0]), TIMEOUT) == {"type": "x"}
    await layer.flush()


@pytest.mark.redis
async def test_text_reaching_more_members_than_a_frame_is_for_is_joined_per_frame_here(
    prefix, monkeypatch
):
    # Two members are "many" here: a frame is 50 ms for up to one, 100 ms for two.
    monkeypatch.setattr(channel_layers, "SUBSCRIBERS_PER_FRAME", 1)
    monkeypatch.setattr(live_frames, "SUBSCRIBERS_PER_FRAME", 1)
    layer = RedisPubSubChannelLayer(hosts=[REDIS_TEST_URL], prefix=prefix)
    many = [await subscribed(layer, "session.many") for _ in range(2)]
    one = await subscribed(layer, "session.one")
    pieces = [delta(0, "Once "), delta(5, "upon "), delta(10, "a ")]
    event = {"type": "session.events", "events": [{"seq": 1}], "encoded": ['{"seq":1}']}
    late = delta(12, "time.")

    started = time.monotonic()
    for group in ("session.many", "session.one"):
        for message in [*pieces, event, late]:
            await layer.group_send(
                group,
                live_frames.with_delta_frame(message)
                if message.get("type") == "run.delta"
                else message,
            )

    for channel in many:
        got = await received(layer, channel, 4)
        assert [m.get("text") or m["events"] for m in got] == [
            "Once ",
            "upon a ",  # joined, and sent before the event
            [{"seq": 1}],
            "time.",  # held to the frame's end
        ]
        assert [json.loads(m["encoded"])["text"] for m in got if "text" in m] == [
            "Once ",
            "upon a ",
            "time.",
        ]
    assert time.monotonic() - started >= live_frames.frame_seconds(2) * 0.9
    got = await received(layer, one, 5)  # a frame's worth of members: as published
    assert [m.get("text") or m["events"] for m in got] == [
        "Once ",
        "upon ",
        "a ",
        [{"seq": 1}],
        "time.",
    ]
    await layer.flush()


@pytest.mark.redis
async def test_a_publishing_connection_shakes_hands_patiently_and_writes_impatiently(prefix):
    layer = RedisPubSubChannelLayer(hosts=[REDIS_TEST_URL], prefix=prefix)
    await asyncio.to_thread(layer.open_for_publishing)
    connection, _ = layer._publishing[0]
    assert connection.socket_timeout == channel_layers.CONNECT_SECONDS
    assert connection._sock.gettimeout() == channel_layers.SEND_SECONDS
    layer.close_for_publishing()
