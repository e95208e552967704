"""Shared set-up for the benchmarks: a database of their own, Django configured on it.

Each benchmark runs on SQLite (a fresh file) or PostgreSQL (a fresh database
``goaai_bench`` on the server ``--postgres`` names) and prints ratios against a
baseline measured in the same run, on the same machine, at the same moment.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/test"


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


def setup_django(db: str, postgres_url: str) -> str:
    """Point Django at a fresh benchmark database, migrate it, and return its URL."""
    if db == "sqlite":
        folder = tempfile.mkdtemp(prefix="goaai-bench-")
        url = f"sqlite:///{folder}/bench.sqlite3"
    else:
        url = create_database(postgres_url, "goaai_bench")
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


def create_database(postgres_url: str, name: str) -> str:
    """A fresh, empty database ``name`` (dropped first if it exists); its URL."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    return database_url(postgres_url, name)


def rows_in(postgres_url: str, name: str, table: str) -> int:
    """How many rows ``table`` of database ``name`` holds; -1 when it does not exist."""
    import psycopg

    try:
        with psycopg.connect(database_url(postgres_url, name)) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    except psycopg.Error:
        return -1
    return int(row[0]) if row else -1


def manage(url: str, *command: str) -> None:
    """``manage.py`` in a child process on the database at ``url`` (a fresh
    connection, its output printed as it comes), DEBUG off."""
    import subprocess

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


def run_each_database(script: str, args: argparse.Namespace, extra: list[str]) -> bool:
    """For ``--db both``: run the script once per database, each in its own process
    (Django is set up once per process). Returns True when it did."""
    if args.db != "both":
        return False
    import subprocess

    for db in ("sqlite", "postgres"):
        subprocess.run(
            [sys.executable, script, "--db", db, "--postgres", args.postgres, *extra],
            check=True,
        )
    return True
