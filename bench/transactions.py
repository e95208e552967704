"""Database transactions and SQL statements per scripted run.

Runs of the scripted agent started through goaai's runtime (``rt.run``, or
``rt.start`` and one ``rt.get_run`` once the run ended, for Celery), executed by
the ``inline`` and ``thread`` executors in this process and by a Celery worker.
Counted at three levels: at the database (PostgreSQL's ``pg_stat_database``:
every backend of the benchmark's database), at the driver and at Django's cursors
(bench/_counting.py). Printed per run, for each prompt and each mode.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_POSTGRES,
    ROOT,
    fresh_database,
    private_redis,
    stop_process,
    wait_for_celery_worker,
)
from _counting import Counter, Tally, quiet

PROMPTS = (
    "remember my favourite colour is green",
    "what is my favourite colour?",
    "calculate 2 * (3 + 4)",
)
# A PostgreSQL 15 backend writes its counters to pg_stat_database lazily: at most
# once a second, and a transaction that read no table is held back until one that
# did (or the backend's exit). Before each reading every connection of this process
# runs this (it reads a catalog table so that the flush it forces has something to
# write); it is one transaction each, subtracted. Not prepared: psycopg's preparing
# of a statement outside a transaction is a transaction of its own.
FLUSH = "SELECT pg_stat_force_next_flush() FROM pg_catalog.pg_am LIMIT 1"
# Celery worker processes close their connections after each task (backends flush
# at exit); this long is left for that before a reading.
FLUSH_WAIT = 1.5
WARM_UP_RUNS = 6
RESULT = "RESULT "
WORKER_KEY = "goaai-bench:worker-tally"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--runs", type=int, default=10, help="runs per prompt and mode")
    parser.add_argument(
        "--modes",
        default="inline,thread,celery",
        help="comma-separated: inline, thread (on each database), celery (PostgreSQL)",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL server URL (its database reads the counters); the benchmark "
        "makes a database of its own on it",
    )
    parser.add_argument("--part", choices=["sqlite", "postgres", "celery"], help=argparse.SUPPRESS)
    return parser.parse_args()


# Set-up


def common_environment(url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        # The reaper's periodic look for orphaned runs is not a run's work.
        "GOAAI_REAPER_INTERVAL": "0",
    }


def setup_django(url: str, redis_url: str | None) -> Any:
    """Django in this process on the fresh database, goaai's defaults otherwise
    (PostgreSQL through its connection pool); returns the user who owns the runs."""
    os.environ.update(common_environment(url), DJANGO_SETTINGS_MODULE="goaai.settings")
    os.environ.pop("DATABASE_POOL", None)
    if redis_url:
        os.environ.update(REDIS_URL=redis_url, GOAAI_EXECUTOR="celery")
    else:
        os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return get_user_model().objects.create_user("bench")


def check_sources() -> None:
    """goaai's apps must be this tree's, not a copy installed elsewhere."""
    import goaai
    import sessions_app

    for module in (goaai, sessions_app):
        if not Path(str(module.__file__)).resolve().is_relative_to(ROOT):
            sys.exit(f"{module.__name__} comes from {module.__file__}, not from {ROOT}")


class DatabaseMeter:
    """Transactions of every backend of the benchmark's database, read from another
    database (the measuring connection's own are counted there, not here)."""

    def __init__(self, admin_url: str, name: str) -> None:
        import psycopg

        self.name = name
        with quiet():
            self.connection = psycopg.connect(admin_url, autocommit=True)

    def read(self) -> tuple[int, int]:
        """Transactions, and connections opened (each begins with a transaction of
        its own, which the driver does not see)."""
        time.sleep(FLUSH_WAIT)
        with quiet():
            self.connection.execute("SELECT pg_stat_clear_snapshot()")
            row = self.connection.execute(
                "SELECT xact_commit + xact_rollback, sessions FROM pg_stat_database WHERE datname = %s",
                [self.name],
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def close(self) -> None:
        with quiet():
            self.connection.close()


def flush(raw: Any) -> int:
    with quiet():
        raw.execute(FLUSH, prepare=False)
    return 1


def flush_connections() -> int:
    """Have every PostgreSQL connection of this process write its counters (the
    calling thread's, and the idle ones in Django's pool); how many transactions
    that took."""
    from django.db import connection

    flushed = flush(connection.connection) if connection.connection is not None else 0
    pool = connection.pool
    if pool is None:
        return flushed
    taken = []
    try:
        while pool.get_stats().get("pool_available", 0) > 0:
            taken.append(pool.getconn(timeout=5))
        flushed += sum(flush(raw) for raw in taken)
    finally:
        for raw in taken:
            pool.putconn(raw)
    return flushed


# Celery


def start_worker(url: str, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_POOL"}
    env.update(common_environment(url))
    env.update(
        DJANGO_SETTINGS_MODULE="bench.transactions_settings",
        PYTHONPATH=str(ROOT),
        REDIS_URL=redis_url,
        GOAAI_EXECUTOR="celery",
    )
    command = [sys.executable, "-m", "celery", "-A", "goaai", "worker", "--loglevel", "WARNING"]
    command += ["--concurrency", "2", "--without-gossip", "--without-mingle"]
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)


def worker_tally(redis_url: str) -> Tally:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        stored = client.hgetall(WORKER_KEY)
    finally:
        client.close()
    return Tally(**{key.decode(): int(value) for key, value in stored.items()})


# Runs


class InProcess:
    """``rt.run`` with an executor in this process."""

    def __init__(self, mode: str) -> None:
        from goaai.runtime import rt

        self.rt = rt
        rt.configure(executor=mode)
        # Transactions the benchmark itself ran on the database, subtracted.
        self.own = 0

    def run_all(self, prompt: str, sessions: list[Any]) -> None:
        for session in sessions:
            run = self.rt.run("assistant", prompt, session=session)
            assert run.status == "completed", run

    def flush(self) -> None:
        self.own += flush_connections()

    def close(self) -> None:
        self.rt.reset()


class OnCelery(InProcess):
    """``rt.start`` for every session, then one ``rt.get_run`` each once the worker
    has ended them all. The benchmark watches the runs on a connection of its own
    and subtracts its transactions from the database's count."""

    def __init__(self, url: str) -> None:
        import psycopg

        super().__init__("celery")
        with quiet():
            self.watch = psycopg.connect(url, autocommit=True)

    def run_all(self, prompt: str, sessions: list[Any]) -> None:
        handles = [self.rt.start("assistant", prompt, session=s) for s in sessions]
        self.wait([h.run_id for h in handles])
        for handle in handles:
            run = self.rt.get_run(handle.run_id)
            assert run.status == "completed", run

    def wait(self, run_ids: list[Any]) -> None:
        from runs_app.models import Run

        sql = f"SELECT count(*) FROM {Run._meta.db_table} WHERE id = ANY(%s) AND status IN ('pending', 'running')"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with quiet():
                left = self.watch.execute(sql, [run_ids], prepare=False).fetchone()
            self.own += 1
            if left is not None and left[0] == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("the worker did not end the runs within 300 s")

    def flush(self) -> None:
        super().flush()
        self.own += flush(self.watch)

    def close(self) -> None:
        with quiet():
            self.watch.close()
        super().close()


# Measuring


@dataclass
class Sample:
    tally: Tally
    database: tuple[int, int] | None
    own: int


@dataclass
class Row:
    db: str
    mode: str
    prompt: str
    runs: int
    database_transactions: float | None
    database_connections: float | None
    driver_transactions: float
    driver_statements: float
    django_transactions: float
    django_statements: float


class Part:
    """One database (and, for celery, one worker): every mode, every prompt."""

    def __init__(self, args: argparse.Namespace, url: str, user: Any, counter: Counter) -> None:
        self.args, self.url, self.user, self.counter = args, url, user, counter
        database = url.rpartition("/")[2]
        self.meter = DatabaseMeter(args.postgres, database) if args.part != "sqlite" else None
        self.db = "sqlite" if args.part == "sqlite" else "postgres"

    def sample(self, runner: InProcess) -> Sample:
        database = None
        if self.meter:
            runner.flush()
            database = self.meter.read()
        tally = self.counter.snapshot()
        if self.args.part == "celery":
            tally = tally.plus(worker_tally(self.args.redis))
        return Sample(tally, database, runner.own)

    def row(self, mode: str, prompt: str, before: Sample, after: Sample) -> Row:
        runs = self.args.runs
        delta = after.tally.minus(before.tally)
        transactions = connections = None
        if after.database is not None and before.database is not None:
            own = after.own - before.own
            transactions = (after.database[0] - before.database[0] - own) / runs
            connections = (after.database[1] - before.database[1]) / runs
        per_run = {key: value / runs for key, value in asdict(delta).items()}
        return Row(self.db, mode, prompt, runs, transactions, connections, **per_run)

    def mode(self, mode: str) -> list[Row]:
        from goaai.runtime import rt

        runner = OnCelery(self.url) if mode == "celery" else InProcess(mode)
        try:
            sessions = [rt.create_session(owner=self.user).id for _ in range(self.args.runs)]
            # Connections, prepared statements (psycopg prepares a statement on its
            # fifth use on a connection), caches.
            warm = [rt.create_session(owner=self.user).id for _ in range(WARM_UP_RUNS)]
            for prompt in PROMPTS:
                runner.run_all(prompt, warm)
            rows, before = [], self.sample(runner)
            for prompt in PROMPTS:
                runner.run_all(prompt, sessions)
                after = self.sample(runner)
                rows.append(self.row(mode, prompt, before, after))
                print_row(rows[-1])
                before = after
            return rows
        finally:
            runner.close()

    def close(self) -> None:
        if self.meter:
            self.meter.close()


def print_row(row: Row) -> None:
    database = "     -             -   "
    if row.database_transactions is not None:
        database = f"{row.database_transactions:6.2f} tx {row.database_connections:5.2f} conn"
    print(
        f"  {row.db:8s} {row.mode:6s} {row.prompt[:38]:38s} database {database}  "
        f"driver {row.driver_transactions:6.2f} tx {row.driver_statements:6.2f} st  "
        f"django {row.django_transactions:6.2f} tx {row.django_statements:6.2f} st",
        flush=True,
    )


def measure_part(args: argparse.Namespace, url: str, folder: Path) -> list[Row]:
    celery = args.part == "celery"
    user = setup_django(url, args.redis if celery else None)
    check_sources()
    counter = Counter()
    counter.install()
    part = Part(args, url, user, counter)
    if not celery:
        modes = [m for m in args.modes.split(",") if m in ("inline", "thread")]
        try:
            return [row for mode in modes for row in part.mode(mode)]
        finally:
            part.close()
    log = folder / "worker.log"
    worker = start_worker(url, args.redis, log)
    try:
        wait_for_celery_worker(worker, log)
        return part.mode("celery")
    except Exception:
        print(f"worker log (end):\n{log.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        part.close()
        stop_process(worker)


def run_part(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="goaai-bench-transactions-"))
    # Celery's broker is a redis-server of the benchmark's own.
    redis = private_redis() if args.part == "celery" else contextlib.nullcontext("")
    try:
        with redis as args.redis:
            db = "sqlite" if args.part == "sqlite" else "postgres"
            url = fresh_database(db, args.postgres, "transactions")
            rows = measure_part(args, url, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(RESULT + json.dumps([asdict(row) for row in rows]), flush=True)


# The parts, each in a process of its own


def plan(args: argparse.Namespace) -> list[str]:
    modes = set(args.modes.split(","))
    parts = []
    if args.db in ("sqlite", "both") and modes & {"inline", "thread"}:
        parts.append("sqlite")
    if args.db in ("postgres", "both") and modes & {"inline", "thread"}:
        parts.append("postgres")
    if args.db in ("postgres", "both") and "celery" in modes:
        parts.append("celery")
    return parts


def run_in_process(part: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    command = [sys.executable, __file__, "--part", part, "--runs", str(args.runs)]
    command += ["--modes", args.modes, "--postgres", args.postgres]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    rows: list[dict[str, Any]] = []
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(RESULT):
            rows = json.loads(line[len(RESULT) :])
        else:
            print(line, end="", flush=True)
    if child.wait() != 0:
        raise SystemExit(f"the {part} part failed")
    return rows


COLUMNS = (
    ("db tx", "database_transactions"),
    ("db conn", "database_connections"),
    ("driver tx", "driver_transactions"),
    ("driver st", "driver_statements"),
    ("django tx", "django_transactions"),
    ("django st", "django_statements"),
)


def mean(rows: list[dict[str, Any]], key: str) -> str:
    values = [row[key] for row in rows if row[key] is not None]
    return f"{statistics.mean(values):.2f}" if values else "-"


def summary(rows: list[dict[str, Any]]) -> None:
    print(
        "\nper run, mean of the prompts (tx: transactions, conn: connections opened, st: statements)"
    )
    print(f"  {'database':9s} {'mode':7s}" + "".join(f" {title:>10s}" for title, _ in COLUMNS))
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["db"], row["mode"]), []).append(row)
    for (db, mode), group in groups.items():
        cells = "".join(f" {mean(group, key):>10s}" for _, key in COLUMNS)
        print(f"  {db:9s} {mode:7s}{cells}")


def main() -> None:
    args = arguments()
    if args.part:
        run_part(args)
        return
    print(f"{args.runs} runs per prompt and mode")
    rows = [row for part in plan(args) for row in run_in_process(part, args)]
    summary(rows)


if __name__ == "__main__":
    main()
