"""The session WebSocket, ``/ws/sessions/<id>/?after=N``, through the real ASGI
application (authentication middleware, routing, consumer) in this process.

Runs execute on the thread executor's worker threads and publish through the
in-memory channel layer to this test's event loop, as they do under one ASGI server.
Every list of events a socket received is compared with the session's log in the
database: same events, same order, nothing missing, nothing twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client

from goaai.asgi import application
from goaai.live_frames import FRAME_SECONDS, frame_seconds
from goaai.runtime import rt
from goaai.runtime.models import scripted
from sessions_app import eventlog
from sessions_app.models import ApiToken, RunEvent
from sessions_app.publisher import Written, publisher, session_group
from sessions_app.services import api_token_create, api_token_revoke, session_update
from tests.conftest import REDIS_TEST_URL

TIMEOUT = 5
REMEMBER = "remember my favourite colour is green"
REMEMBERED = "Got it. I'll remember in this conversation that your favourite colour is green."

Headers = list[tuple[bytes, bytes]]
OpenSocket = Callable[..., Awaitable[WebsocketCommunicator]]


# Fixtures


@pytest.fixture
async def open_socket(runtime) -> AsyncIterator[OpenSocket]:
    """Connects sockets, and disconnects them all when the test ends."""
    opened: list[WebsocketCommunicator] = []

    async def connect(path: str, headers: Headers | None = None) -> WebsocketCommunicator:
        socket = WebsocketCommunicator(application, path, headers=headers or [])
        opened.append(socket)
        connected, _ = await socket.connect(timeout=TIMEOUT)
        # Consumers accept first, so that a refusal can carry its close code.
        assert connected
        return socket

    yield connect
    for socket in opened:
        # One that timed out was cancelled, and one that crashed raised already.
        if not socket.future.done():
            await socket.disconnect(timeout=TIMEOUT)


@pytest.fixture
def token(owner) -> str:
    return api_token_create(user_id=owner.pk, name="live tests")[1]


@pytest.fixture
def auth(token) -> Headers:
    return bearer(token)


@pytest.fixture
def session(runtime, owner) -> UUID:
    """A session with one finished run: 15 stored events."""
    session = rt.create_session(owner=owner)
    assert rt.run("assistant", REMEMBER, session=session.id, timeout=30).output == REMEMBERED
    return session.id


@pytest.fixture
def slow_answers(monkeypatch) -> threading.Event:
    """Each word of an answer takes 20 ms to stream, so that a run lasts long enough
    for a client to connect or drop out in its middle. Gives an event set when an
    answer starts streaming: the run then holds no transaction for a while, which
    SQLite's shared in-memory test database needs to let another connection read
    (it answers "table is locked" instead of waiting)."""
    stream = scripted._stream
    streaming = threading.Event()

    def slow(text: str, on_delta: Any, pace: float = 0.0) -> None:
        if on_delta is not None:
            streaming.set()
            stream(text, on_delta, max(pace, 0.02))

    monkeypatch.setattr(scripted, "_stream", slow)
    return streaming


async def wait_for(flag: threading.Event) -> None:
    assert await sync_to_async(flag.wait, thread_sensitive=False)(TIMEOUT)


# Helpers


def bearer(raw: str) -> Headers:
    return [(b"authorization", f"Bearer {raw}".encode())]


def url(session_id: UUID | str, query: str = "") -> str:
    return f"/ws/sessions/{session_id}/" + (f"?{query}" if query else "")


@database_sync_to_async
def stored(session_id: UUID, after: int = 0) -> list[dict[str, Any]]:
    """The session's log after ``after``, as the socket shows it (JSON and back)."""
    rows = RunEvent.objects.filter(session_id=session_id, seq__gt=after).order_by("seq")
    return [json.loads(json.dumps(row.as_dict())) for row in rows]


@database_sync_to_async
def start(session_id: UUID, prompt: str = REMEMBER) -> UUID:
    return rt.start("assistant", prompt, session=session_id).run_id


async def frames_until(
    socket: WebsocketCommunicator, done: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Every frame up to and including the first one ``done`` accepts."""
    frames = []
    while True:
        frame = await socket.receive_json_from(timeout=TIMEOUT)
        frames.append(frame)
        if done(frame):
            return frames


async def backlog(socket: WebsocketCommunicator) -> tuple[list[dict[str, Any]], int]:
    """The events sent before ``caught_up``, and the seq ``caught_up`` names."""
    frames = await frames_until(socket, lambda f: f["type"] == "caught_up")
    assert {f["type"] for f in frames[:-1]} <= {"event"}
    return [f["event"] for f in frames[:-1]], frames[-1]["seq"]


def events_of(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["event"] for f in frames if f["type"] == "event"]


def is_event(kind: str, count: int = 1) -> Callable[[dict[str, Any]], bool]:
    """A ``done`` for :func:`frames_until`: the ``count``-th event of type ``kind``."""
    seen = 0

    def done(frame: dict[str, Any]) -> bool:
        nonlocal seen
        if frame["type"] == "event" and frame["event"]["type"] == kind:
            seen += 1
        return seen == count

    return done


async def closed_with(socket: WebsocketCommunicator) -> int:
    message = await socket.receive_output(timeout=TIMEOUT)
    assert message["type"] == "websocket.close", message
    return message["code"]


async def still_usable(socket: WebsocketCommunicator) -> None:
    """A ping is answered by a pong, and by nothing before it."""
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}


# Replay


@pytest.mark.django_db(transaction=True)
async def test_connecting_without_after_replays_the_whole_log_then_caught_up(
    open_socket, session, auth
):
    socket = await open_socket(url(session), auth)

    events, caught_up = await backlog(socket)

    log = await stored(session)
    assert len(log) == 15
    assert events == log
    assert caught_up == 15
    assert await socket.receive_nothing(0.1)


@pytest.mark.django_db(transaction=True)
async def test_after_n_replays_only_the_later_events(open_socket, session, auth):
    log = await stored(session)

    for after in (0, 1, 9, 14):
        socket = await open_socket(url(session, f"after={after}"), auth)
        events, caught_up = await backlog(socket)

        assert (events, caught_up) == (log[after:], 15), after
    # At or beyond the last event: caught_up, and nothing else.
    for after in (15, 16, 10**6):
        socket = await open_socket(url(session, f"after={after}"), auth)

        frame = await socket.receive_json_from(timeout=TIMEOUT)

        assert frame["type"] == "caught_up", after
        await still_usable(socket)


@pytest.mark.django_db(transaction=True)
async def test_an_invalid_after_is_an_error_frame_and_close_4400(open_socket, session, auth):
    for after in ("-1", "abc", "1.5", "1e3", "0x10", "9" * 40):
        socket = await open_socket(url(session, f"after={after}"), auth)

        frame = await socket.receive_json_from(timeout=TIMEOUT)

        assert (frame["type"], frame["code"]) == ("error", "invalid_after"), after
        assert await closed_with(socket) == 4400, after


@pytest.mark.django_db(transaction=True)
async def test_an_after_of_other_digits_is_invalid_too(open_socket, session, auth):
    # "²" (%C2%B2) passes str.isdigit() but not int(): refused, not a crashed consumer.
    socket = await open_socket(url(session, "after=%C2%B2"), auth)

    frame = await socket.receive_json_from(timeout=TIMEOUT)

    assert (frame["type"], frame["code"]) == ("error", "invalid_after")
    assert await closed_with(socket) == 4400


# Live events: order, no gap, no duplicate


@pytest.mark.django_db(transaction=True)
async def test_a_run_s_events_arrive_live_in_order_exactly_as_stored(open_socket, session, auth):
    socket = await open_socket(url(session), auth)
    _, before = await backlog(socket)

    await start(session)
    frames = await frames_until(socket, is_event("run.completed"))

    live = events_of(frames)
    log = await stored(session, before)
    assert [e["seq"] for e in live] == list(range(before + 1, log[-1]["seq"] + 1))
    assert live == log
    # Nothing arrives twice later either (a duplicate would come after the run's end).
    assert await socket.receive_nothing(0.2)


@pytest.mark.django_db(transaction=True)
async def test_catching_up_while_runs_write_gives_the_exact_log(
    open_socket, runtime, owner, auth, slow_answers, on_postgres
):
    session = (await database_sync_to_async(rt.create_session)(owner=owner)).id
    runs = 3
    if on_postgres:
        # Three runs of the session at once: the others write while one streams.
        for _ in range(runs):
            await start(session)
    else:
        # SQLite's shared in-memory test database refuses concurrent writers instead
        # of waiting: there the runs are written one after another.
        writer = threading.Thread(target=_run_one_after_another, args=(session, runs))
        writer.start()
    # Connect in the middle of the first run: some events stored, more coming.
    await wait_for(slow_answers)

    socket = await open_socket(url(session, "after=0"), auth)
    frames = await frames_until(socket, is_event("run.completed", runs))

    if not on_postgres:
        await sync_to_async(writer.join, thread_sensitive=False)(TIMEOUT)
    log = await stored(session)
    received = events_of(frames)
    assert received == log
    assert [e["seq"] for e in received] == list(range(1, len(log) + 1))
    caught_up = next(f["seq"] for f in frames if f["type"] == "caught_up")
    # The switch from the backlog to live events happened in the middle of the runs.
    assert 3 <= caught_up < len(log)
    assert await socket.receive_nothing(0.2)


def _run_one_after_another(session_id: UUID, runs: int) -> None:
    try:
        for _ in range(runs):
            rt.run("assistant", REMEMBER, session=session_id, timeout=TIMEOUT)
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
async def test_a_client_that_reconnects_with_its_last_seq_ends_with_the_same_events(
    open_socket, session, auth, slow_answers
):
    stayed = await open_socket(url(session), auth)
    dropped = await open_socket(url(session), auth)
    kept, _ = await backlog(stayed)
    first, _ = await backlog(dropped)

    await start(session)
    # Drop out in the middle of the run (after its first turn began), and come back
    # once more events went by, while the answer streams.
    first += events_of(await frames_until(dropped, is_event("turn.started")))
    await dropped.disconnect(timeout=TIMEOUT)
    await wait_for(slow_answers)
    again = await open_socket(url(session, f"after={first[-1]['seq']}"), auth)
    frames = await frames_until(again, is_event("run.completed"))
    kept += events_of(await frames_until(stayed, is_event("run.completed")))

    assert first + events_of(frames) == kept == await stored(session)
    # The reconnection did miss live events, and got them back from the database.
    caught_up = next(f["seq"] for f in frames if f["type"] == "caught_up")
    assert caught_up > first[-1]["seq"]


# Live messages that arrive twice, out of order, or after a gap


async def publish(session_id: UUID, events: list[dict[str, Any]]) -> None:
    """What a worker's publisher sends, sent directly."""
    await get_channel_layer().group_send(
        session_group(session_id), {"type": "session.events", "events": events}
    )


@pytest.mark.django_db(transaction=True)
async def test_a_live_event_the_client_already_has_is_dropped(open_socket, session, auth):
    socket = await open_socket(url(session), auth)
    events, _ = await backlog(socket)

    await publish(session, [events[-1]])
    await publish(session, [events[0], events[7]])

    await still_usable(socket)


@pytest.mark.django_db(transaction=True)
async def test_a_live_event_after_a_gap_is_sent_after_the_missing_ones_from_the_database(
    open_socket, session, auth, monkeypatch
):
    socket = await open_socket(url(session), auth)
    _, last = await backlog(socket)
    # Three changes whose live messages are lost (as a full channel would lose them).
    monkeypatch.setattr(eventlog, "publish_events", lambda events, owner_id=None: None)
    for title in ("one", "two", "three"):
        await database_sync_to_async(session_update)(session_id=session, title=title)
    missed = await stored(session, last)
    assert [e["seq"] for e in missed] == [last + 1, last + 2, last + 3]

    await publish(session, [missed[2]])
    frames = [await socket.receive_json_from(timeout=TIMEOUT) for _ in missed]

    assert events_of(frames) == missed
    # A late copy of a filled event is a duplicate by then.
    await publish(session, [missed[1], missed[0]])
    await still_usable(socket)


@pytest.mark.django_db(transaction=True)
async def test_events_out_of_order_in_one_message_are_sent_in_order(
    open_socket, session, auth, monkeypatch
):
    socket = await open_socket(url(session), auth)
    _, last = await backlog(socket)
    monkeypatch.setattr(eventlog, "publish_events", lambda events, owner_id=None: None)
    for title in ("one", "two", "three"):
        await database_sync_to_async(session_update)(session_id=session, title=title)
    written = await stored(session, last)

    await publish(session, [written[2], written[0], written[1]])
    frames = [await socket.receive_json_from(timeout=TIMEOUT) for _ in written]

    assert events_of(frames) == written
    await still_usable(socket)


@pytest.mark.django_db(transaction=True)
async def test_a_gap_larger_than_max_live_gap_asks_the_client_to_resync(
    open_socket, session, auth, monkeypatch
):
    # The consumer reads the limit it imported; patch both, wherever it is read.
    monkeypatch.setattr("sessions_app.streams.MAX_LIVE_GAP", 2)
    monkeypatch.setattr("sessions_app.consumers.MAX_LIVE_GAP", 2)
    socket = await open_socket(url(session), auth)
    events, last = await backlog(socket)

    ahead = {**events[-1], "seq": last + 4}  # three missing: more than two
    await publish(session, [ahead])

    assert await socket.receive_json_from(timeout=TIMEOUT) == {"type": "resync", "after": last}
    assert await closed_with(socket) == 4409


# Frames of several events (?batch=1): the same events in the same order, a step's
# events (committed and published together) in one frame, the backlog in frames of
# at most MAX_EVENTS_PER_FRAME; deltas, caught_up and control frames unchanged.


async def batched_until_caught_up(socket: WebsocketCommunicator) -> tuple[list[list[Any]], int]:
    """The ``events`` frames' lists before ``caught_up``, and the seq it names."""
    batches = []
    while True:
        frame = await socket.receive_json_from(timeout=TIMEOUT)
        if frame["type"] == "caught_up":
            return batches, frame["seq"]
        assert frame["type"] == "events", frame
        batches.append(frame["events"])


async def batched_until_run_ends(
    socket: WebsocketCommunicator,
) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The ``events`` frames' lists and the deltas, up to the run's end."""
    batches, deltas = [], []
    while True:
        frame = await socket.receive_json_from(timeout=TIMEOUT)
        if frame["type"] == "delta":
            deltas.append(frame)
            continue
        assert frame["type"] == "events", frame
        assert "event" not in frame
        batches.append(frame["events"])
        if any(event["type"] == "run.completed" for event in frame["events"]):
            return batches, deltas


@pytest.mark.django_db(transaction=True)
async def test_the_backlog_comes_in_events_frames_then_caught_up(open_socket, session, auth):
    socket = await open_socket(url(session, "batch=1"), auth)

    batches, caught_up = await batched_until_caught_up(socket)

    log = await stored(session)
    assert batches == [log]  # 15 events: one frame
    assert caught_up == 15
    await still_usable(socket)


@pytest.mark.django_db(transaction=True)
async def test_a_long_backlog_is_split_into_frames_of_the_most_a_frame_holds(
    open_socket, session, auth, monkeypatch
):
    monkeypatch.setattr("sessions_app.consumers.MAX_EVENTS_PER_FRAME", 4)
    socket = await open_socket(url(session, "after=2&batch=1"), auth)

    batches, caught_up = await batched_until_caught_up(socket)

    log = await stored(session, 2)
    assert [len(batch) for batch in batches] == [4, 4, 4, 1]
    assert [event for batch in batches for event in batch] == log
    assert caught_up == 15


@pytest.mark.django_db(transaction=True)
async def test_a_run_s_steps_arrive_one_frame_each_in_order_exactly_as_stored(
    open_socket, session, auth
):
    socket = await open_socket(url(session, "batch=1"), auth)
    await batched_until_caught_up(socket)

    await start(session)
    batches, deltas = await batched_until_run_ends(socket)

    live = [event for batch in batches for event in batch]
    assert live == await stored(session, 15)
    # Fewer frames than events: the steps that record several events came whole
    # (the answer's end: turn.completed, message.completed, usage, run.completed).
    assert len(batches) < len(live)
    assert [event["type"] for event in batches[-1]][-1] == "run.completed"
    assert len(batches[-1]) > 1
    # The answer still streams as deltas before the message that completes it.
    completed = next(e for e in live if e["type"] == "message.completed")
    assert "".join(d["text"] for d in deltas) == completed["data"]["text"]
    assert await socket.receive_nothing(0.2)


@pytest.mark.django_db(transaction=True)
async def test_events_after_a_gap_come_in_order_with_the_missing_ones(
    open_socket, session, auth, monkeypatch
):
    socket = await open_socket(url(session, "batch=1"), auth)
    _, last = await batched_until_caught_up(socket)
    # Three changes whose live messages are lost (as a full channel would lose them).
    monkeypatch.setattr(eventlog, "publish_events", lambda events, owner_id=None: None)
    for title in ("one", "two", "three"):
        await database_sync_to_async(session_update)(session_id=session, title=title)
    missed = await stored(session, last)

    await publish(session, [missed[2], missed[0]])
    received = []
    while len(received) < len(missed):
        frame = await socket.receive_json_from(timeout=TIMEOUT)
        assert frame["type"] == "events"
        received += frame["events"]

    assert received == missed
    await publish(session, [missed[1]])  # a late copy: a duplicate by then
    await still_usable(socket)


@pytest.mark.django_db(transaction=True)
async def test_steps_a_socket_is_reached_late_for_go_out_together_in_one_frame(
    open_socket, session, auth, monkeypatch
):
    """While the server writes one step to hundreds of sockets, the next steps
    commit: a socket reached late sends what its channel holds by then in one frame,
    and the steps handed over to the server's loop and not yet taken with them."""
    socket = await open_socket(url(session, "batch=1"), auth)
    _, last = await batched_until_caught_up(socket)
    monkeypatch.setattr(eventlog, "publish_events", lambda events, owner_id=None: None)
    for title in ("one", "two", "three", "four"):
        await database_sync_to_async(session_update)(session_id=session, title=title)
    steps = await stored(session, last)
    group = session_group(session)
    layer = get_channel_layer()
    # Two steps queued before the socket's consumer runs again, each encoded once
    # for the group as the publisher encodes it; the third is queued without.
    for step in steps[:2]:
        layer.group_send_now(
            group,
            {"type": "session.events", "events": [step], "encoded": [json.dumps(step)]},
            copy=False,
        )
    layer.group_send_now(group, {"type": "session.events", "events": [steps[2]]})
    # The fourth: committed in a run's thread, handed over, not yet taken by the loop.
    publisher._handoff.append(
        (layer, group, ([written(steps[3], session)], None), time.monotonic())
    )

    frame = await socket.receive_json_from(timeout=TIMEOUT)

    assert frame == {"type": "events", "events": steps}
    assert not publisher._handoff
    await still_usable(socket)


def written(event: dict[str, Any], session_id: UUID) -> Written:
    return Written(
        session_id=session_id,
        run_id=event["run"],
        seq=event["seq"],
        type=event["type"],
        data=event["data"],
        created_at=datetime.fromisoformat(event["created_at"]),
    )


@pytest.mark.django_db(transaction=True)
async def test_batch_0_or_absent_is_one_event_frame_per_event(open_socket, session, auth):
    for query in ("batch=0", ""):
        socket = await open_socket(url(session, query), auth)
        frames = [await socket.receive_json_from(timeout=TIMEOUT) for _ in range(16)]

        assert [frame["type"] for frame in frames] == ["event"] * 15 + ["caught_up"], query
        assert [frame["event"] for frame in frames[:15]] == await stored(session)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("value", ["2", "yes", "true", "1 ", "%C2%B9"])
async def test_any_other_batch_is_an_error_frame_and_close_4400(
    open_socket, session: UUID, auth, value
):
    socket = await open_socket(url(session, f"batch={value}"), auth)

    frame = await socket.receive_json_from(timeout=TIMEOUT)

    assert (frame["type"], frame["code"]) == ("error", "invalid_batch")
    assert await closed_with(socket) == 4400


# Token deltas


@pytest.mark.django_db(transaction=True)
async def test_the_answer_streams_as_deltas_of_its_turn_before_message_completed(
    open_socket, session, auth
):
    socket = await open_socket(url(session), auth)
    await backlog(socket)

    run = await start(session)
    frames = await frames_until(socket, is_event("run.completed"))

    kinds = [f["type"] if f["type"] != "event" else f["event"]["type"] for f in frames]
    completed = kinds.index("message.completed")
    message = frames[completed]["event"]
    deltas = [f for f in frames if f["type"] == "delta"]
    assert deltas
    assert {(d["run"], d["turn"]) for d in deltas} == {(str(run), message["data"]["turn"])}
    assert "".join(d["text"] for d in deltas) == message["data"]["text"] == REMEMBERED
    assert max(i for i, kind in enumerate(kinds) if kind == "delta") < completed
    # Streaming starts once the turn has started (its turn.started came first).
    turn_started = next(
        i
        for i, f in enumerate(frames)
        if f["type"] == "event"
        and f["event"]["type"] == "turn.started"
        and f["event"]["data"]["turn"] == message["data"]["turn"]
    )
    assert turn_started < kinds.index("delta")
    # Deltas are not events: nothing was stored for them.
    assert events_of(frames) == await stored(session, 15)


# Authentication and authorization


def cookie_of(user: Any) -> tuple[bytes, bytes]:
    """The cookie header of a browser that logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


@pytest.mark.django_db(transaction=True)
async def test_the_owner_by_cookie_or_api_token_and_staff_may_watch(
    open_socket, session, owner, token, staff
):
    cookie = await sync_to_async(cookie_of)(owner)
    _, staff_token = await database_sync_to_async(api_token_create)(user_id=staff.pk, name="ops")
    ways = {
        "the browser session cookie": (url(session, "after=14"), [cookie]),
        "a token in the query string": (url(session, f"after=14&token={token}"), []),
        "an Authorization: Bearer header": (url(session, "after=14"), bearer(token)),
        "staff": (url(session, "after=14"), bearer(staff_token)),
    }

    for way, (path, headers) in ways.items():
        socket = await open_socket(path, headers)
        events, caught_up = await backlog(socket)

        assert ([e["seq"] for e in events], caught_up) == ([15], 15), way


@pytest.mark.django_db(transaction=True)
async def test_missing_or_unusable_credentials_close_4401(open_socket, session, owner):
    revoked, revoked_raw = await database_sync_to_async(api_token_create)(
        user_id=owner.pk, name="old"
    )
    await database_sync_to_async(api_token_revoke)(token_id=revoked.pk)
    cookie = await sync_to_async(cookie_of)(owner)
    attempts = {
        "nothing": (url(session), []),
        "unknown token": (url(session), bearer("goa_nope")),
        "revoked token": (url(session), bearer(revoked_raw)),
        "revoked token in the query": (url(session, f"token={revoked_raw}"), []),
        "malformed header": (url(session), [(b"authorization", b"Bearer")]),
        # A token that does not work is not overruled by a valid cookie.
        "unknown token and a cookie": (url(session), [cookie, *bearer("goa_nope")]),
        "unknown token in the query and a cookie": (url(session, "token=goa_nope"), [cookie]),
    }

    for what, (path, headers) in attempts.items():
        socket = await open_socket(path, headers)

        assert await closed_with(socket) == 4401, what
    # Refused before joining: the session's group holds nobody.
    assert session_group(session) not in get_channel_layer().groups


@pytest.mark.django_db(transaction=True)
async def test_someone_else_s_missing_or_malformed_session_closes_4404(
    open_socket, session, other_user
):
    _, raw = await database_sync_to_async(api_token_create)(user_id=other_user.pk, name="bob")

    for path in (
        # Someone else's session answers as one that does not exist.
        url(session),
        url(uuid4()),
        "/ws/sessions/not-a-uuid/",
        "/ws/sessions/12345/",
        "/ws/sessions/00000000-0000-0000-0000-00000000000g/",
        f"/ws/sessions/{session}/extra/",
        "/ws/nothing/",
        "/",
    ):
        socket = await open_socket(path, bearer(raw))

        assert await closed_with(socket) == 4404, path
    assert session_group(session) not in get_channel_layer().groups


@pytest.mark.django_db(transaction=True)
async def test_the_origin_must_be_this_site(open_socket, session, owner):
    cookie = await sync_to_async(cookie_of)(owner)

    for origin in ("http://evil.example", "http://localhost.evil.example", "null", "https://"):
        socket = await open_socket(
            url(session), [cookie, (b"origin", origin.encode()), (b"host", b"localhost:8000")]
        )

        assert await closed_with(socket) == 4403, origin
    # The page's origin is the one the socket's handshake names in its Host.
    for origin, host in (
        ("http://localhost:8000", "localhost:8000"),
        ("http://127.0.0.1", "127.0.0.1"),
    ):
        socket = await open_socket(
            url(session), [cookie, (b"origin", origin.encode()), (b"host", host.encode())]
        )

        _, caught_up = await backlog(socket)
        assert caught_up == 15, origin


# Bad input from the client


BAD_FRAMES = {
    "not JSON": ("{not json", "invalid_json"),
    "empty": ("", "invalid_json"),
    "an array": ("[1, 2]", "invalid_frame"),
    "a string": ('"ping"', "invalid_frame"),
    "no type": ("{}", "invalid_frame"),
    "a type that is not text": ('{"type": 5}', "invalid_frame"),
    "an unknown type": ('{"type": "subscribe"}', "unknown_type"),
    "binary": (b'{"type": "ping"}', "binary_frame"),
    "oversized": (json.dumps({"type": "ping", "pad": "x" * 16 * 1024}), "frame_too_large"),
    # The limit is in bytes: 6,000 three-byte characters are 18,000 bytes.
    "oversized in bytes": (
        json.dumps({"type": "ping", "pad": "€" * 6000}, ensure_ascii=False),
        "frame_too_large",
    ),
}


@pytest.mark.django_db(transaction=True)
async def test_bad_frames_get_error_frames_and_the_socket_stays_usable(open_socket, session, auth):
    socket = await open_socket(url(session, "after=15"), auth)
    await backlog(socket)
    answers = {}

    for what, (frame, _) in BAD_FRAMES.items():
        # send_input, not send_to: send_to cannot send an empty text frame.
        kind = "bytes" if isinstance(frame, bytes) else "text"
        await socket.send_input({"type": "websocket.receive", kind: frame})
        answer = await socket.receive_json_from(timeout=TIMEOUT)
        assert answer["type"] != "error" or (isinstance(answer["detail"], str) and answer["detail"])
        answers[what] = answer.get("code", answer["type"])
        await still_usable(socket)

    assert answers == {what: code for what, (_, code) in BAD_FRAMES.items()}


@pytest.mark.django_db(transaction=True)
async def test_a_frame_just_under_the_limit_is_read(open_socket, session, auth):
    socket = await open_socket(url(session, "after=15"), auth)
    await backlog(socket)
    frame = '{"type": "ping", "pad": ""}'

    await socket.send_to(text_data=frame.replace('""', '"' + "x" * (16 * 1024 - len(frame)) + '"'))

    assert await socket.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}


# What a reviewer found: revocation, a lost tail, a day-old subscription


@pytest.mark.django_db(transaction=True)
async def test_revoking_the_token_closes_its_open_socket(open_socket, session, token, auth):
    socket = await open_socket(url(session), auth)
    await backlog(socket)
    revoked = await database_sync_to_async(
        lambda: api_token_revoke(token_id=ApiToken.objects.get().pk)
    )()
    assert revoked.revoked_at is not None
    frame = await socket.receive_json_from(timeout=TIMEOUT)
    assert frame == {
        "type": "error",
        "code": "token_revoked",
        "detail": "The token this connection used was revoked.",
    }
    assert await closed_with(socket) == 4401


@pytest.mark.django_db(transaction=True)
async def test_a_ping_brings_the_events_the_layer_dropped_at_the_end_of_a_run(
    open_socket, session, auth, monkeypatch
):
    # The run's last events never reach the layer (as when a full queue drops them):
    # no later event shows the gap, so the client's idle ping must bring them.
    socket = await open_socket(url(session), auth)
    _, last = await backlog(socket)
    monkeypatch.setattr(eventlog, "publish_events", lambda events, owner_id=None: None)
    run_id = await start(session)
    await database_sync_to_async(rt.wait)(run_id, 30)
    await socket.send_json_to({"type": "ping"})
    expected = await stored(session, after=last)
    # (The run's deltas still came live, before the pong; they are not stored.)
    frames = await frames_until(socket, is_event("run.completed"))
    assert {"type": "pong"} in frames
    assert events_of(frames) == expected


def test_in_memory_subscriptions_do_not_expire_after_a_day(settings):
    config = settings.CHANNEL_LAYERS["default"]
    if config["BACKEND"].endswith("InMemoryChannelLayer"):
        assert config["CONFIG"]["group_expiry"] > 365 * 86400


# Many subscribers: one session followed by 500 sockets at once. Each gets every
# event once, in order, and the whole streamed answer, although its pieces are
# joined into fewer frames for so many (goaai.live_frames.frame_seconds).

SUBSCRIBERS = 500
STORY_PROMPT = "tell me a story"


def stitched(frames: list[dict[str, Any]]) -> dict[str, str]:
    """Each turn's text as the delta frames give it, checking that each piece
    begins where the text so far ends (nothing missing, nothing twice)."""
    texts: dict[str, str] = {}
    for frame in frames:
        if frame["type"] == "delta":
            text = texts.get(frame["turn"], "")
            assert frame["offset"] == len(text)
            texts[frame["turn"]] = text + frame["text"]
    return texts


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def live_layer(request, settings) -> Iterator[str]:
    """The embedded default's in-memory layer, or the Redis pub/sub layer that
    ``REDIS_URL`` selects (on the tests' Redis, under a prefix of its own)."""
    if request.param == "memory":
        yield request.param
        return
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "goaai.channel_layers.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_TEST_URL], "prefix": f"test{uuid4().hex[:12]}"},
        }
    }
    yield request.param
    publisher.drain()
    get_channel_layer().close_for_publishing()


@pytest.mark.django_db(transaction=True)
async def test_500_subscribers_each_get_every_event_once_in_order_and_the_whole_answer(
    live_layer, open_socket, session, auth, slow_answers
):
    before = len(await stored(session))
    sockets = [await open_socket(url(session, f"after={before}"), auth) for _ in range(SUBSCRIBERS)]
    for socket in sockets:
        assert await backlog(socket) == ([], before)

    await start(session, STORY_PROMPT)

    received = [await frames_until(socket, is_event("run.completed")) for socket in sockets]
    log = await stored(session, after=before)
    [answer] = [e["data"] for e in log if e["type"] == "message.completed"]
    assert len(answer["text"]) > 500
    pieces = []
    for frames in received:
        assert events_of(frames) == log
        assert stitched(frames) == {answer["turn"]: answer["text"]}
        pieces.append(sum(1 for f in frames if f["type"] == "delta"))
    # For 500 subscribers a frame lasts 250 ms: the story's words (60 ms each)
    # reached every socket in far fewer frames than words.
    assert frame_seconds(SUBSCRIBERS) == 5 * FRAME_SECONDS
    assert max(pieces) < len(answer["text"].split()) / 3
