"""What keeps one session followed by hundreds of sockets cheap: streamed text joined
per frame, each message encoded once for every subscriber, and an in-memory layer
whose upkeep does not grow with its subscribers."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, ClassVar
from uuid import uuid4

import pytest
from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import OperationalError
from django.test import override_settings
from django.utils import timezone

from goaai import asgi
from goaai.channel_layers import UPKEEP_SECONDS, InMemoryChannelLayer
from goaai.live_frames import FRAME_SECONDS, DeltaCoalescer, frame_seconds
from goaai.runtime import rt
from sessions_app import publisher as publishing
from sessions_app.metrics import EVENT_PUBLISH_LAG
from sessions_app.publisher import Written, merge_steps
from sessions_app.streams import checkpoints_again, delta_frame, encoded_events, join_steps

GROUP, OTHER_GROUP = "session.a", "session.b"
IN_MEMORY = {"default": {"BACKEND": "goaai.channel_layers.InMemoryChannelLayer"}}
RUN, TURN, NEXT_TURN = str(uuid4()), str(uuid4()), str(uuid4())


def delta(offset: int, text: str, turn: str = TURN) -> dict[str, Any]:
    return {"type": "run.delta", "run": RUN, "turn": turn, "offset": offset, "text": text}


EVENTS = ([], None)  # a published step's events, as the publisher queues them


# Streamed text joined per frame


@pytest.fixture
def coalescer() -> DeltaCoalescer:
    return DeltaCoalescer(lambda group: 0.05)


def test_the_first_piece_goes_at_once_and_those_within_its_frame_wait(coalescer):
    assert coalescer.take(GROUP, delta(0, "Once "), now=10.0) == ([delta(0, "Once ")], 0.05)
    assert coalescer.take(GROUP, delta(5, "upon "), now=10.01) == ([], None)
    assert coalescer.take(GROUP, delta(10, "a "), now=10.02) == ([], None)
    assert coalescer.next_due() == pytest.approx(10.05)

    assert coalescer.due(10.04) == []
    assert coalescer.due(10.05) == [(GROUP, delta(5, "upon a "), 0.05)]
    # The text goes on streaming: the next frame has begun.
    assert coalescer.next_due() == pytest.approx(10.10)


def test_a_frame_that_held_nothing_closes_and_the_next_piece_goes_at_once(coalescer):
    coalescer.take(GROUP, delta(0, "Once "), now=10.0)
    assert coalescer.due(10.05) == []
    assert coalescer.next_due() is None
    assert coalescer.take(GROUP, delta(5, "upon "), now=10.2) == ([delta(5, "upon ")], 0.05)


def test_anything_else_sent_to_the_group_comes_after_the_text_held_before_it(coalescer):
    coalescer.take(GROUP, delta(0, "Once "), now=10.0)
    coalescer.take(GROUP, delta(5, "upon "), now=10.01)
    assert coalescer.take(GROUP, EVENTS, now=10.02) == ([delta(5, "upon "), EVENTS], None)
    # Nothing is left to send when the frame ends.
    assert coalescer.due(10.05) == []


def test_pieces_that_do_not_follow_on_are_not_joined(coalescer):
    coalescer.take(GROUP, delta(0, "Once "), now=10.0)
    coalescer.take(GROUP, delta(5, "upon "), now=10.01)
    # Another turn (a retry streams anew), then a piece beyond a hole.
    assert coalescer.take(GROUP, delta(0, "Hello", NEXT_TURN), now=10.02) == (
        [delta(5, "upon ")],
        None,
    )
    assert coalescer.take(GROUP, delta(9, "there", NEXT_TURN), now=10.03) == (
        [delta(0, "Hello", NEXT_TURN)],
        None,
    )
    assert coalescer.due(10.05) == [(GROUP, delta(9, "there", NEXT_TURN), 0.05)]


def test_groups_are_held_apart_and_flush_sends_everything_held(coalescer):
    coalescer.take(GROUP, delta(0, "a"), now=10.0)
    coalescer.take(OTHER_GROUP, delta(0, "x"), now=10.0)
    coalescer.take(GROUP, delta(1, "b"), now=10.01)
    coalescer.take(OTHER_GROUP, delta(1, "y"), now=10.01)
    assert coalescer.take(OTHER_GROUP, EVENTS, now=10.02)[0] == [delta(1, "y"), EVENTS]
    assert coalescer.flush() == [(GROUP, delta(1, "b"))]
    assert coalescer.next_due() is None


def test_a_piece_after_its_frame_ended_sends_what_was_held_then_itself(coalescer):
    # The frame's end was not seen to (a busy loop): order is still kept.
    coalescer.take(GROUP, delta(0, "a"), now=10.0)
    coalescer.take(GROUP, delta(1, "b"), now=10.01)
    assert coalescer.take(GROUP, delta(2, "c"), now=10.3) == ([delta(1, "b"), delta(2, "c")], 0.05)


def test_a_frame_lasts_longer_the_more_subscribers_a_session_has():
    assert frame_seconds(0) == frame_seconds(1) == frame_seconds(100) == FRAME_SECONDS
    assert frame_seconds(101) == 2 * FRAME_SECONDS
    assert frame_seconds(500) == 5 * FRAME_SECONDS


# Each message encoded once for every subscriber


def test_a_published_step_carries_each_event_encoded_once():
    written = Written(uuid4(), uuid4(), 7, "message.completed", {"text": "héllo"}, timezone.now())
    [(group, message)] = publishing.layer_messages(GROUP, ([written], None))
    assert group == GROUP
    [event] = message["events"]
    assert encoded_events(message) == {7: message["encoded"][0]}
    assert json.loads(message["encoded"][0]) == event
    assert "héllo" in message["encoded"][0]  # UTF-8, not escaped


def test_a_delta_carries_its_frame_encoded_once_and_a_subscriber_uses_it_unchanged():
    [(_, message)] = publishing.layer_messages(GROUP, delta(5, "upon "))
    frame = {"type": "delta", "run": RUN, "turn": TURN, "offset": 5, "text": "upon "}
    assert json.loads(message["encoded"]) == frame
    assert delta_frame(message, [frame]) == message["encoded"]
    # A piece the subscriber trims, or joins with held ones, is encoded by it.
    assert delta_frame(message, [{**frame, "offset": 7, "text": "on "}]) is None
    assert delta_frame(message, [frame, frame]) is None
    assert delta_frame({k: v for k, v in message.items() if k != "encoded"}, [frame]) is None


# Steps committed while the server was busy sending, sent together


def step(*seqs: int, owner: int | None = None) -> tuple[list[Written], int | None]:
    session = uuid4()
    return [
        Written(session, None, seq, "session.updated", {}, timezone.now()) for seq in seqs
    ], owner


def seqs(item: Any) -> list[int]:
    return [event.seq for event in item[0]]


def test_consecutive_steps_to_a_group_become_one_with_each_hand_over_time():
    merged = merge_steps([(GROUP, step(1), 1.0), (GROUP, step(2, 3), 2.0), (GROUP, step(4), 3.0)])
    [(group, item, handed)] = merged
    assert (group, seqs(item), item[1], handed) == (GROUP, [1, 2, 3, 4], None, [1.0, 2.0, 3.0])


def test_anything_between_two_steps_keeps_them_apart_and_everything_in_order():
    piece, revoked = delta(0, "Once "), {"type": "token.revoked"}
    merged = merge_steps(
        [
            (GROUP, step(1), 1.0),
            (GROUP, piece, 0.0),
            (GROUP, step(2), 2.0),
            (OTHER_GROUP, revoked, 0.0),
            (GROUP, step(3), 3.0),
            (OTHER_GROUP, step(7), 4.0),
            (GROUP, step(4, owner=5), 5.0),
        ]
    )
    assert [
        (group, seqs(item) if isinstance(item, tuple) else item) for group, item, _ in merged
    ] == [
        (GROUP, [1]),
        (GROUP, piece),
        (GROUP, [2]),
        (OTHER_GROUP, revoked),
        (GROUP, [3]),
        (OTHER_GROUP, [7]),
        # Told to its owner's session list as well: not merged with a step that is not.
        (GROUP, [4]),
    ]
    assert [handed for _, _, handed in merged] == [[1.0], [0.0], [2.0], [0.0], [3.0], [4.0], [5.0]]


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_steps_handed_over_while_the_server_is_busy_reach_subscribers_as_one_message():
    layer = get_channel_layer()
    publisher = publishing._Publisher()
    publisher.attach_loop(asyncio.get_running_loop())
    channel = await layer.new_channel()
    await layer.group_add(GROUP, channel)

    def busy() -> None:
        # The server's loop is sending meanwhile; three steps commit in a run's thread.
        committing = threading.Thread(
            target=lambda: [publisher.send(GROUP, step(seq)) for seq in (1, 2, 3)]
        )
        committing.start()
        committing.join()

    asyncio.get_running_loop().call_soon(busy)
    message = await asyncio.wait_for(layer.receive(channel), 5)
    assert [event["seq"] for event in message["events"]] == [1, 2, 3]
    assert [json.loads(text)["seq"] for text in message["encoded"]] == [1, 2, 3]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(layer.receive(channel), 0.05)

    # An idle server sends a step as soon as it is handed over, on its own.
    await asyncio.to_thread(publisher.send, GROUP, step(4))
    message = await asyncio.wait_for(layer.receive(channel), 5)
    assert [event["seq"] for event in message["events"]] == [4]
    publisher.detach_loop(asyncio.get_running_loop())


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_what_a_stopped_loop_never_took_goes_out_on_the_next_loop_and_nothing_sticks():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(GROUP, channel)
    publisher = publishing._Publisher()
    stopped = asyncio.new_event_loop()
    try:
        publisher.attach_loop(stopped)
        await asyncio.to_thread(publisher.send, GROUP, step(1))
        publisher.attach_loop(asyncio.get_running_loop())
        message = await asyncio.wait_for(layer.receive(channel), 5)
        assert [event["seq"] for event in message["events"]] == [1]

        await asyncio.to_thread(publisher.send, GROUP, step(2))
        message = await asyncio.wait_for(layer.receive(channel), 5)
        assert [event["seq"] for event in message["events"]] == [2]
    finally:
        stopped.close()
    publisher.detach_loop(asyncio.get_running_loop())


# The in-memory layer


@pytest.fixture
def layer() -> InMemoryChannelLayer:
    return InMemoryChannelLayer(capacity=2)


async def test_a_group_message_reaches_every_member_once_as_one_copy(layer):
    channels = [await layer.new_channel() for _ in range(3)]
    for channel in channels:
        await layer.group_add(GROUP, channel)
    message = {"type": "session.events", "events": [{"seq": 1}]}
    await layer.group_send(GROUP, message)
    message["events"].append({"seq": 2})  # the sender's later change reaches no one

    received = [await layer.receive(channel) for channel in channels]
    assert received == [{"type": "session.events", "events": [{"seq": 1}]}] * 3
    assert received[0] is received[1] is received[2]
    for channel in channels:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(channel), 0.01)


async def test_a_full_channel_misses_a_message_and_the_others_get_it(layer):
    slow, quick = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(GROUP, slow)
    await layer.group_add(GROUP, quick)
    for seq in (1, 2, 3):
        await layer.group_send(GROUP, {"type": "x", "seq": seq})
        if seq < 3:
            assert (await layer.receive(quick))["seq"] == seq
    assert (await layer.receive(quick))["seq"] == 3
    # The slow one holds its capacity (2): the third was dropped for it alone.
    assert [(await layer.receive(slow))["seq"] for _ in range(2)] == [1, 2]


async def test_expired_messages_are_looked_for_at_most_once_a_second(layer, monkeypatch):
    scans = []
    monkeypatch.setattr(
        "channels.layers.InMemoryChannelLayer._clean_expired", lambda self: scans.append(1)
    )
    now = [100.0]
    monkeypatch.setattr("goaai.channel_layers.time.monotonic", lambda: now[0])
    channel = await layer.new_channel()
    await layer.group_add(GROUP, channel)
    for _ in range(50):
        await layer.group_send(GROUP, {"type": "x"})
        await layer.receive(channel)
    assert len(scans) == 1
    now[0] += UPKEEP_SECONDS
    await layer.group_send(GROUP, {"type": "x"})
    assert len(scans) == 2


async def test_messages_still_expire(monkeypatch):
    layer = InMemoryChannelLayer(expiry=60)
    channel = await layer.new_channel()
    await layer.group_add(GROUP, channel)
    await layer.group_send(GROUP, {"type": "old"})
    later = [0.0]
    monkeypatch.setattr("goaai.channel_layers.time.monotonic", lambda: 1e9 + later[0])
    monkeypatch.setattr("channels.layers.time.time", lambda: 2e10)
    await layer.group_send(OTHER_GROUP, {"type": "to nobody"})  # upkeep runs
    # The expired message is gone, and so is the channel's membership (as channels does).
    assert channel not in layer.channels
    assert GROUP not in layer.groups or channel not in layer.groups[GROUP]


async def test_a_channels_queue_is_kept_while_it_is_received_from(layer):
    channel = await layer.new_channel()
    await layer.group_add(GROUP, channel)
    await layer.group_send(GROUP, {"type": "x", "n": 1})
    queue = layer.channels[channel]
    assert (await layer.receive(channel))["n"] == 1
    # Emptied, it stays for the next message (channels' layer made a new one).
    assert layer.channels[channel] is queue
    await layer.group_send(GROUP, {"type": "x", "n": 2})
    assert layer.channels[channel] is queue
    assert (await layer.receive(channel))["n"] == 2


async def test_what_a_channel_holds_is_taken_at_once_in_order_and_an_empty_one_gives_none(layer):
    channel = await layer.new_channel()
    assert layer.receive_ready(channel) == []  # no queue yet
    await layer.group_add(GROUP, channel)
    await layer.group_send(GROUP, {"type": "x", "n": 1})
    await layer.group_send(GROUP, {"type": "x", "n": 2})
    assert [message["n"] for message in layer.receive_ready(channel)] == [1, 2]
    assert layer.receive_ready(channel) == []
    await layer.group_send(GROUP, {"type": "x", "n": 3})
    assert (await layer.receive(channel))["n"] == 3


def live(*seqs: int, encoded: bool = True) -> dict[str, Any]:
    events = [{"seq": seq} for seq in seqs]
    message: dict[str, Any] = {"type": "session.events", "events": events}
    if encoded:
        message["encoded"] = [f"<{seq}>" for seq in seqs]
    return message


def test_consecutive_live_steps_a_socket_holds_are_joined_with_each_event_s_json():
    piece = {"type": "run.delta", "text": "Once"}
    joined = join_steps([live(1), live(2, 3), piece, live(4), live(5, encoded=False), live(6)])

    assert [[e["seq"] for e in m["events"]] if "events" in m else m for m in joined] == [
        [1, 2, 3],
        piece,
        [4, 5, 6],
    ]
    assert encoded_events(joined[0]) == {1: "<1>", 2: "<2>", 3: "<3>"}
    # An event published without its JSON is encoded by the socket, the others not.
    assert encoded_events(joined[2]) == {4: "<4>", 6: "<6>"}
    assert join_steps([live(1)]) == [live(1)]


async def test_an_empty_queue_nobody_receives_from_goes_at_the_next_upkeep(layer, monkeypatch):
    now = [100.0]
    monkeypatch.setattr("goaai.channel_layers.time.monotonic", lambda: now[0])
    waiting, gone, holding = [await layer.new_channel() for _ in range(3)]
    for channel in (waiting, gone, holding):
        await layer.group_add(GROUP, channel)
    await layer.group_send(GROUP, {"type": "x", "n": 1})
    await layer.receive(waiting)
    await layer.receive(gone)  # and then its socket closed
    receiving = asyncio.ensure_future(layer.receive(waiting))
    await asyncio.sleep(0)

    now[0] += UPKEEP_SECONDS
    await layer.group_send(OTHER_GROUP, {"type": "to nobody"})  # upkeep runs
    assert gone not in layer.channels
    assert waiting in layer.channels
    assert holding in layer.channels
    # Nothing is lost: the one waiting gets the next message, and a queue dropped
    # while its consumer was busy is made again for the message after.
    await layer.group_send(GROUP, {"type": "x", "n": 2})
    assert (await asyncio.wait_for(receiving, 1))["n"] == 2
    assert [(await layer.receive(holding))["n"] for _ in range(2)] == [1, 2]
    assert (await layer.receive(gone))["n"] == 2


async def test_a_receive_cancelled_leaves_no_one_waiting_on_its_channel(layer):
    channel = await layer.new_channel()
    first = asyncio.ensure_future(layer.receive(channel))
    second = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0)
    assert layer._receiving == {channel: 2}
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert layer._receiving == {channel: 1}
    await layer.send(channel, {"type": "x"})
    assert await asyncio.wait_for(second, 1) == {"type": "x"}
    assert layer._receiving == {}


# Reading the checkpoints again


@pytest.mark.django_db
async def test_a_checkpoint_read_the_database_refuses_is_asked_again_later(monkeypatch, caplog):
    def locked(session_id):
        raise OperationalError("database table is locked: runs_app_run")

    monkeypatch.setattr(rt.store, "streaming_turns", locked, raising=False)
    assert await checkpoints_again(uuid4()) == []
    assert "asking again later" in caplog.text


# The publisher thread (layers other than the in-memory one: Redis)


class RecordingLayer(BaseChannelLayer):  # type: ignore[misc]
    """A layer that is not the in-memory one, so that the publisher sends from its
    thread; it records what it is sent."""

    sent: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    extensions = ["groups"]

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, message))


def test_the_publisher_thread_joins_pieces_per_frame_and_keeps_the_order(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.RecordingLayer"}}
    RecordingLayer.sent.clear()
    session, run, turn = uuid4(), uuid4(), uuid4()
    group = publishing.session_group(session)
    thread = publishing._Publisher()
    words = ["Once ", "upon ", "a ", "time"]
    offset = 0
    for word in words:
        thread.send(group, {**delta(offset, word), "run": str(run), "turn": str(turn)})
        offset += len(word)
    answer = {"text": "".join(words)}
    written = Written(session, run, 3, "message.completed", answer, timezone.now())
    thread.send(group, ([written], None))
    thread.drain()

    sent = [message for _, message in RecordingLayer.sent]
    assert [m["type"] for m in sent] == ["run.delta", "run.delta", "session.events"]
    assert [(m["offset"], m["text"]) for m in sent[:2]] == [(0, "Once "), (5, "upon a time")]
    assert json.loads(sent[1]["encoded"])["text"] == "upon a time"


class SlowLayer(RecordingLayer):
    """A layer whose first send takes until the test lets it finish."""

    first: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if not self.first.is_set():
            self.first.set()
            self.release.wait(5)
        await super().group_send(group, message)


def test_the_publisher_thread_sends_the_steps_queued_meanwhile_as_one(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.SlowLayer"}}
    RecordingLayer.sent.clear()
    SlowLayer.first.clear()
    SlowLayer.release.clear()
    thread = publishing._Publisher()
    thread.send(GROUP, step(1))
    assert SlowLayer.first.wait(5)
    for seq in (2, 3, 4):
        thread.send(GROUP, step(seq))
    SlowLayer.release.set()
    thread.drain()

    sent = [[event["seq"] for event in message["events"]] for _, message in RecordingLayer.sent]
    assert sent == [[1], [2, 3, 4]]


class LoopRecordingLayer(RecordingLayer):
    """A layer that is not the in-memory one, recording the thread each send ran on."""

    threads: ClassVar[list[int]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.threads.append(threading.get_ident())
        await super().group_send(group, message)


async def test_a_server_with_subscribers_publishes_to_a_redis_layer_from_its_own_loop(settings):
    # A process whose subscribers registered their loop (an ASGI server running runs
    # on its threads) sends there, in order, on the layer connection the loop has:
    # one thread hop from the commit, not two.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.LoopRecordingLayer"}}
    RecordingLayer.sent.clear()
    LoopRecordingLayer.threads.clear()
    server = publishing._Publisher()
    server.attach_loop(asyncio.get_running_loop())

    def commit_steps() -> None:
        for seq in (1, 2, 3):
            server.send(GROUP, step(seq))
        server.drain()

    await asyncio.to_thread(commit_steps)

    sent = [[event["seq"] for event in message["events"]] for _, message in RecordingLayer.sent]
    assert [seq for steps in sent for seq in steps] == [1, 2, 3]
    assert set(LoopRecordingLayer.threads) == {threading.get_ident()}
    assert server._thread is None


class FailingLayer(LoopRecordingLayer):
    """A layer on which every other send fails."""

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        await super().group_send(group, message)
        if len(self.sent) % 2 == 0:
            raise ConnectionError("the layer is gone")


async def test_a_send_from_the_loop_times_each_step_in_it_or_logs_its_failure(settings, caplog):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.FailingLayer"}}
    RecordingLayer.sent.clear()
    server = publishing._Publisher()
    server.attach_loop(asyncio.get_running_loop())
    counted = EVENT_PUBLISH_LAG.labels(layer="FailingLayer")
    before = sum(bucket.get() for bucket in counted._buckets)

    await asyncio.to_thread(server.send, GROUP, step(1))
    await server._settle()
    await asyncio.to_thread(server.send, GROUP, step(2))
    await server._settle()

    assert len(RecordingLayer.sent) == 2
    # The first went out and was timed; the second failed, was logged, not timed.
    assert sum(bucket.get() for bucket in counted._buckets) == before + 1
    assert "Publishing to the channel layer failed" in caplog.text
    assert not server._inflight
    server.detach_loop(asyncio.get_running_loop())


def test_without_a_running_loop_a_redis_layer_is_published_to_from_the_thread(settings):
    # A Celery worker has no subscribers' loop; a server's loop that stopped may
    # never run again, while subscribers on other servers wait for the message.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.LoopRecordingLayer"}}
    RecordingLayer.sent.clear()
    LoopRecordingLayer.threads.clear()
    stopped = asyncio.new_event_loop()
    try:
        worker = publishing._Publisher()
        worker.attach_loop(stopped)
        worker.send(GROUP, step(1))
        worker.drain()
    finally:
        stopped.close()

    assert [m["events"][0]["seq"] for _, m in RecordingLayer.sent] == [1]
    assert worker._thread is not None
    assert LoopRecordingLayer.threads == [worker._thread.ident]


async def test_a_server_publishes_from_its_own_loop_from_its_first_request_on(
    settings, monkeypatch
):
    # Before any subscriber: what a request commits (a run start) goes out on the
    # loop that serves the requests, not through the publisher thread.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.LoopRecordingLayer"}}
    RecordingLayer.sent.clear()
    LoopRecordingLayer.threads.clear()
    server = publishing._Publisher()
    monkeypatch.setattr(asgi, "publisher", server)
    sent: list[dict[str, Any]] = []

    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await asyncio.Future()  # the client stays connected while it waits
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/v1/nowhere/",
        "raw_path": b"/api/v1/nowhere/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    await asgi.application(scope, receive, send)
    assert sent[0]["status"] == 404

    def commit_steps() -> None:
        for seq in (1, 2):
            server.send(GROUP, step(seq))
        server.drain()

    await asyncio.to_thread(commit_steps)

    sent_seqs = [event["seq"] for _, message in RecordingLayer.sent for event in message["events"]]
    assert sent_seqs == [1, 2]
    assert set(LoopRecordingLayer.threads) == {threading.get_ident()}
    assert server._thread is None
