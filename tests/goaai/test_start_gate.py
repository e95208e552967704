"""Requests that start a run go into Django one at a time (goaai.start_gate); the
others wait without holding anything, and every other request goes in at once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from channels.db import database_sync_to_async

from goaai.start_gate import RunStartGate, starts_a_run
from runs_app.models import Run
from sessions_app.services import api_token_create
from tests.goaai.test_body_limit import call

START = f"/api/v1/sessions/{uuid.uuid4()}/runs/"


def scope(path: str = START, method: str = "POST") -> dict:
    return {"type": "http", "method": method, "path": path, "headers": []}


def body(*chunks: bytes):
    """A client that sends ``chunks`` as its body, then stays connected."""
    pending = list(chunks)

    async def receive():
        if pending:
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending)}
        await asyncio.Future()

    return receive


async def no_send(message):
    pass


class Inner:
    """An application that notes who is inside and stays there until let go."""

    def __init__(self) -> None:
        self.inside: list[str] = []
        self.most = 0
        self.bodies: dict[str, bytes] = {}
        self.release: dict[str, asyncio.Event] = {}

    async def __call__(self, scope, receive, send):
        name = scope["name"]
        self.inside.append(name)
        self.most = max(self.most, len(self.inside))
        message = {"more_body": True}
        read = b""
        while message.get("more_body"):
            message = await receive()
            read += message.get("body", b"")
        self.bodies[name] = read
        await self.release.setdefault(name, asyncio.Event()).wait()
        self.inside.remove(name)

    def let_go(self, name: str) -> None:
        self.release.setdefault(name, asyncio.Event()).set()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
def inner():
    return Inner()


@pytest.fixture
def inline_runs():
    """Runs executed in their request, so that none is left running at the end."""
    from goaai.runtime import rt

    rt.reset()
    rt.configure(executor="inline")
    yield
    rt.reset()


async def start(gate, name, path=START, method="POST", receive=None):
    request = {**scope(path, method), "name": name}
    return asyncio.ensure_future(gate(request, receive or body(b"{}"), no_send))


@pytest.mark.parametrize(
    "path",
    [
        START,
        f"/api/v1/runs/{uuid.uuid4()}/retry/",
        f"/api/v1/runs/{uuid.uuid4()}/regenerate/",
        f"/api/v1/runs/{uuid.uuid4()}/edit/",
        f"/api/v1/runs/{uuid.uuid4()}/fork/",
    ],
)
def test_the_requests_that_start_a_run(path):
    assert starts_a_run(scope(path))
    assert not starts_a_run(scope(path, "GET"))


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/sessions/",
        f"/api/v1/runs/{uuid.uuid4()}/cancel/",
        f"/api/v1/runs/{uuid.uuid4()}/respond/",
        f"/api/v1/runs/{uuid.uuid4()}/feedback/",
        # The OpenAI-compatible answer may be the whole run: never held.
        "/v1/chat/completions",
        "/v1/responses",
        f"/api/v1/sessions/{uuid.uuid4()}/runs/extra/",
    ],
)
def test_other_requests_are_not_held(path):
    assert not starts_a_run(scope(path))


async def test_starts_go_in_one_at_a_time_in_their_order(inner, settings):
    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    gate = RunStartGate(inner)
    first = await start(gate, "first")
    await settle()
    second = await start(gate, "second")
    third = await start(gate, "third")
    await settle()
    assert inner.inside == ["first"]

    inner.let_go("first")
    await settle()
    assert inner.inside == ["second"]
    inner.let_go("second")
    inner.let_go("third")
    await asyncio.gather(first, second, third)
    assert inner.most == 1
    assert inner.bodies == {"first": b"{}", "second": b"{}", "third": b"{}"}


async def test_reads_and_other_writes_are_not_held_behind_a_start(inner, settings):
    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    gate = RunStartGate(inner)
    held = await start(gate, "start")
    await settle()
    others = [
        await start(gate, "list runs", method="GET"),
        await start(gate, "new session", path="/api/v1/sessions/"),
        await start(gate, "page", path="/", method="GET"),
    ]
    await settle()
    assert sorted(inner.inside) == ["list runs", "new session", "page", "start"]
    for name in list(inner.inside):
        inner.let_go(name)
    await asyncio.gather(held, *others)


async def test_a_body_is_read_whole_before_its_request_waits(inner, settings):
    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    gate = RunStartGate(inner)
    first = await start(gate, "first")
    await settle()
    # A slow client's body arrives while another start is inside: the gate takes it
    # all meanwhile, and the application then reads it as it was sent.
    arrived = asyncio.Event()
    chunks = [b'{"input": ', b'"hello"}']

    async def slow():
        if chunks:
            chunk = chunks.pop(0)
            if not chunks:
                arrived.set()
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        await asyncio.Future()

    second = await start(gate, "second", receive=slow)
    await asyncio.wait_for(arrived.wait(), 1)
    assert inner.inside == ["first"]
    inner.let_go("first")
    inner.let_go("second")
    await asyncio.gather(first, second)
    assert inner.bodies["second"] == b'{"input": "hello"}'


async def test_a_client_gone_before_its_body_is_whole_never_goes_in(inner, settings):
    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    gate = RunStartGate(inner)
    messages = [
        {"type": "http.request", "body": b'{"inp', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def leaving():
        return messages.pop(0)

    await asyncio.wait_for(gate({**scope(), "name": "gone"}, leaving, no_send), 1)
    assert inner.most == 0
    # And the gate is free for the next one.
    nxt = await start(gate, "next")
    await settle()
    assert inner.inside == ["next"]
    inner.let_go("next")
    await nxt


async def test_a_start_that_fails_lets_the_next_one_in(settings):
    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    entered: list[str] = []

    async def failing(scope, receive, send):
        entered.append(scope["name"])
        if scope["name"] == "broken":
            raise RuntimeError("the view failed")

    gate = RunStartGate(failing)
    with pytest.raises(RuntimeError):
        await gate({**scope(), "name": "broken"}, body(b"{}"), no_send)
    await asyncio.wait_for(gate({**scope(), "name": "next"}, body(b"{}"), no_send), 1)
    assert entered == ["broken", "next"]


async def test_the_next_start_goes_in_once_the_answer_is_sent(settings):
    # What a request does after its answer (Django closes the response and sends
    # its end-of-request signal) does not hold the next start up; a part of the
    # answer with more to come does.
    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    entered: list[str] = []
    steps = {name: asyncio.Event() for name in ("part", "last", "end")}

    async def answering(scope, receive, send):
        entered.append(scope["name"])
        if scope["name"] != "first":
            return
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await steps["part"].wait()
        await send({"type": "http.response.body", "body": b"{", "more_body": True})
        await steps["last"].wait()
        await send({"type": "http.response.body", "body": b"}"})
        await steps["end"].wait()

    sent: list[dict] = []

    async def client(message):
        sent.append(message)

    gate = RunStartGate(answering)
    first = asyncio.ensure_future(gate({**scope(), "name": "first"}, body(b"{}"), client))
    await settle()
    second = await start(gate, "second")
    for step in ("part", "last"):
        await settle()
        assert entered == ["first"], step
        steps[step].set()
    await asyncio.wait_for(second, 1)
    assert entered == ["first", "second"]
    assert not first.done()
    assert [m.get("body") for m in sent] == [None, b"{", b"}"]
    steps["end"].set()
    await first


def default_at_once(database_url: str, executor: str) -> int:
    """GOAAI_RUN_STARTS_AT_ONCE as goaai's settings default it for a server on that
    database with that executor."""
    env = {k: v for k, v in os.environ.items() if k != "GOAAI_RUN_STARTS_AT_ONCE"}
    env.update(DATABASE_URL=database_url, GOAAI_EXECUTOR=executor)
    code = "import goaai.settings as s; print(s.GOAAI_RUN_STARTS_AT_ONCE)"
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_by_default_one_start_goes_in_on_sqlite_two_on_postgresql_all_with_celery():
    # SQLite writes one transaction at a time; on PostgreSQL one start's round trips
    # and commit overlap another's work; a server whose runs Celery's workers execute
    # holds none back.
    postgres = "postgres://goaai@db.example:5432/goaai"
    assert default_at_once("sqlite:///goaai.sqlite3", "thread") == 1
    assert default_at_once("sqlite:///goaai.sqlite3", "celery") == 1
    assert default_at_once(postgres, "thread") == 2
    assert default_at_once(postgres, "celery") == 0


@pytest.mark.parametrize(("at_once", "most"), [(2, 2), (0, 3)])
async def test_the_setting_sets_how_many_go_in(inner, settings, at_once, most):
    settings.GOAAI_RUN_STARTS_AT_ONCE = at_once
    gate = RunStartGate(inner)
    tasks = [await start(gate, name) for name in ("a", "b", "c")]
    await settle()
    assert inner.most == most
    for name in ("a", "b", "c"):
        inner.let_go(name)
    await asyncio.gather(*tasks)


def test_each_event_loop_has_its_own_gate(inner, settings):
    # A semaphore belongs to one loop; a second loop (a test's, a reloaded server's)
    # must not find it.
    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    gate = RunStartGate(inner)

    async def one(name):
        task = await start(gate, name)
        await settle()
        inner.let_go(name)
        await task

    asyncio.run(one("in the first loop"))
    asyncio.run(one("in the second loop"))
    assert inner.bodies.keys() == {"in the first loop", "in the second loop"}


@pytest.mark.django_db(transaction=True)
async def test_through_the_application_a_start_is_recorded_and_an_oversized_one_is_refused(
    owner, settings, inline_runs
):
    _, raw = await database_sync_to_async(api_token_create)(user_id=owner.pk, name="t")
    from goaai.runtime import rt

    session = await database_sync_to_async(rt.create_session)(owner=owner, agent="assistant")
    path = f"/api/v1/sessions/{session.id}/runs/"
    auth = [(b"authorization", f"Bearer {raw}".encode())]
    payload = json.dumps({"input": "echo hi"}).encode()
    status, answer, _ = await call(
        path,
        [payload[:5], payload[5:]],
        [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            *auth,
        ],
    )
    assert status == 201, answer
    assert json.loads(answer)["input"] == "echo hi"

    # The body limit is outside the gate: a body past it is refused, nothing started.
    settings.GOAAI_API_MAX_BODY_BYTES = 100
    big = json.dumps({"input": "x" * 500}).encode()
    status, answer, read = await call(
        path, [big[:60], big[60:120], big[120:]], [(b"content-type", b"application/json"), *auth]
    )
    assert status == 413
    assert json.loads(answer)["errors"][0]["code"] == "payload_too_large"
    assert read == 2
    assert await Run.objects.filter(session_id=session.id).acount() == 1


@pytest.mark.django_db(transaction=True)
async def test_the_server_application_lets_one_start_in_at_a_time(
    owner, settings, monkeypatch, inline_runs
):
    from goaai.runtime import rt
    from runs_app.api.views import SessionRunViewSet

    settings.GOAAI_RUN_STARTS_AT_ONCE = 1
    _, raw = await database_sync_to_async(api_token_create)(user_id=owner.pk, name="t")
    sessions = [
        await database_sync_to_async(rt.create_session)(owner=owner, agent="assistant")
        for _ in range(3)
    ]
    inside = most = 0
    original = SessionRunViewSet.create

    def create(self, request, session_id):
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        time.sleep(0.2)  # long enough for the others to have come in, were they let
        try:
            return original(self, request, session_id)
        finally:
            inside -= 1

    monkeypatch.setattr(SessionRunViewSet, "create", create)
    payload = json.dumps({"input": "echo hi"}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"authorization", f"Bearer {raw}".encode()),
    ]
    answers = await asyncio.gather(
        *(call(f"/api/v1/sessions/{s.id}/runs/", [payload], headers) for s in sessions)
    )
    assert [status for status, _, _ in answers] == [201, 201, 201]
    assert most == 1
