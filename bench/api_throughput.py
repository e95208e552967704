"""REST API throughput: goaai's endpoints against bare DRF views on the same server.

One ASGI server, daphne (as ``make run`` starts it) or uvicorn, serves goaai's URLs
and, under /bare/, minimal DRF views of the same shapes (bench/api_urls.py). wrk, a
separate process written in C, keeps ``--concurrency`` connections busy for
``--seconds`` per round, alternating goaai and bare rounds, and counts the answers by
status. Printed, per server: req/s of each and goaai / bare (higher is better for
goaai), and the 99th percentile of the answers' latency of each and goaai / bare
(lower is better), medians of the rounds.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from _common import (
    DEFAULT_POSTGRES,
    ROOT,
    free_port,
    fresh_database,
    private_redis,
    run_each_database,
    stop_process,
)
from _common import server_environment as common_environment

USERNAME, PASSWORD = "bench", "bench-password-42"
# Run starts go round-robin to this many sessions of each side, as many users do.
RUN_SESSIONS = 32
RUN_BODY = '{"input": "echo hi"}'
# Past the limits, run starts are 429s; these are high enough never to be reached.
RUN_RATE = "100000/s"
MARK = "GOAAI-BENCH"


@dataclass
class Operation:
    name: str
    method: str
    goaai: list[str]
    bare: list[str]
    expect: int = 200
    body: str | None = None
    goaai_sessions: list[str] = field(default_factory=list)


@dataclass
class Round:
    requests: int
    seconds: float
    statuses: dict[int, int]
    socket_errors: int
    p99_ms: float
    # The server process's CPU time (user and system) over the round, per request.
    cpu_ms: float = 0.0

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL server URL; the benchmark makes a database of its own on it",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per side and operation")
    parser.add_argument("--concurrency", type=int, default=8, help="open connections")
    parser.add_argument(
        "--only",
        default="",
        help="measure only these operations (comma-separated names, e.g. 'run start')",
    )
    parser.add_argument(
        "--server",
        choices=["daphne", "uvicorn", "both"],
        default="both",
        help="the ASGI server that serves both sides",
    )
    parser.add_argument(
        "--executor",
        choices=["thread", "celery"],
        default="thread",
        help="thread: the server executes the runs it starts (the default without Redis); "
        "celery: it queues them in Redis for workers (none runs here), as with REDIS_URL",
    )
    return parser.parse_args()


# The database and the server


def setup_django(url: str) -> None:
    """Django in this process, on the benchmark's database: migrate, add the user."""
    os.environ.update(
        DATABASE_URL=url,
        DATABASE_POOL="0",
        DJANGO_SETTINGS_MODULE="goaai.settings",
        LOG_LEVEL="WARNING",
        DEBUG="0",
    )
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    import sessions_app

    if not Path(str(sessions_app.__file__)).resolve().is_relative_to(ROOT):
        sys.exit(f"goaai's apps come from {sessions_app.__file__}, not from {ROOT}")
    call_command("migrate", verbosity=0)
    get_user_model().objects.create_user(USERNAME, password=PASSWORD)


def server_environment(url: str, args: argparse.Namespace) -> dict[str, str]:
    env = common_environment(
        url,
        DJANGO_SETTINGS_MODULE="bench.api_settings",
        GOAAI_EXECUTOR=args.executor,
        GOAAI_RUN_RATE_PER_USER=RUN_RATE,
        GOAAI_RUN_RATE_PER_TOKEN=RUN_RATE,
        # The bare run starts leave pending rows; the reaper would execute them.
        GOAAI_REAPER_INTERVAL="0",
    )
    if args.executor == "celery":
        env["REDIS_URL"] = args.redis
    return env


def server_command(server: str, port: int) -> list[str]:
    if server == "daphne":
        command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        return [*command, "-v", "0", "goaai.asgi:application"]
    # Channels' router speaks no lifespan protocol; access logs off, as daphne's -v 0.
    command = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--lifespan", "off", "--no-access-log", "--log-level", "warning"]
    return [*command, "goaai.asgi:application"]


def start_server(
    url: str, port: int, log: Path, args: argparse.Namespace
) -> subprocess.Popen[bytes]:
    command = server_command(args.server, port)
    with log.open("wb") as out:
        return subprocess.Popen(
            command, cwd=ROOT, env=server_environment(url, args), stdout=out, stderr=out
        )


def wait_ready(server: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited:\n{log.read_text()[-3000:]}")
        try:
            status, _, _ = request(port, "GET", "/api/v1/agents/")
            if status == 401:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not answer within 60 s")


def stop(process: subprocess.Popen[bytes]) -> None:
    stop_process(process, timeout=15)


# HTTP for the set-up and the checks


def request(
    port: int, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
) -> tuple[int, object, int]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        payload = None if body is None else json.dumps(body) if not isinstance(body, str) else body
        sent = {"Content-Type": "application/json", **(headers or {})}
        connection.request(method, path, body=payload, headers=sent)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    return response.status, json.loads(raw) if raw else None, len(raw)


class Api:
    def __init__(self, port: int) -> None:
        self.port = port
        self.token = ""

    def login(self) -> None:
        basic = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
        status, body, _ = request(
            self.port,
            "POST",
            "/api/v1/auth/tokens/",
            {"name": "bench"},
            {"Authorization": f"Basic {basic}"},
        )
        assert status == 201, (status, body)
        self.token = body["token"]  # type: ignore[index]

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object, int]:
        return request(self.port, method, path, body, {"Authorization": f"Bearer {self.token}"})


def fixtures() -> tuple[str, str, list[str], list[str]]:
    """Made in this process through goaai's runtime: a session with two scripted
    runs (two turns and one tool call each) and its memory; sessions for run starts."""
    from django.contrib.auth import get_user_model

    from goaai.runtime import rt

    rt.configure(executor="inline")
    user = get_user_model().objects.get(username=USERNAME)
    session = rt.create_session(owner=user, agent="assistant", title="Colours").id
    for text in ("remember my favourite colour is green", "calculate 2 * (3 + 4)"):
        run = rt.run("assistant", text, session=session)
        assert run.status == "completed", run
    starts = [
        str(rt.create_session(owner=user, title=f"runs {i}").id) for i in range(2 * RUN_SESSIONS)
    ]
    return str(session), str(run.id), starts[:RUN_SESSIONS], starts[RUN_SESSIONS:]


def operations() -> list[Operation]:
    session, run, goaai_runs, bare_runs = fixtures()
    query = f"?key={quote('favourite colour')}&session={session}"
    return [
        Operation(
            "session detail",
            "GET",
            [f"/api/v1/sessions/{session}/"],
            [f"/bare/sessions/{session}/"],
        ),
        Operation("sessions list", "GET", ["/api/v1/sessions/"], ["/bare/sessions/"]),
        Operation("run detail", "GET", [f"/api/v1/runs/{run}/"], [f"/bare/runs/{run}/"]),
        Operation(
            "memory resolve",
            "GET",
            [f"/api/v1/memory/resolve/{query}"],
            [f"/bare/memory/resolve/{query}"],
        ),
        Operation(
            "run start",
            "POST",
            [f"/api/v1/sessions/{s}/runs/" for s in goaai_runs],
            [f"/bare/sessions/{s}/runs/" for s in bare_runs],
            expect=201,
            body=RUN_BODY,
            goaai_sessions=goaai_runs,
        ),
    ]


# Fields whose content is free-form JSON (or absent on one side while the row has
# no such thing): their inside is not part of the shape.
FREE_FORM = ("policy", "metadata", "labels", "arguments", "result", "request_messages")
FREE_FORM += ("response.tool_calls", "value", "awaiting", "error", "stopped_by", "feedback")


def shape(value: object, path: str = "") -> set[str]:
    """The paths of the keys of a JSON answer (a list's by its first item)."""
    if isinstance(value, list):
        return shape(value[0], f"{path}[].") if value else set()
    if not isinstance(value, dict) or path.rstrip(".").endswith(FREE_FORM):
        return set()
    found = set()
    for key, inner in value.items():
        found.add(path + key)
        found |= shape(inner, f"{path}{key}.")
    return found


def check(api: Api, operation: Operation) -> str:
    """One request of each side, which must answer as expected, with answers of
    the same shape (the same keys); their body sizes."""
    sizes, shapes = [], []
    for path in (operation.goaai[0], operation.bare[0]):
        body = None if operation.body is None else json.loads(operation.body)
        status, answer, size = api.call(operation.method, path, body)
        if status != operation.expect:
            raise RuntimeError(f"{operation.method} {path}: {status} {answer}")
        sizes.append(size)
        shapes.append(shape(answer))
    if shapes[0] != shapes[1]:
        raise RuntimeError(
            f"{operation.name}: the bare view's answer is not of goaai's shape: goaai only "
            f"{sorted(shapes[0] - shapes[1])}, bare only {sorted(shapes[1] - shapes[0])}"
        )
    return f"{operation.name:15s} body goaai {sizes[0]:6d} B  bare {sizes[1]:6d} B"


# Load


def lua(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


LUA_COUNTS = """
counts = {}
local threads = {}
function setup(thread) table.insert(threads, thread) end
function response(status, headers, body) counts[status] = (counts[status] or 0) + 1 end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("%s requests %d %d %d %d\\n", MARK, summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout, latency:percentile(99)))
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("counts")) do
      io.write(string.format("%s status %d %d\\n", MARK, status, n))
    end
  end
end
"""


def lua_script(operation: Operation, paths: list[str], token: str) -> str:
    lines = [
        f"MARK = {lua(MARK)}",
        f"wrk.method = {lua(operation.method)}",
        f'wrk.headers["Authorization"] = {lua("Bearer " + token)}',
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    if operation.body is not None:
        lines.append(f"wrk.body = {lua(operation.body)}")
    if len(paths) == 1:
        lines.append(f"wrk.path = {lua(paths[0])}")
    else:
        lines.append("paths = {" + ", ".join(lua(p) for p in paths) + "}")
        lines.append("local i = 0")
        lines.append("function request() i = i % #paths + 1 return wrk.format(nil, paths[i]) end")
    return "\n".join(lines) + LUA_COUNTS


def parse_wrk(output: str) -> Round:
    requests, micros, errors, p99 = 0, 0, 0, 0
    statuses: dict[int, int] = {}
    for line in output.splitlines():
        parts = line.split()
        if not parts or parts[0] != MARK:
            continue
        if parts[1] == "requests":
            requests, micros, errors = int(parts[2]), int(parts[3]), int(parts[4])
            p99 = int(parts[5])
        elif parts[1] == "status":
            statuses[int(parts[2])] = statuses.get(int(parts[2]), 0) + int(parts[3])
    if not micros or sum(statuses.values()) != requests:
        raise RuntimeError(
            f"wrk's summary is missing or its status counts do not add up:\n{output}"
        )
    return Round(requests, micros / 1e6, statuses, errors, p99 / 1000)


def load(port: int, script: Path, seconds: float, concurrency: int) -> Round:
    command = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s"]
    command += ["--timeout", "10s", "-s", str(script), f"http://127.0.0.1:{port}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed: {done.stderr}")
    return parse_wrk(done.stdout)


def drain(sessions: list[str], limit: float = 300.0) -> float:
    """Wait until the runs goaai started have all ended; how long that took."""
    from runs_app.models import Run

    start = time.monotonic()
    waiting = Run.objects.filter(session_id__in=sessions, status__in=["pending", "running"])
    while waiting.exists():
        if time.monotonic() - start > limit:
            raise RuntimeError("runs started by the benchmark did not end")
        time.sleep(0.2)
    return time.monotonic() - start


# The measurement


@dataclass
class Results:
    rates: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    cpus: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    p99s: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    bad: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    drains: list[float] = field(default_factory=list)

    def add(self, operation: Operation, side: str, result: Round) -> None:
        self.rates.setdefault((operation.name, side), []).append(result.rate)
        self.cpus.setdefault((operation.name, side), []).append(result.cpu_ms)
        self.p99s.setdefault((operation.name, side), []).append(result.p99_ms)
        bad = self.bad.setdefault((operation.name, side), {})
        for code, n in result.statuses.items():
            if code != operation.expect:
                bad[code] = bad.get(code, 0) + n
        if result.socket_errors:
            bad[0] = bad.get(0, 0) + result.socket_errors


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    def __init__(
        self, port: int, api: Api, folder: Path, args: argparse.Namespace, pid: int
    ) -> None:
        self.port, self.api, self.folder, self.args, self.pid = port, api, folder, args, pid
        self.results = Results()

    def script(self, operation: Operation, side: str) -> Path:
        name = re.sub(r"\W", "_", operation.name)
        path = self.folder / f"{name}-{side}.lua"
        paths = operation.goaai if side == "goaai" else operation.bare
        path.write_text(lua_script(operation, paths, self.api.token))
        return path

    def one(self, operation: Operation, side: str, seconds: float) -> Round:
        script = self.script(operation, side)
        before = cpu_seconds(self.pid)
        result = load(self.port, script, seconds, self.args.concurrency)
        if result.requests:
            result.cpu_ms = (cpu_seconds(self.pid) - before) * 1000 / result.requests
        if side == "goaai" and operation.goaai_sessions and self.args.executor == "thread":
            self.results.drains.append(drain(operation.goaai_sessions))
        return result

    def rounds(self, operations: list[Operation]) -> None:
        for operation in operations:  # warm-up: caches, prepared statements
            for side in ("goaai", "bare"):
                self.one(operation, side, 1)
        for number in range(self.args.rounds):
            sides = ("goaai", "bare") if number % 2 == 0 else ("bare", "goaai")
            for operation in operations:
                measured = {}
                for side in sides:
                    measured[side] = self.one(operation, side, self.args.seconds)
                    self.results.add(operation, side, measured[side])
                goaai, bare = measured["goaai"], measured["bare"]
                print(
                    f"  round {number + 1}  {operation.name:15s} goaai {goaai.rate:8.1f}"
                    f"  bare {bare.rate:8.1f} req/s  {goaai.rate / bare.rate:5.2f}x"
                    f"   p99 {goaai.p99_ms:6.1f} / {bare.p99_ms:6.1f} ms"
                    f"  {goaai.p99_ms / bare.p99_ms:5.2f}x"
                    f"   server CPU {goaai.cpu_ms:5.2f} / {bare.cpu_ms:5.2f} ms a request",
                    flush=True,
                )


def describe(bad: dict[int, int]) -> str:
    if not bad:
        return "none"
    return ", ".join(f"{code or 'socket error'} x{n}" for code, n in sorted(bad.items()))


def report(db: str, server: str, operations: list[Operation], results: Results) -> None:
    print(
        f"\n{db}, {server}: medians of the rounds; req/s (goaai / bare: higher is better for"
        " goaai), p99 latency (goaai / bare: lower is better)"
    )
    print(
        f"  {'operation':15s} {'goaai':>9s} {'bare':>9s} {'goaai/bare':>11s}"
        f"  {'p99 goaai':>10s} {'bare':>8s} {'ratio':>6s}  non-2xx"
    )
    for operation in operations:
        goaai = results.rates[(operation.name, "goaai")]
        bare = results.rates[(operation.name, "bare")]
        ratios = [g / b for g, b in zip(goaai, bare, strict=True)]
        p99_goaai = results.p99s[(operation.name, "goaai")]
        p99_bare = results.p99s[(operation.name, "bare")]
        p99_ratios = [g / b for g, b in zip(p99_goaai, p99_bare, strict=True)]
        bad = {side: describe(results.bad[(operation.name, side)]) for side in ("goaai", "bare")}
        print(
            f"  {operation.name:15s} {statistics.median(goaai):9.1f} {statistics.median(bare):9.1f}"
            f" {statistics.median(ratios):10.2f}x  ({min(ratios):.2f}-{max(ratios):.2f}x)"
            f"  {statistics.median(p99_goaai):7.1f} ms {statistics.median(p99_bare):5.1f} ms"
            f" {statistics.median(p99_ratios):5.2f}x  goaai {bad['goaai']}, bare {bad['bare']}"
        )
    print("  server CPU a request, medians (goaai / bare: lower is better for goaai)")
    for operation in operations:
        cpu = {side: results.cpus[(operation.name, side)] for side in ("goaai", "bare")}
        cpu_ratios = [g / b for g, b in zip(cpu["goaai"], cpu["bare"], strict=True) if b]
        print(
            f"  {operation.name:15s} {statistics.median(cpu['goaai']):6.2f} ms"
            f" {statistics.median(cpu['bare']):6.2f} ms"
            f" {statistics.median(cpu_ratios) if cpu_ratios else 0:6.2f}x"
        )
    if results.drains:
        print(
            f"  the runs goaai started in a round ended at most {max(results.drains):.1f} s after it"
            " (waited for before the next round)"
        )


def measure(db: str, args: argparse.Namespace) -> None:
    # With Celery, the server queues its runs in a redis-server of the benchmark's own.
    with private_redis() if args.executor == "celery" else contextlib.nullcontext("") as redis:
        args.redis = redis
        folder = Path(tempfile.mkdtemp(prefix="goaai-bench-api-"))
        try:
            url = fresh_database(db, args.postgres, "api")
            setup_django(url)
            ops = operations()
            if args.only:
                wanted = {name.strip() for name in args.only.split(",")}
                ops = [operation for operation in ops if operation.name in wanted]
            for server in ["daphne", "uvicorn"] if args.server == "both" else [args.server]:
                measure_on(
                    db, url, ops, folder, argparse.Namespace(**{**vars(args), "server": server})
                )
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def measure_on(
    db: str, url: str, ops: list[Operation], folder: Path, args: argparse.Namespace
) -> None:
    """Serve the same database with ``args.server`` and measure every operation."""
    port, log = free_port(), folder / f"{args.server}.log"
    server = start_server(url, port, log, args)
    try:
        wait_ready(server, port, log)
        api = Api(port)
        api.login()
        print(
            f"{db}: {args.server} on 127.0.0.1:{port}, wrk -t1 -c{args.concurrency}, "
            f"{args.rounds} rounds of {args.seconds:g} s per side, {args.executor} executor"
        )
        for operation in ops:
            print("  " + check(api, operation))
        bench = Bench(port, api, folder, args, server.pid)
        bench.rounds(ops)
        report(db, args.server, ops, bench.results)
    except Exception:
        if log.exists():
            print(f"server log (end):\n{log.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        stop(server)


def main() -> None:
    args = arguments()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install -y wrk")
    extra = ["--seconds", str(args.seconds), "--rounds", str(args.rounds)]
    extra += ["--concurrency", str(args.concurrency)]
    extra += ["--executor", args.executor, "--server", args.server, "--only", args.only]
    if run_each_database(__file__, args, extra):
        return
    measure(args.db, args)


if __name__ == "__main__":
    main()
