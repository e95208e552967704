"""Shared set-up for the benchmarks: a database of their own, Django configured on it.

Each benchmark runs on SQLite (a fresh file) or PostgreSQL (a fresh database of its
own on the server ``--postgres`` names) and prints ratios against a baseline
measured in the same run, on the same machine, at the same moment.

A benchmark touches nothing it did not make: its PostgreSQL databases have names of
their own (``goaai_bench_<benchmark>_<process id>``, or a fixed name for the seeded
ones that ``--reuse`` keeps) and carry a mark (their comment); a database of the
same name without that mark is never dropped or written to (the benchmark stops
and says so). Databases and files it made are removed when it ends, unless it was
asked to keep them. Redis, where a benchmark needs it, is a redis-server of its
own on a free port, which keeps nothing and is stopped at the end.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The server's maintenance database: the benchmarks only connect to it to create
# and drop their own.
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"
# The comment every database a benchmark creates carries.
MARK = "made by a goaai benchmark; safe to drop"


def arguments(description: str) -> argparse.ArgumentParser:
    parser = postgres_arguments(description, "goaai_bench")
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    return parser


def postgres_arguments(description: str, creates: str) -> argparse.ArgumentParser:
    """A parser with ``--postgres``, the server on which the benchmark creates (and
    drops) the databases ``creates`` names."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help=f"a PostgreSQL server URL; the benchmark creates and drops {creates} on it",
    )
    return parser


def own_name(purpose: str) -> str:
    """A database name of this run's own."""
    return f"goaai_bench_{purpose}_{os.getpid()}"


def fresh_database(db: str, postgres_url: str, purpose: str) -> str:
    """A fresh database of this run's own, removed when it ends: a SQLite file in a
    folder of its own, or a PostgreSQL database on ``postgres_url``'s server."""
    if db == "sqlite":
        folder = tempfile.mkdtemp(prefix=f"goaai-bench-{purpose}-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return f"sqlite:///{folder}/bench.sqlite3"
    return create_database(postgres_url, own_name(purpose))


def setup_django(db: str, postgres_url: str) -> str:
    """Point Django at a fresh benchmark database, migrate it, and return its URL."""
    url = fresh_database(db, postgres_url, Path(sys.argv[0]).stem)
    configure_django(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def configure_django(url: str) -> None:
    """Set Django up on the database at ``url``, as production runs: no pool of
    connections kept across databases, ``DEBUG`` off (with it on, Django records
    every query it runs)."""
    os.environ["DATABASE_URL"] = url
    os.environ["DATABASE_POOL"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ["DEBUG"] = "0"
    import django

    django.setup()


# PostgreSQL databases of a benchmark's own, next to the server's ``--postgres`` one


def database_url(postgres_url: str, name: str) -> str:
    return f"{postgres_url.rpartition('/')[0]}/{name}"


def _mark_of(admin: Any, name: str) -> str | None:
    """The comment of database ``name`` ("" without one); ``None`` if it does not exist."""
    row = admin.execute(
        "SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database"
        " WHERE datname = %s",
        [name],
    ).fetchone()
    return None if row is None else str(row[0])


def create_database(postgres_url: str, name: str, *, keep: bool = False) -> str:
    """A fresh, empty database ``name`` carrying the benchmarks' mark; its URL. One
    that an earlier benchmark left is dropped first; one that no benchmark made stops
    this one. Dropped when the benchmark ends, unless ``keep``."""
    import psycopg

    if postgres_url.rpartition("/")[2].split("?")[0] == name:
        sys.exit(f"--postgres must name another database than {name}")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        mark = _mark_of(admin, name)
        if mark is not None and mark != MARK:
            sys.exit(
                f"A database {name} exists on that server and no goaai benchmark made it: "
                "it is left alone. Drop or rename it yourself, or use another server."
            )
        if mark is not None:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
        admin.execute(f"COMMENT ON DATABASE {name} IS '{MARK}'")
    if not keep:
        atexit.register(drop_database, postgres_url, name)
    return database_url(postgres_url, name)


def drop_database(postgres_url: str, name: str) -> None:
    """Drop database ``name`` if it carries the benchmarks' mark."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        if _mark_of(admin, name) == MARK:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def rows_in(postgres_url: str, name: str, table: str) -> int:
    """How many rows ``table`` of database ``name`` holds; -1 when it does not exist
    or no benchmark made it (it is then not to be reused)."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        if _mark_of(admin, name) != MARK:
            return -1
    try:
        with psycopg.connect(database_url(postgres_url, name)) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    except psycopg.Error:
        return -1
    return int(row[0]) if row else -1


def manage(url: str, *command: str) -> None:
    """``manage.py`` in a child process on the database at ``url`` (a fresh
    connection, its output printed as it comes), DEBUG off."""
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *command],
        check=True,
        env={**os.environ, "DATABASE_URL": url, "DEBUG": "0", "PYTHONUNBUFFERED": "1"},
    )


def seed_demo(url: str, *, sessions: int, users: int, seed: int, shape: list[str]) -> float:
    """``manage.py seed_demo`` of ``sessions`` sessions of ``shape`` (its other
    options) on the database at ``url``; returns the seconds it took."""
    started = time.perf_counter()
    manage(
        url,
        "seed_demo",
        "--sessions",
        str(sessions),
        *shape,
        "--users",
        str(users),
        "--seed",
        str(seed),
    )
    return time.perf_counter() - started


def migrate(url: str) -> None:
    manage(url, "migrate", "-v", "0")


def use_database(name: str) -> None:
    """Point Django's connection at database ``name`` (it reconnects on next use)."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name


def vacuum_analyze() -> None:
    """What autovacuum would have done on a live database after bulk writes."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def time_alternately(
    targets: dict[str, tuple[Any, list[tuple[str, str]]]], repeat: int
) -> dict[str, dict[str, list[float]]]:
    """Seconds each request took, per database and page: ``targets`` maps a database
    to a logged-in test client and its pages (name, URL). The databases are timed in
    turn, one request per page per round, in an order that alternates from round to
    round, so that the load of a shared machine hits them alike; round 0 warms up
    connections, caches and templates and is not counted."""
    samples: dict[str, dict[str, list[float]]] = {
        db: {name: [] for name, _ in urls} for db, (_, urls) in targets.items()
    }
    order = list(targets)
    for round_number in range(repeat + 1):
        for db in order if round_number % 2 else reversed(order):
            client, urls = targets[db]
            use_database(db)
            for name, url in urls:
                started = time.perf_counter()
                response = client.get(url)
                elapsed = time.perf_counter() - started
                assert response.status_code == 200, (db, url, response.status_code)
                if round_number:
                    samples[db][name].append(elapsed)
    return samples


def slowest_queries(client: Any, urls: list[tuple[str, str]], shown: int = 3) -> None:
    """Each page's number of queries and its slowest ones (a request once warm)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for name, url in urls:
        client.get(url)
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        queries = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))
        spent = sum(float(q["time"]) for q in queries) * 1000
        print(f"\n-- {name}: {len(queries)} queries, {spent:.1f} ms in all; slowest:")
        for query in queries[:shown]:
            print(f"   {float(query['time']) * 1000:8.1f} ms  {query['sql'][:400]}")


def per_call(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds each of ``repeat`` calls of ``fn`` took."""
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        timings.append(time.perf_counter() - start)
    return timings


def summary(timings: list[float]) -> str:
    ordered = sorted(timings)
    p50 = statistics.median(ordered)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    return f"median {p50 * 1e6:8.1f} us  p99 {p99 * 1e6:8.1f} us"


def median(timings: list[float]) -> float:
    return statistics.median(timings)


def server_environment(
    url: str, *, drop: frozenset[str] = frozenset(), **extra: str
) -> dict[str, str]:
    """The environment of a goaai server of the benchmark's, on the database at
    ``url``, as production runs it (``DEBUG`` off): this process's, less what would
    point it elsewhere (``REDIS_URL``, ``DATABASE_POOL`` and ``drop``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_POOL", *drop}}
    env.update(
        DJANGO_SETTINGS_MODULE="goaai.settings",
        PYTHONPATH=str(ROOT),
        DATABASE_URL=url,
        DEBUG="0",
        LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of this benchmark's own on a free port, keeping nothing on
    disk, stopped when the block ends; its URL."""
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is needed: apt-get install -y redis-server")
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


def run_each_database(script: str, args: argparse.Namespace, extra: list[str]) -> bool:
    """For ``--db both``: run the script once per database, each in its own process
    (Django is set up once per process). Returns True when it did."""
    if args.db != "both":
        return False
    for db in ("sqlite", "postgres"):
        subprocess.run(
            [sys.executable, script, "--db", db, "--postgres", args.postgres, *extra],
            check=True,
        )
    return True


def stop_process(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Stop a process of the benchmark's: politely, then for good."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_celery_worker(worker: subprocess.Popen[bytes], log: Path) -> None:
    """Until a Celery worker the benchmark started answers a ping (Django is set
    up in this process, with the worker's broker)."""
    from goaai.celery import app

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited:\n{log.read_text()[-3000:]}")
        if app.control.ping(timeout=1.0):
            return
    raise RuntimeError("the worker did not answer within 90 s")
