"""Admin pages at scale: the run changelist, filtered changelists and the run
timeline, timed at 10k and at 1M tool calls on PostgreSQL.

    .venv/bin/python bench/admin_scale.py [--postgres URL]
        [--tool-calls-small 10000] [--tool-calls-large 1000000] [--repeat 9]

It creates two databases of its own on the server ``--postgres`` names:
``goaai_admin_bench_small``, seeded with ``manage.py seed_demo`` up to the small
size (sessions of 5 runs x 3 turns x 2 tool calls: 20 tool calls and about 130
events a session), and ``goaai_admin_bench``, seeded the same way and then grown
with more sessions on top up to the large size. Both are vacuumed and analysed, as
autovacuum would have done on a live database. With Django's test client logged in
as a staff superuser (DEBUG off, as in production) it then times every page on
both databases in alternation, round after round, so that the load of a shared
machine hits both sizes alike, and prints the median per page and size and the
growth. The timeline is timed on the same run (the same seeded conversation) in
both. Target: each page <= 1.5x slower at the large size than at the small.

``--reuse-large`` keeps ``goaai_admin_bench`` from an earlier run when it already
holds the large size (seeding a million tool calls takes a quarter of an hour on a
busy 2-core machine). ``--explain`` prints each page's slowest queries at the
large size.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import DEFAULT_POSTGRES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LARGE, SMALL = "goaai_admin_bench", "goaai_admin_bench_small"
RUNS_PER_SESSION, TURNS_PER_RUN, CALLS_PER_TURN = 5, 3, 2
CALLS_PER_SESSION = RUNS_PER_SESSION * (TURNS_PER_RUN - 1) * CALLS_PER_TURN
TARGET = 1.5


def database_url(postgres_url: str, name: str) -> str:
    return f"{postgres_url.rpartition('/')[0]}/{name}"


def create_database(postgres_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    return database_url(postgres_url, name)


def tool_calls_in(postgres_url: str, name: str) -> int:
    """How many tool calls database ``name`` holds; -1 when it does not exist."""
    import psycopg

    try:
        with psycopg.connect(database_url(postgres_url, name)) as conn:
            row = conn.execute("SELECT count(*) FROM runs_app_toolcall").fetchone()
    except psycopg.Error:
        return -1
    return int(row[0]) if row else -1


def migrate(url: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"],
        check=True,
        env={**os.environ, "DATABASE_URL": url},
    )


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DATABASE_POOL"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    # As in production: with DEBUG on, Django records every query it runs.
    os.environ["DEBUG"] = "0"
    import django

    django.setup()


def use_database(name: str) -> None:
    """Point Django's connection at database ``name`` (it reconnects on next use)."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name


def seed(url: str, sessions: int, seed: int) -> float:
    """Seed in a child process (a fresh connection, and the output it prints)."""
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "seed_demo",
            "--sessions",
            str(sessions),
            "--runs-per-session",
            str(RUNS_PER_SESSION),
            "--turns-per-run",
            str(TURNS_PER_RUN),
            "--calls-per-turn",
            str(CALLS_PER_TURN),
            "--users",
            "20",
            "--seed",
            str(seed),
        ],
        check=True,
        env={**os.environ, "DATABASE_URL": url, "DEBUG": "0"},
    )
    return time.perf_counter() - started


def vacuum_analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def pages(run_id: object) -> list[tuple[str, str]]:
    """The pages timed, by name, with their URLs."""
    from django.urls import NoReverseMatch, reverse

    try:
        timeline = ("run timeline", reverse("admin:runs_app_run_timeline", args=[run_id]))
    except NoReverseMatch:
        # The timeline is not wired into the admin yet: time the run's page instead.
        timeline = ("run change page", reverse("admin:runs_app_run_change", args=[run_id]))
    return [
        ("run changelist", "/admin/runs_app/run/"),
        ("runs: failed, assistant", "/admin/runs_app/run/?status__exact=failed&agent=assistant"),
        ("runs: label tier:paid", "/admin/runs_app/run/?label=tier%3Apaid"),
        ("tool call changelist", "/admin/runs_app/toolcall/"),
        ("tool calls: calculator", "/admin/runs_app/toolcall/?name=calculator"),
        (
            "tool calls: failed clock",
            "/admin/runs_app/toolcall/?name=clock_now&status__exact=failed",
        ),
        ("event changelist", "/admin/sessions_app/runevent/"),
        timeline,
    ]


def time_alternately(
    targets: dict[str, tuple[object, list[tuple[str, str]]]], repeat: int
) -> dict[str, dict[str, float]]:
    """Median seconds per database and page, timing the databases in turn, one
    request per page per round, in an order that alternates from round to round."""
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
                if round_number:  # round 0 warms up connections, caches and templates
                    samples[db][name].append(elapsed)
    return {
        db: {name: statistics.median(times) for name, times in pages.items()}
        for db, pages in samples.items()
    }


def slowest_queries(client, urls: list[tuple[str, str]]) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for name, url in urls:
        client.get(url)
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        queries = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))
        print(f"\n-- {name}: {len(queries)} queries; slowest:")
        for query in queries[:3]:
            print(f"   {float(query['time']) * 1000:8.1f} ms  {query['sql'][:400]}")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help=f"a PostgreSQL server URL; the benchmark creates {SMALL} and {LARGE} on it",
    )
    parser.add_argument("--tool-calls-small", type=int, default=10_000)
    parser.add_argument("--tool-calls-large", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--explain", action="store_true", help="print each page's slowest queries")
    parser.add_argument(
        "--reuse-large",
        action="store_true",
        help=f"keep {LARGE} from an earlier run if it already holds the large size",
    )
    args = parser.parse_args()
    if args.tool_calls_large <= args.tool_calls_small:
        parser.error("--tool-calls-large must be larger than --tool-calls-small")

    small_sessions = max(1, args.tool_calls_small // CALLS_PER_SESSION)
    large_sessions = max(small_sessions + 1, args.tool_calls_large // CALLS_PER_SESSION)
    large_calls_wanted = large_sessions * CALLS_PER_SESSION
    seeding = {}

    url = create_database(args.postgres, SMALL)
    migrate(url)
    print(f"== {SMALL}: seeding {small_sessions:,} sessions ==")
    seeding[SMALL] = seed(url, small_sessions, seed=1)
    url = database_url(args.postgres, LARGE)
    if args.reuse_large and tool_calls_in(args.postgres, LARGE) >= large_calls_wanted:
        print(f"== {LARGE}: reused ==")
        seeding[LARGE] = 0.0
    else:
        create_database(args.postgres, LARGE)
        migrate(url)
        print(
            f"== {LARGE}: seeding {small_sessions:,} sessions, then {large_sessions - small_sessions:,} more =="
        )
        seeding[LARGE] = seed(url, small_sessions, seed=1)
        seeding[LARGE] += seed(url, large_sessions - small_sessions, seed=2)

    setup_django(url)
    from django.contrib.auth import get_user_model
    from django.test import Client

    from goaai.runtime.vocabulary import RunStatus
    from runs_app.models import Run, ToolCall

    targets: dict[str, tuple[object, list[tuple[str, str]]]] = {}
    calls: dict[str, int] = {}
    the_run = None
    for db in (SMALL, LARGE):
        use_database(db)
        vacuum_analyze()
        calls[db] = ToolCall.objects.count()
        operator, _created = get_user_model().objects.get_or_create(
            username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
        )
        # ALLOWED_HOSTS has no "testserver" with DEBUG off.
        client = Client(HTTP_HOST="localhost")
        client.force_login(operator)
        if the_run is None:
            # The first completed run of the assistant with tool calls in the small
            # data set; the large one holds the same conversation (same seed).
            the_run = (
                Run.objects.filter(status=RunStatus.COMPLETED, agent="assistant")
                .order_by("created_at")
                .values("input", "session__title", "total_tokens")
                .first()
            )
            assert the_run is not None
        run = Run.objects.filter(
            status=RunStatus.COMPLETED,
            input=the_run["input"],
            session__title=the_run["session__title"],
            total_tokens=the_run["total_tokens"],
        ).first()
        assert run is not None, "the timed run is missing from the large data set"
        targets[db] = (client, pages(run.pk))

    medians = time_alternately(targets, args.repeat)
    small, large = medians[SMALL], medians[LARGE]
    urls = targets[LARGE][1]
    print(
        f"\n== admin pages on PostgreSQL, median of {args.repeat} requests per page and size, "
        f"alternating, DEBUG off (seeding: {seeding[SMALL]:.0f} s small, {seeding[LARGE]:.0f} s large) =="
    )
    small_label, large_label = f"{calls[SMALL]:,} calls", f"{calls[LARGE]:,} calls"
    print(f"{'page':<26} {small_label:>15} {large_label:>17} {'growth':>8}  target <= {TARGET}x")
    for name, _ in urls:
        ratio = large[name] / small[name]
        verdict = "met" if ratio <= TARGET else "NOT MET"
        print(
            f"{name:<26} {small[name] * 1000:12.1f} ms {large[name] * 1000:14.1f} ms "
            f"{ratio:7.2f}x  {verdict}"
        )
    if args.explain:
        use_database(LARGE)
        slowest_queries(targets[LARGE][0], urls)


if __name__ == "__main__":
    sys.exit(main())
