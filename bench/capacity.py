"""Capacity: 50 chats at once against one alone, on one goaai server, and its pages meanwhile.

One daphne server (as ``make run`` starts it: SQLite, the in-memory channel layer,
the thread executor, ``DEBUG`` off) talks to a model provider on 127.0.0.1 that
takes 2 s to stream every answer (bench/slow_provider.py). A chat is a user with a
session open on its live stream, a WebSocket as the chat page opens it
(``/ws/sessions/<id>/?batch=1``; ``--stream sse`` for the Server-Sent Events of
``GET /api/v1/sessions/<id>/events/stream/``), who posts a message (``POST
/api/v1/sessions/<id>/runs/``) and waits for the run's end on the stream. Each round
times one chat alone, then ``--chats`` chats of as many users started at once (from
the first POST until the last run ended), while another user's client requests the
sessions list, a session and ``/healthz`` in a loop from a process of its own; the
same pages are timed with the server idle in the same round. Printed: the seconds of
each and their ratio (target at most 1.5), the runs completed, the pages' p50/p99
idle and during the chats (target p99 at most 100 ms), and what explains them: when
the model requests began and ended, the server's CPU time, and with ``--sql-log``
how long transactions waited for and held the database.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from _common import DEFAULT_POSTGRES, ROOT, create_database, free_port, own_name
from _common import server_environment as common_environment
from api_throughput import stop, wait_ready
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as websocket_connect

PROVIDER_KEY_ENV = "GOAAI_BENCH_PROVIDER_KEY"
AGENT = "capacity"
MESSAGE = "Tell me about capacity."
ENDED = {"run.completed", "run.failed", "run.canceled", "run.timed_out"}
# The user whose pages are timed has a full page of sessions (the API pages by 50).
HISTORY_SESSIONS = 50
TARGET_RATIO = 1.5
TARGET_P99 = 0.100


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=50, help="chats started at once")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (one alone, then the chats)")
    parser.add_argument("--answer-seconds", type=float, default=2.0, help="the model's answer")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks in an answer")
    parser.add_argument("--idle-seconds", type=float, default=4.0, help="pages timed idle")
    parser.add_argument(
        "--stream",
        choices=["websocket", "sse"],
        default="websocket",
        help="how each chat follows its session: a WebSocket as the chat page opens it "
        "(?batch=1), or Server-Sent Events",
    )
    parser.add_argument(
        "--page-interval", type=float, default=0.25, help="seconds between page requests"
    )
    parser.add_argument(
        "--executor-threads",
        type=int,
        help="GOAAI_EXECUTOR_THREADS for the server (default: the setting's default)",
    )
    parser.add_argument(
        "--asgi-threads", type=int, help="ASGI_THREADS for the server (default: asgiref's)"
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another variable for the server, e.g. DATABASE_POOL_MAX=80 (repeatable)",
    )
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="sqlite: the embedded default; postgres: a fresh database on --postgres",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL server URL; the benchmark makes a database of its own on it",
    )
    parser.add_argument(
        "--sql-log",
        action="store_true",
        help="time the server's SQL statements and its waits to begin a transaction",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="the server's sys.setswitchinterval (Python's default is 0.005 s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file and the logs")
    return parser.parse_args()


# The database, the users and their tokens (in this process, before the server starts)


@dataclass
class User:
    name: str
    token: str


def fresh_database(args: argparse.Namespace, folder: Path) -> str:
    if args.db == "sqlite":
        return f"sqlite:///{folder}/bench.sqlite3"
    return create_database(args.postgres, own_name("capacity"), keep=args.keep)


def setup_database(url: str, chats: int) -> tuple[list[User], User]:
    os.environ.update(
        DATABASE_URL=url, DJANGO_SETTINGS_MODULE="goaai.settings", LOG_LEVEL="WARNING", DEBUG="0"
    )
    os.environ.pop("REDIS_URL", None)
    os.environ.pop("DATABASE_POOL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    import sessions_app
    from sessions_app.services import api_token_create

    if not Path(str(sessions_app.__file__)).resolve().is_relative_to(ROOT):
        sys.exit(f"goaai's apps come from {sessions_app.__file__}, not from {ROOT}")
    call_command("migrate", verbosity=0)
    users = []
    for name in [f"chat{i:02d}" for i in range(chats)] + ["reader"]:
        # No password: these users only ever send their API token.
        user = get_user_model().objects.create_user(name, password=None)
        _, raw = api_token_create(user_id=user.pk, name="capacity")
        users.append(User(name, raw))
    return users[:-1], users[-1]


# The provider and the server


def start_provider(args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen[str], int]:
    command = [sys.executable, str(ROOT / "bench" / "slow_provider.py")]
    command += ["--seconds", str(args.answer_seconds), "--chunks", str(args.chunks)]
    with log.open("w") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("ready "):
        stop(process)  # type: ignore[arg-type]
        raise RuntimeError(f"the provider did not start:\n{log.read_text()}")
    return process, int(line.split()[1])


def provider_stats(port: int, *, reset: bool = False) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/stats?reset=1" if reset else "/stats")
        return dict(json.loads(connection.getresponse().read()))
    finally:
        connection.close()


def server_environment(
    url: str, provider_port: int, args: argparse.Namespace, sql_log: Path
) -> dict[str, str]:
    profiles = {
        "local": {
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{provider_port}/v1",
            "api_key_env": PROVIDER_KEY_ENV,
        }
    }
    env = common_environment(
        url,
        drop=frozenset({"GOAAI_EXECUTOR_THREADS", "ASGI_THREADS"}),
        GOAAI_EXECUTOR="thread",
        GOAAI_AGENTS="bench.capacity_agent.CAPACITY",
        GOAAI_MODEL_PROFILES=json.dumps(profiles),
        **{PROVIDER_KEY_ENV: "bench-provider-key"},
    )
    if args.executor_threads is not None:
        env["GOAAI_EXECUTOR_THREADS"] = str(args.executor_threads)
    if args.asgi_threads is not None:
        env["ASGI_THREADS"] = str(args.asgi_threads)
    if args.sql_log or args.switch_interval is not None:
        # goaai's settings with the diagnostics asked for (bench/capacity_settings.py).
        env["DJANGO_SETTINGS_MODULE"] = "bench.capacity_settings"
        if args.sql_log:
            env["GOAAI_BENCH_SQL_LOG"] = str(sql_log)
        if args.switch_interval is not None:
            env["GOAAI_BENCH_SWITCH_INTERVAL"] = str(args.switch_interval)
    for setting in args.server_env:
        name, equals, value = setting.partition("=")
        if not equals:
            sys.exit(f"--server-env takes NAME=VALUE, not {setting!r}")
        env[name] = value
    return env


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    command += ["-v", "0", "goaai.asgi:application"]
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine spent busy and in all, over every core."""
    # user, nice, system, idle, iowait, irq, softirq, steal (guest time is in user's)
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), sum(ticks) / os.sysconf("SC_CLK_TCK")


# HTTP


def call(
    port: int, token: str, method: str, path: str, body: object = None
) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request(method, path, None if body is None else json.dumps(body), headers)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    return response.status, json.loads(raw) if raw else {}


def create_session(port: int, user: User, title: str) -> str:
    status, body = call(
        port, user.token, "POST", "/api/v1/sessions/", {"agent": AGENT, "title": title}
    )
    if status != 201:
        raise RuntimeError(f"creating a session for {user.name}: {status} {body}")
    return str(body["id"])


class Chat:
    """One user's chat: the session's live stream open, a connection for the POST
    ready, as a browser has them before its user sends a message."""

    def __init__(self, port: int, user: User, session: str, way: str = "websocket") -> None:
        self.port, self.user, self.session, self.way = port, user, session, way
        self.headers = {"Authorization": f"Bearer {user.token}"}
        self.stream = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.poster = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.events: http.client.HTTPResponse | None = None
        self.socket: ClientConnection | None = None
        self._socket_closing = contextlib.ExitStack()
        self.run = ""
        self.status = ""
        self.posted = self.answered = self.ended = 0.0
        self.error = ""

    def open(self) -> None:
        if self.way == "websocket":
            path = f"/ws/sessions/{self.session}/?batch=1"
            self.socket = self._socket_closing.enter_context(
                websocket_connect(
                    f"ws://127.0.0.1:{self.port}{path}",
                    additional_headers=self.headers,
                    open_timeout=120,
                    max_size=None,
                )
            )
            # Live once the backlog (none: a new session) is done.
            while json.loads(self.socket.recv(timeout=120))["type"] != "caught_up":
                pass
            self.poster.connect()
            return
        path = f"/api/v1/sessions/{self.session}/events/stream/"
        self.stream.request("GET", path, headers=self.headers)
        self.events = self.stream.getresponse()
        if self.events.status != 200:
            raise RuntimeError(f"{path}: {self.events.status} {self.events.read()[:300]!r}")
        # Live once the backlog (none: a new session) is done, as on the WebSocket.
        while (line := self.events.readline()) and line.strip() != b"event: caught_up":
            pass
        if not line:
            raise RuntimeError(f"{path}: the stream ended before it caught up")
        self.poster.connect()

    def send(self) -> None:
        """POST the message, then read the stream until the run's end."""
        self.posted = time.perf_counter()
        body = json.dumps({"input": MESSAGE})
        headers = {**self.headers, "Content-Type": "application/json"}
        self.poster.request("POST", f"/api/v1/sessions/{self.session}/runs/", body, headers)
        response = self.poster.getresponse()
        answer = json.loads(response.read())
        self.answered = time.perf_counter()
        if response.status != 201:
            self.error = f"POST answered {response.status}: {answer}"
            return
        self.run = str(answer["id"])
        self.status, self.ended = self._wait_end()

    def _wait_end(self) -> tuple[str, float]:
        if self.socket is not None:
            return self._socket_end(self.socket)
        assert self.events is not None, "open() first"
        event = ""
        while line := self.events.readline():
            if line.startswith(b"event: "):
                event = line[7:].strip().decode()
            elif (
                line.startswith(b"data: ")
                and event in ENDED
                and json.loads(line[6:]).get("run") == self.run
            ):
                return event.removeprefix("run."), time.perf_counter()
        self.error = "the event stream ended before the run did"
        return "", time.perf_counter()

    def _socket_end(self, socket: ClientConnection) -> tuple[str, float]:
        try:
            while True:
                frame = json.loads(socket.recv(timeout=120))
                for event in frame.get("events", ()):
                    if event["type"] in ENDED and event.get("run") == self.run:
                        return event["type"].removeprefix("run."), time.perf_counter()
        except (WebSocketException, TimeoutError) as exc:
            self.error = f"the WebSocket ended before the run did: {exc!r}"
            return "", time.perf_counter()

    def close(self) -> None:
        self._socket_closing.close()
        self.stream.close()
        self.poster.close()

    @property
    def seconds(self) -> float:
        return self.ended - self.posted


# The page reader: a process of its own, so that the chats' client threads do not
# delay its requests in this process.


def read_pages(pipe: Connection, port: int, token: str, paths: list[str], interval: float) -> None:
    """Between "start" and "stop" from ``pipe``, request ``paths`` in turn, one every
    ``interval`` seconds on a keep-alive connection; answer (path, status, seconds)."""
    headers = {"Authorization": f"Bearer {token}"}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while (command := pipe.recv()) != "quit":
        assert command == "start"
        samples: list[tuple[str, int, float]] = []
        number = 0
        while not pipe.poll():
            path = paths[number % len(paths)]
            number += 1
            began = time.perf_counter()
            try:
                connection.request("GET", path, headers=headers)
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                connection.close()
                status = 0
            samples.append((path, status, time.perf_counter() - began))
            time.sleep(max(0.0, began + interval - time.perf_counter()))
        assert pipe.recv() == "stop"
        pipe.send(samples)
    connection.close()


class Reader:
    def __init__(self, port: int, token: str, paths: list[str], interval: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.process = context.Process(
            target=read_pages, args=(child, port, token, paths, interval), daemon=True
        )
        self.process.start()

    def start(self) -> None:
        self.pipe.send("start")

    def stop(self) -> list[tuple[str, int, float]]:
        self.pipe.send("stop")
        return list(self.pipe.recv())

    def window(self, seconds: float) -> list[tuple[str, int, float]]:
        self.start()
        time.sleep(seconds)
        return self.stop()

    def quit(self) -> None:
        self.pipe.send("quit")
        self.process.join(timeout=10)


# The measurement


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value that at least ``q`` of them do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Burst:
    wall: float
    cpu: float  # the server's CPU seconds meanwhile
    machine_busy: float  # the share of all cores busy meanwhile, every process included
    others_cpu: float  # the benchmark's clients' and provider's CPU seconds
    first_post: float
    window: tuple[float, float]  # Unix seconds
    chats: list[Chat]
    began: list[float]  # model requests, seconds after the first POST
    ended: list[float]
    peak: int

    @property
    def completed(self) -> int:
        return sum(chat.status == "completed" for chat in self.chats)


@dataclass
class Results:
    single: list[float] = field(default_factory=list)
    bursts: list[Burst] = field(default_factory=list)
    idle: list[tuple[str, int, float]] = field(default_factory=list)
    busy: list[tuple[str, int, float]] = field(default_factory=list)


def one_chat(port: int, user: User, session: str, way: str) -> float:
    chat = Chat(port, user, session, way)
    try:
        chat.open()
        chat.send()
    finally:
        chat.close()
    if chat.error or chat.status != "completed":
        raise RuntimeError(f"the single chat did not complete: {chat.status} {chat.error}")
    return chat.seconds


def burst(
    server: int,
    port: int,
    provider: int,
    users: list[User],
    sessions: list[str],
    reader: Reader,
    others: list[int],
    way: str,
) -> tuple[Burst, list[tuple[str, int, float]]]:
    """``chats`` started at once; ``others`` are the benchmark's other processes
    (this one, the page reader, the provider), whose CPU time is reported too."""
    chats = [Chat(port, user, session, way) for user, session in zip(users, sessions, strict=True)]
    released: list[float] = []

    def release() -> None:
        # Run by one thread once all have arrived, just before any of them goes on.
        released.extend((time.perf_counter(), time.time()))

    gate = threading.Barrier(len(chats) + 1, action=release, timeout=120)
    threads = [threading.Thread(target=chat_thread, args=(chat, gate)) for chat in chats]
    for thread in threads:
        thread.start()
    provider_stats(provider, reset=True)
    gate.wait()
    first_post, first_post_clock = released
    cpu, machine = cpu_seconds(server), machine_seconds()
    others_cpu = sum(map(cpu_seconds, others))
    reader.start()
    for thread in threads:
        thread.join(timeout=300)
    wall = max((chat.ended for chat in chats if chat.ended), default=first_post) - first_post
    cpu = cpu_seconds(server) - cpu
    others_cpu = sum(map(cpu_seconds, others)) - others_cpu
    last_end = time.time()
    busy, total = (b - a for a, b in zip(machine, machine_seconds(), strict=True))
    samples = reader.stop()
    for chat in chats:
        chat.close()
    stats = provider_stats(provider)
    result = Burst(
        wall=wall,
        cpu=cpu,
        machine_busy=busy / total if total else 0.0,
        others_cpu=others_cpu,
        first_post=first_post,
        window=(first_post_clock, last_end),
        chats=chats,
        began=[t - first_post_clock for t in stats["began"]],
        ended=[t - first_post_clock for t in stats["ended"]],
        peak=int(stats["peak"]),
    )
    check_runs(port, chats)
    return result, samples


def check_runs(port: int, chats: list[Chat]) -> None:
    """The API must say of each run what its stream said."""
    for chat in chats:
        if chat.run and chat.status:
            _, run = call(port, chat.user.token, "GET", f"/api/v1/runs/{chat.run}/")
            if run.get("status") != chat.status:
                chat.error = f"the stream said {chat.status}, the API says {run.get('status')}"


def chat_thread(chat: Chat, gate: threading.Barrier) -> None:
    """Open the chat, wait for every other to be open, then send its message."""
    try:
        chat.open()
    except Exception as exc:  # reported with the chat; the others go on
        chat.error = f"opening: {exc!r}"
        gate.wait()
        return
    gate.wait()
    try:
        chat.send()
    except Exception as exc:
        chat.error = f"{exc!r}"


def page_name(path: str) -> str:
    if path == "/api/v1/sessions/":
        return "sessions list"
    return "session detail" if path.startswith("/api/v1/sessions/") else path.strip("/")


def pages_line(label: str, samples: list[tuple[str, int, float]]) -> str:
    seconds = [s for _, _, s in samples]
    bad = sum(status != 200 for _, status, _ in samples)
    return (
        f"{label:24s} n {len(seconds):4d}  p50 {percentile(seconds, 0.5) * 1e3:7.1f} ms"
        f"  p99 {percentile(seconds, 0.99) * 1e3:7.1f} ms  max {max(seconds) * 1e3:7.1f} ms"
        f"  non-200 {bad}"
    )


def burst_lines(number: int, single: float, result: Burst) -> list[str]:
    chats = result.chats
    answered = sorted(c.answered - c.posted for c in chats if c.answered)
    ends = sorted(c.ended - result.first_post for c in chats if c.ended)
    errors = [f"{c.user.name}: {c.error}" for c in chats if c.error]
    lines = [
        f"  round {number}: one chat {single:5.2f} s   {len(chats)} chats {result.wall:5.2f} s"
        f"   ratio {result.wall / single:4.2f}x   completed {result.completed}/{len(chats)}",
        f"    run start POSTs answered in p50 {percentile(answered, 0.5) * 1e3:6.0f} ms,"
        f" max {answered[-1] * 1e3:6.0f} ms"
        if answered
        else "    no POST answered",
    ]
    if result.began:
        lines.append(
            f"    model requests: {len(result.began)}, at most {result.peak} at once; the first began"
            f" {min(result.began):5.2f} s after the first POST, the last {max(result.began):5.2f} s;"
            f" the last answer ended at {max(result.ended):5.2f} s"
        )
    if ends:
        lines.append(
            f"    runs ended between {ends[0]:5.2f} s and {ends[-1]:5.2f} s (on the streams)"
        )
    lines += [f"    {e}" for e in errors[:5]]
    return lines


def sql_line(log: Path, window: tuple[float, float]) -> str:
    """What the server's SQL log says of the transactions that began in ``window``:
    how long they waited to begin, and how long they then held the database (from
    the end of their ``BEGIN`` to the end of their commit, in the same thread)."""
    waits: list[float] = []
    holds: list[float] = []
    statements = 0
    begun: dict[str, float] = {}
    with log.open() as lines:
        for line in lines:
            ended, took, kind, thread = line.split()
            at = float(ended)
            if kind == "begin":
                begun[thread] = at
                if window[0] <= at <= window[1]:
                    waits.append(float(took))
            elif kind == "commit" and thread in begun:
                if window[0] <= begun[thread] <= window[1]:
                    holds.append(at - begun.pop(thread))
            elif window[0] <= at <= window[1]:
                statements += 1
    if not waits or not holds:
        # psycopg begins its transactions without a statement of their own.
        return f"    SQL: {statements} statements (no BEGIN to time)"

    def spread(values: list[float]) -> str:
        return (
            f"p50 {percentile(values, 0.5) * 1e3:.1f} ms, p99 {percentile(values, 0.99) * 1e3:.0f}"
            f" ms, max {max(values) * 1e3:.0f} ms, {sum(values):.2f} s in all"
        )

    return (
        f"    SQL: {statements} statements; {len(waits)} transactions waited to begin"
        f" {spread(waits)}; held the database {spread(holds)}"
    )


def measure(args: argparse.Namespace) -> Results:
    folder = Path(tempfile.mkdtemp(prefix="goaai-bench-capacity-"))
    provider = server = reader = None
    results = Results()
    try:
        url = fresh_database(args, folder)
        chat_users, reading_user = setup_database(url, args.chats)
        provider, provider_port = start_provider(args, folder / "provider.log")
        port, log = free_port(), folder / "server.log"
        sql_log = folder / "sql.log"
        env = server_environment(url, provider_port, args, sql_log)
        server = start_server(env, port, log)
        wait_ready(server, port, log)
        threads = env.get("GOAAI_EXECUTOR_THREADS", "default")
        asgi = env.get("ASGI_THREADS", "default")
        database = "SQLite" if args.db == "sqlite" else "PostgreSQL"
        extra = "".join(f", {setting}" for setting in args.server_env)
        print(
            f"daphne on 127.0.0.1:{port} ({database}, in-memory layer, thread executor:"
            f" GOAAI_EXECUTOR_THREADS {threads}, ASGI_THREADS {asgi}{extra}); provider on"
            f" 127.0.0.1:{provider_port}: {args.chunks} chunks over {args.answer_seconds:g} s;"
            f" chats follow their sessions by {'WebSocket' if args.stream == 'websocket' else 'SSE'}",
            flush=True,
        )
        history = [
            create_session(port, reading_user, f"history {i}") for i in range(HISTORY_SESSIONS)
        ]
        # Warm-up, and a session with a run for the session page.
        one_chat(port, reading_user, history[-1], args.stream)
        paths = ["/api/v1/sessions/", f"/api/v1/sessions/{history[-1]}/", "/healthz"]
        reader = Reader(port, reading_user.token, paths, args.page_interval)
        for number in range(1, args.rounds + 1):
            sessions = [create_session(port, u, f"round {number}") for u in chat_users]
            single_session = create_session(port, chat_users[0], f"round {number} alone")
            cpu = cpu_seconds(server.pid)
            results.idle += reader.window(args.idle_seconds)
            idle_cpu = (cpu_seconds(server.pid) - cpu) / args.idle_seconds
            cpu = cpu_seconds(server.pid)
            results.single.append(one_chat(port, chat_users[0], single_session, args.stream))
            single_cpu = cpu_seconds(server.pid) - cpu
            others = [os.getpid(), reader.process.pid or 0, provider.pid]
            result, samples = burst(
                server.pid, port, provider_port, chat_users, sessions, reader, others, args.stream
            )
            results.bursts.append(result)
            results.busy += samples
            lines = burst_lines(number, results.single[-1], result)
            lines.append(
                f"    server CPU: {idle_cpu:4.0%} of a core serving the pages alone;"
                f" {single_cpu:5.2f} s for the chat alone; {result.cpu:5.2f} s for the"
                f" {len(result.chats)} chats and the pages ({result.cpu / result.wall:4.0%} of a core;"
                f" all cores {result.machine_busy:4.0%} busy; the benchmark's clients and"
                f" provider {result.others_cpu:5.2f} s)"
            )
            if args.sql_log:
                lines.append(sql_line(sql_log, result.window))
            print("\n".join(lines), flush=True)
            print(f"    {pages_line('pages during the chats', samples)}", flush=True)
        return results
    except Exception:
        log = folder / "server.log"
        if log.exists():
            print(f"server log (end):\n{log.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        if reader is not None:
            reader.quit()
        if server is not None:
            stop(server)
            # Less the 401 that told wait_ready the server was up.
            text = "\n".join(
                line
                for line in (folder / "server.log").read_text(errors="replace").splitlines()
                if "Unauthorized: /api/v1/agents/" not in line
            ).strip()
            if text:
                print(f"server log (end):\n{text[-2000:]}", file=sys.stderr)
        if provider is not None:
            stop(provider)  # type: ignore[arg-type]
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def report(args: argparse.Namespace, results: Results) -> None:
    single = statistics.median(results.single)
    walls = [b.wall for b in results.bursts]
    ratios = [b.wall / s for b, s in zip(results.bursts, results.single, strict=True)]
    completed = sum(b.completed for b in results.bursts)
    total = sum(len(b.chats) for b in results.bursts)
    ratio = statistics.median(ratios)
    print(f"\nmedians of {args.rounds} rounds (ranges over the rounds)")
    print(
        f"  one chat alone          {single:6.2f} s  ({min(results.single):.2f}-{max(results.single):.2f})"
    )
    print(
        f"  {args.chats} chats at once       {statistics.median(walls):6.2f} s  ({min(walls):.2f}-{max(walls):.2f})"
    )
    verdict = "met" if ratio <= TARGET_RATIO else "not met"
    print(
        f"  ratio                   {ratio:6.2f}x  ({min(ratios):.2f}-{max(ratios):.2f}x; target <= {TARGET_RATIO}x: {verdict})"
    )
    print(f"  completed               {completed}/{total}")
    print("pages (the sessions list, a session, /healthz), all rounds together")
    print(f"  {pages_line('idle', results.idle)}")
    print(f"  {pages_line('during the chats', results.busy)}")
    for path in dict.fromkeys(p for p, _, _ in results.idle):
        for label, samples in (("idle", results.idle), ("during", results.busy)):
            mine = [s for s in samples if s[0] == path]
            if mine:
                print(f"    {pages_line(f'{page_name(path)} {label}', mine)}")
    idle99 = percentile([s for _, _, s in results.idle], 0.99)
    busy99 = percentile([s for _, _, s in results.busy], 0.99)
    verdict = "met" if busy99 <= TARGET_P99 else "not met"
    print(
        f"  p99 during / idle       {busy99 / idle99:6.2f}x  (p99 during {busy99 * 1e3:.1f} ms;"
        f" target <= {TARGET_P99 * 1e3:.0f} ms: {verdict})"
    )


def main() -> None:
    args = arguments()
    report(args, measure(args))


if __name__ == "__main__":
    main()
