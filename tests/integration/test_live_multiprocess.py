"""Live updates across processes: a run executed by a Celery worker reaches clients
on two other ASGI servers, complete and in order.

Real processes on 127.0.0.1: two Daphne servers and one Celery worker, sharing
Redis (channel layer and broker, a database of its own) and this test's PostgreSQL
database. Client A watches the session on server 1, clients B and C on server 2;
the run is started through the REST API of server 1 and executed by the worker.
The ``paced`` agent (live_support.py) blocks on gates the test opens, so client C
disconnects at a known point, misses events, and reconnects with its last sequence
number while more events are being written.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from django.db import connection

from runs_app.models import Run
from sessions_app.models import RunEvent
from sessions_app.services import api_token_create
from tests.factories import SessionFactory
from tests.integration.live_support import FINAL_ANSWER, GATES, Closed, WebSocket

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
# A Redis database of its own: the other Redis tests use 15.
REDIS_URL = os.environ.get("REDIS_LIVE_TEST_URL", "redis://127.0.0.1:6379/14")
STARTUP_TIMEOUT = 30
STEP_TIMEOUT = 20

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _database_url() -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    host = f"{s.get('HOST') or HOST}:{s.get('PORT') or 5432}"
    return f"postgres://{user}{password}@{host}/{s['NAME']}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Stack:
    """The processes of the test and their logs."""

    tmp: Path
    gates: Path
    ports: list[int] = field(default_factory=list)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, command: list[str], env: dict[str, str]) -> None:
        # The commands are built by this module from fixed arguments.
        self.processes[name] = subprocess.Popen(  # noqa: S603
            command,
            cwd=ROOT,
            env=env,
            stdout=(self.tmp / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
            # A group of its own, so the finalizer can stop it and anything it forked.
            start_new_session=True,
        )

    def logs(self) -> str:
        return "\n".join(
            f"----- {name} (exit {process.poll()}) -----\n"
            + (self.tmp / f"{name}.log").read_text(errors="replace")[-4000:]
            for name, process in self.processes.items()
        )

    def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(f"{name} exited while waiting for {what}.\n{self.logs()}")
            if predicate():
                return
            time.sleep(0.1)
        pytest.fail(f"Timed out waiting for {what}.\n{self.logs()}")

    def open_gate(self, n: int) -> None:
        (self.gates / f"gate-{n}").touch()

    def stop(self) -> None:
        # Open every gate first: a blocked tool would hold up the worker's shutdown.
        for n in range(1, GATES + 1):
            self.open_gate(n)
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)


@pytest.fixture
def stack(tmp_path: Path, transactional_db: None) -> Iterator[Stack]:
    """Two ASGI servers and one Celery worker, stopped even when the test fails
    (before the test database is emptied, which their connections would block)."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    gates = tmp_path / "gates"
    gates.mkdir()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": _database_url(),
        "DATABASE_POOL": "0",
        "REDIS_URL": REDIS_URL,
        "GOAAI_EXECUTOR": "celery",
        "GOAAI_REAPER_INTERVAL": "0",
        "GOAAI_AGENTS": "tests.integration.live_support.PACED_AGENT",
        "GOAAI_LIVE_GATE_DIR": str(gates),
        "SECRET_KEY": "live-multiprocess-test-" + "k" * 32,
        "PYTHONPATH": str(ROOT),
    }
    running = Stack(tmp=tmp_path, gates=gates)
    try:
        for name in ("server1", "server2"):
            port = _free_port()
            running.ports.append(port)
            command = [str(BIN / "daphne"), "-b", HOST, "-p", str(port), "goaai.asgi:application"]
            running.start(name, command, env)
        running.start(
            "worker",
            [
                str(BIN / "celery"),
                *("-A", "goaai", "worker", "--pool=threads", "--concurrency=2"),
                *("--loglevel=WARNING", "--without-mingle", "--without-gossip"),
            ],
            env,
        )
        for port in running.ports:
            running.wait_for(lambda port=port: _accepts(port), f"the server on port {port}")
        client = Celery("goaai-live-test", broker=REDIS_URL)
        try:
            running.wait_for(lambda: bool(client.control.ping(timeout=0.5)), "the worker")
        finally:
            client.close()
        yield running
    finally:
        running.stop()


@dataclass
class Client:
    """One WebSocket subscriber of the session and everything it received."""

    name: str
    socket: WebSocket
    events: list[dict[str, Any]] = field(default_factory=list)
    deltas: list[str] = field(default_factory=list)
    caught_up: int | None = None
    closed: int | None = None
    # Set once the connection has ended, whoever closed it.
    ended: bool = False
    frames: list[dict[str, Any]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def pump(self, changed: asyncio.Condition) -> None:
        try:
            while True:
                frame = await self.socket.recv()
                self.frames.append(frame)
                if frame["type"] == "event":
                    self.events.append(frame["event"])
                elif frame["type"] == "delta":
                    self.deltas.append(frame["text"])
                elif frame["type"] == "caught_up":
                    self.caught_up = frame["seq"]
                async with changed:
                    changed.notify_all()
        except Closed as closed:
            self.closed = closed.code
            self.ended = True
            async with changed:
                changed.notify_all()

    def count(self, type: str) -> int:
        return sum(1 for e in self.events if e["type"] == type)


class Watchers:
    """The test's clients, and waiting on what they received."""

    def __init__(self, stack: Stack, session_id: str, token: str) -> None:
        self.stack = stack
        self.session_id = session_id
        self.token = token
        self.changed = asyncio.Condition()
        self.clients: list[Client] = []

    async def connect(self, name: str, server: int, after: int | None = None) -> Client:
        path = f"/ws/sessions/{self.session_id}/?token={self.token}"
        if after is not None:
            path += f"&after={after}"
        socket_ = await WebSocket.connect(HOST, self.stack.ports[server], path)
        client = Client(name, socket_)
        client.task = asyncio.create_task(client.pump(self.changed))
        self.clients.append(client)
        return client

    async def until(self, predicate: Callable[[], bool], what: str) -> None:
        async def wait() -> None:
            async with self.changed:
                await self.changed.wait_for(predicate)

        try:
            await asyncio.wait_for(wait(), STEP_TIMEOUT)
        except TimeoutError:
            received = {c.name: [(e["seq"], e["type"]) for e in c.events] for c in self.clients}
            closed = {c.name: c.closed for c in self.clients}
            pytest.fail(
                f"Timed out waiting for {what}.\nReceived: {received}\nClosed: {closed}\n"
                + self.stack.logs()
            )

    async def close_all(self) -> None:
        for client in self.clients:
            await client.socket.close()
            if client.task is not None:
                client.task.cancel()


def _start_run(port: int, session_id: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{HOST}:{port}/api/v1/sessions/{session_id}/runs/",
        data=json.dumps({"input": "open the gates"}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=STEP_TIMEOUT) as response:  # noqa: S310
        assert response.status == 201
        return json.loads(response.read())


async def _scenario(stack: Stack, session_id: str, token: str) -> dict[str, Any]:
    watchers = Watchers(stack, session_id, token)
    try:
        a = await watchers.connect("A", server=0)
        b = await watchers.connect("B", server=1)
        c = await watchers.connect("C", server=1)
        await watchers.until(lambda: all(x.caught_up is not None for x in (a, b, c)), "caught_up")

        run = await asyncio.to_thread(_start_run, stack.ports[0], session_id, token)

        # The worker is now blocked in gate 1: C has seen the run start, and leaves.
        await watchers.until(lambda: c.count("tool_call.started") == 1, "C to see gate 1 start")
        await c.socket.close()
        await watchers.until(lambda: c.ended, "C to close")
        last = c.events[-1]["seq"]

        # Events written while C is away.
        stack.open_gate(1)
        await watchers.until(lambda: a.count("tool_call.started") == 2, "A to see gate 2 start")
        assert a.events[-1]["seq"] > last

        # C comes back with its last sequence; the run goes on while it catches up.
        c2 = await watchers.connect("C2", server=1, after=last)
        stack.open_gate(2)
        stack.open_gate(3)
        await watchers.until(
            lambda: all(x.count("run.completed") == 1 for x in (a, b, c2)), "the run to complete"
        )
        return {"run": run, "A": a, "B": b, "C": c, "C2": c2}
    finally:
        await watchers.close_all()


def test_a_run_on_a_worker_reaches_clients_on_two_servers_complete_and_in_order(stack, owner):
    session = SessionFactory(owner=owner, agent="paced")
    _, token = api_token_create(user_id=owner.pk, name="live test")

    try:
        seen = asyncio.run(_scenario(stack, str(session.id), token))
    except BaseException:
        print(stack.logs())  # shown with the failure
        raise
    a, b, c, c2 = seen["A"], seen["B"], seen["C"], seen["C2"]

    stored = [e.as_dict() for e in RunEvent.objects.filter(session=session).order_by("seq")]
    assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
    assert stored[-1]["type"] == "run.completed"
    # Several turns and tool calls: the stream had something to get wrong.
    assert sum(1 for e in stored if e["type"] == "tool_call.succeeded") == GATES
    # Both stayed-connected clients, on different servers, got every event in order.
    assert a.events == stored
    assert b.events == stored
    # C's first connection stopped mid-run; its second one resumed exactly after it.
    assert 0 < len(c.events) < len(stored)
    assert c2.caught_up is not None
    assert c2.caught_up >= c.events[-1]["seq"]
    assert c.events + c2.events == a.events
    # No client was told to resync or sent an error frame.
    assert not [f for x in (a, b, c2) for f in x.frames if f["type"] in ("resync", "error")]
    # Deltas are not stored, so they are checked apart: the streamed answer arrived
    # whole at the clients that were connected all along.
    assert "".join(a.deltas) == FINAL_ANSWER
    assert "".join(b.deltas) == FINAL_ANSWER
    run = Run.objects.get(pk=seen["run"]["id"])
    assert run.status == "completed"
    assert run.output == FINAL_ANSWER
