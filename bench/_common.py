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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/test"


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL server URL; the benchmark creates and drops goaai_bench on it",
    )
    return parser


def setup_django(db: str, postgres_url: str) -> str:
    """Point Django at a fresh benchmark database, migrate it, and return its URL."""
    if db == "sqlite":
        folder = tempfile.mkdtemp(prefix="goaai-bench-")
        url = f"sqlite:///{folder}/bench.sqlite3"
    else:
        import psycopg

        base, _, _ = postgres_url.rpartition("/")
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS goaai_bench")
            admin.execute("CREATE DATABASE goaai_bench")
        url = f"{base}/goaai_bench"
    os.environ["DATABASE_URL"] = url
    os.environ["DATABASE_POOL"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    # As in production: with DEBUG on, Django records every query it runs.
    os.environ["DEBUG"] = "0"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


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
