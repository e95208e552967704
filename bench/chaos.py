"""Load and chaos: goaai scaled out on one machine, under a steady load of chats,
while a Celery worker, Redis, an ASGI server and the database connections fail.

    .venv/bin/python bench/chaos.py [--minutes 10] [--chats 6] [--lease 20]

It starts the cluster as `make cluster` does (deploy/cluster.py: nginx in front of
2 daphne servers, 2 Celery workers) on a database (goaai_chaos) and a Redis server
of its own (a private redis-server on a free port, so that it can be restarted),
each process restarted 2 s after it exits, as the systemd units in deploy/systemd
do (Restart=always, RestartSec=2). Loopback only. The load (bench/chaos_load.py)
runs for the whole time; the faults come at 15%, 35%, 55% and 75% of it:

- a Celery worker killed (SIGKILL to its process group: the worker and its pool),
- Redis killed and started again 5 s later (its data is gone: it keeps nothing),
- an ASGI server killed (SIGKILL),
- every database connection of the cluster dropped (``pg_terminate_backend``).

It reports runs started / completed / failed / left unfinished, tool calls executed
more than once, events lost or duplicated per subscriber (across reconnects, and
against the stored log), 5xx answers and p50/p99 latency of requests and runs before,
during and after each fault, and how long each took to recover from: from the fault
to the end of the first run started after it that completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy"))
sys.path.insert(0, str(ROOT / "bench"))

import cluster  # noqa: E402
from chaos_load import Chat, Tally, token_for, window  # noqa: E402

USER, PASSWORD = "chaos", "chaos-load-password-1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Supervised:
    """One process of the cluster, started again 2 s after it exits (Restart=always)."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.command, self.env, self.log = name, command, env, log
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.stopping = False
        self.paused = False
        self.thread = threading.Thread(target=self._keep, daemon=True)

    def start(self) -> None:
        self._spawn()
        self.thread.start()

    def _spawn(self) -> None:
        self.process = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _keep(self) -> None:
        while not self.stopping:
            assert self.process is not None
            self.process.wait()
            if self.stopping:
                return
            time.sleep(2)
            while self.paused and not self.stopping:
                time.sleep(0.2)
            if not self.stopping:
                self.restarts += 1
                self._spawn()

    def kill(self) -> None:
        """SIGKILL to the process and everything it started."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)

    def stop(self) -> None:
        self.stopping = True
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class Fault:
    name: str
    at: float = 0.0
    recovered_after: float | None = None


class Cluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir = Path(args.dir)
        self.redis_port = free_port()
        self.listen = f"127.0.0.1:{free_port()}"
        self.database = args.database
        self.processes: dict[str, Supervised] = {}

    @property
    def base(self) -> str:
        return f"http://{self.listen}"

    def start(self) -> None:
        options = cluster.parser().parse_args(
            [
                f"--servers={self.args.servers}",
                f"--workers={self.args.workers}",
                f"--listen={self.listen}",
                f"--port-base={self.args.port_base}",
                f"--database={self.database}",
                f"--redis=redis://127.0.0.1:{self.redis_port}/0",
                f"--dir={self.dir}",
            ]
        )
        cluster.check_ports(options)
        cluster.ensure_database(self.database)
        cluster.fresh_dir(self.dir)
        (self.dir / "logs").mkdir()
        env = cluster.environment(options)
        env.update(
            {
                "GOAAI_RUN_LEASE_SECONDS": str(self.args.lease),
                "GOAAI_REAPER_INTERVAL": str(max(1, self.args.lease // 4)),
                # The load is steady and known: the per-token limit is not under test.
                "GOAAI_RUN_RATE_PER_USER": "100000/min",
                "GOAAI_RUN_RATE_PER_TOKEN": "100000/min",
                "LOG_LEVEL": "WARNING",
            }
        )
        redis = [
            "redis-server",
            "--port",
            str(self.redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self._supervise("redis", redis, env)
        self._wait_port(self.redis_port)
        cluster.manage(env, "migrate", "--noinput", "-v", "0")
        cluster.manage(env, "collectstatic", "--noinput", "-v", "0")
        create_user = (
            "from django.contrib.auth import get_user_model as g; U = g(); "
            f"u = U.objects.filter(username='{USER}').first() or U(username='{USER}'); "
            f"u.set_password('{PASSWORD}'); u.save()"
        )
        cluster.manage(env, "shell", "-c", create_user)
        cluster.render_nginx(options, env)
        prefix = self.dir / "nginx"
        nginx = ["nginx", "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"]
        self._supervise("nginx", nginx, env)
        for n in range(1, self.args.servers + 1):
            self._supervise(f"web.{n}", [str(ROOT / "deploy/bin/goaai-web")], env, instance=n)
        for n in range(1, self.args.workers + 1):
            self._supervise(f"worker.{n}", [str(ROOT / "deploy/bin/goaai-worker")], env, instance=n)
        self._wait_ready()

    def _supervise(
        self, name: str, command: list[str], env: dict[str, str], instance: int | None = None
    ) -> None:
        own = dict(env)
        if instance is not None:
            own["GOAAI_INSTANCE"] = str(instance)
        process = Supervised(name, command, own, self.dir / "logs" / f"{name}.log")
        process.start()
        self.processes[name] = process

    def _wait_port(self, port: int) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise SystemExit(f"Nothing listens on {port}.")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"The cluster never became ready: see {self.dir / 'logs'}.")

    # The faults

    def kill_worker(self) -> None:
        self.processes["worker.1"].kill()

    def restart_redis(self) -> None:
        redis = self.processes["redis"]
        redis.paused = True
        redis.kill()
        time.sleep(5)
        redis.paused = False

    def kill_server(self) -> None:
        self.processes["web.1"].kill()

    def drop_database_connections(self) -> int:
        name = self.database.rsplit("/", 1)[1]
        admin = self.database.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin.replace("postgres://", "postgresql://"), autocommit=True) as c:
            rows = c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            ).fetchall()
        return len(rows)

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes[name].stop()

    # What the database says at the end

    def audit(self) -> dict[str, Any]:
        with psycopg.connect(self.database.replace("postgres://", "postgresql://")) as c:
            statuses = dict(c.execute("SELECT status, count(*) FROM runs_app_run GROUP BY 1"))
            twice = c.execute("SELECT count(*) FROM runs_app_toolcall WHERE attempt > 1").fetchone()
            starts = c.execute(
                "SELECT count(*) FROM (SELECT data->>'tool_call' AS call, count(*) AS n "
                "FROM sessions_app_runevent WHERE type = 'tool_call.started' "
                "GROUP BY 1 HAVING count(*) > 1) AS repeated"
            ).fetchone()
            calls = c.execute("SELECT count(*) FROM runs_app_toolcall").fetchone()
        return {
            "runs_by_status": statuses,
            "tool_calls": calls[0] if calls else 0,
            "tool_calls_attempted_twice": twice[0] if twice else 0,
            "tool_calls_started_twice": starts[0] if starts else 0,
        }


async def load(
    base: str, chats: int, seconds: float, tally: Tally, faults: list[Fault], actions: dict
) -> list[Chat]:
    token = await token_for(base, USER, PASSWORD)
    start = time.monotonic()
    deadline = start + seconds
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
        group = [Chat(base, token, tally, deadline) for _ in range(chats)]
        running = [asyncio.create_task(chat.run(client)) for chat in group]
        for share, fault in zip((0.15, 0.35, 0.55, 0.75), faults, strict=True):
            await asyncio.sleep(max(0.0, start + share * seconds - time.monotonic()))
            fault.at = time.monotonic()
            print(f"{fault.at - start:6.1f} s  fault: {fault.name}", flush=True)
            await asyncio.to_thread(actions[fault.name])
        await asyncio.gather(*running)
        for chat in group:
            await chat.audit(client)
    return group


def recovery(tally: Tally, fault: Fault) -> float | None:
    """From the fault to the end of the first run started after it that completed."""
    ends = [s.at + s.seconds for s in tally.runs if s.ok and s.at >= fault.at]
    return min(ends) - fault.at if ends else None


def report(tally: Tally, faults: list[Fault], audit: dict[str, Any], started: float) -> dict:
    phases = {}
    for fault in faults:
        fault.recovered_after = recovery(tally, fault)
        end = fault.at + (fault.recovered_after or 30)
        spans = {
            "before": (fault.at - 30, fault.at),
            "during": (fault.at, end),
            "after": (end, end + 30),
        }
        phases[fault.name] = {
            "at_s": round(fault.at - started, 1),
            "recovered_after_s": None
            if fault.recovered_after is None
            else round(fault.recovered_after, 2),
            **{
                name: {
                    "requests": window(tally.requests, *span),
                    "runs": window(tally.runs, *span),
                    "503_retry_after": sum(1 for at in tally.status_503 if span[0] <= at < span[1]),
                    "other_5xx": sum(1 for at in tally.status_5xx if span[0] <= at < span[1]),
                }
                for name, span in spans.items()
            },
        }
    return {
        "runs_started": tally.started,
        "runs_completed": tally.completed,
        "runs_failed": tally.failed,
        "runs_unfinished": len(tally.unfinished),
        "events_lost_live": tally.gaps,
        "events_duplicated": tally.duplicates,
        "events_never_delivered": tally.lost,
        "reconnects": tally.reconnects,
        "resyncs": tally.resyncs,
        "503_retry_after": len(tally.status_503),
        "other_5xx": len(tally.status_5xx),
        "throttled": tally.throttled,
        "requests": window(tally.requests, 0, float("inf")),
        "runs": window(tally.runs, 0, float("inf")),
        "faults": phases,
        "database": audit,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--chats", type=int, default=6)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lease", type=int, default=20, help="GOAAI_RUN_LEASE_SECONDS")
    parser.add_argument("--port-base", type=int, default=8300)
    parser.add_argument("--database", default="postgres://postgres@127.0.0.1:5432/goaai_chaos")
    parser.add_argument("--dir", default="/tmp/goaai-chaos")  # noqa: S108
    parser.add_argument("--json", help="also write the report to this file")
    args = parser.parse_args()
    chaos = Cluster(args)
    try:
        chaos.start()
        print(f"cluster ready on {chaos.base}; load for {args.minutes} min", flush=True)
        faults = [
            Fault("worker killed"),
            Fault("Redis restarted"),
            Fault("ASGI server killed"),
            Fault("database connections dropped"),
        ]
        actions = {
            "worker killed": chaos.kill_worker,
            "Redis restarted": chaos.restart_redis,
            "ASGI server killed": chaos.kill_server,
            "database connections dropped": chaos.drop_database_connections,
        }
        tally = Tally()
        started = time.monotonic()
        asyncio.run(load(chaos.base, args.chats, args.minutes * 60, tally, faults, actions))
        result = report(tally, faults, chaos.audit(), started)
        result["restarts"] = {name: p.restarts for name, p in chaos.processes.items()}
    finally:
        chaos.stop()
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
