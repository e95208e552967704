"""The operators' dashboard at scale: the page for the last 30 days timed at 10k and
at 1M runs on PostgreSQL, and its rollups checked against a recount after a day of
live activity.

    .venv/bin/python bench/dashboard.py [--postgres URL] [--small-runs 10000]
        [--large-runs 1000000] [--users 10] [--repeat 30] [--reuse] [--explain]

It creates two databases of its own on the server ``--postgres`` names,
``goaai_bench_dashboard_small`` and ``goaai_bench_dashboard_large``, each seeded
with ``manage.py seed_demo`` over the last 28 days in the same shape (sessions of
10 runs, each run a turn with one tool call and a turn that answers; no events, no
memory; ``--users`` demo users), so that only the number of runs differs. Both are
``VACUUM ANALYZE``d, as autovacuum would have done on a live database.

With Django's test client logged in as a superuser and ``DEBUG`` off it times the
whole page, rendered, ``/admin/runs_app/run/dashboard/?range=30d``, and the same
filtered to one agent and one user, on both databases in alternation, round after
round (a warm-up round first), and prints the median and p95 per page and size,
the growth, the queries each page issues and where a request's time goes. Targets,
for the 30-day page: at most 1.5x slower at the large size than at the small, and a
median under 300 ms at the large size. Each page is then viewed 20 times on one
connection kept open, as goaai's connection pool keeps them, and the first 5 views
are set against the last 5: a statement the connection has prepared, which
PostgreSQL may plan once for any values, shows there.

Then, on the small database, a day of live activity through goaai's runtime (inline
executor, the offline scripted model): runs that answer, call tools, fail a tool,
wait for an answer that comes or for a stop, sessions ended, deleted and purged.
The rollups must still equal a recount over every run (``rollups.differences``).
The script exits non-zero when a target is missed or the rollups differ.

``--reuse`` keeps a database from an earlier run when it holds the number of runs
asked for (seeding a million runs took 44 minutes on a busy 2-core machine); the small one is seeded again after its day of activity. ``--explain``
prints ``EXPLAIN ANALYZE`` of the large page's slowest queries.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import statistics
import sys
import time
from typing import Any

from _common import (
    configure_django,
    create_database,
    database_url,
    migrate,
    per_call,
    postgres_arguments,
    rows_in,
    seed_demo,
    slowest_queries,
    time_alternately,
    use_database,
    vacuum_analyze,
)

SMALL, LARGE = "goaai_bench_dashboard_small", "goaai_bench_dashboard_large"
RUNS_PER_SESSION = 10
SHAPE = [
    "--runs-per-session",
    str(RUNS_PER_SESSION),
    "--turns-per-run",
    "2",
    "--calls-per-turn",
    "1",
    "--days",
    "28",
    "--no-events",
    "--no-memory",
    "-v",
    "2",  # progress: sessions written, seconds so far
]
GROWTH, LARGE_MEDIAN = 1.5, 0.300
MAIN = "30 days"
# The live day: how many sessions, and what each one's runs are asked.
LIVE_SESSIONS = 60
LIVE_MESSAGES = ("echo hi", "calculate 1/0", "what is 6*7", "what time is it", "echo bye")


def arguments() -> argparse.Namespace:
    parser = postgres_arguments(__doc__, f"{SMALL} and {LARGE}")
    parser.add_argument("--small-runs", type=int, default=10_000)
    parser.add_argument("--large-runs", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10, help="demo users the runs are spread over")
    parser.add_argument("--repeat", type=int, default=30, help="requests per page and size")
    parser.add_argument("--reuse", action="store_true", help="keep a database already seeded")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN the slowest queries")
    args = parser.parse_args()
    if not RUNS_PER_SESSION <= args.small_runs < args.large_runs:
        parser.error(f"give {RUNS_PER_SESSION} <= --small-runs < --large-runs")
    return args


# Seeding


def prepare(args: argparse.Namespace, name: str, runs: int, seed: int) -> float:
    """Database ``name`` seeded with ``runs`` runs (kept from an earlier run with
    ``--reuse`` when it holds that many); returns the seconds seeding took."""
    sessions = runs // RUNS_PER_SESSION
    wanted = sessions * RUNS_PER_SESSION
    if args.reuse and rows_in(args.postgres, name, "runs_app_run") == wanted:
        print(f"== {name}: {wanted:,} runs, kept from an earlier run ==")
        return 0.0
    url = create_database(args.postgres, name, keep=True)
    migrate(url)
    print(f"== {name}: seeding {sessions:,} sessions of {RUNS_PER_SESSION} runs ==", flush=True)
    return seed_demo(url, sessions=sessions, users=args.users, seed=seed, shape=SHAPE)


def rollup_rows() -> str:
    """How many rollup rows there are, per model and span (what the page reads)."""
    from django.db.models import Count

    from runs_app.models import LatencyRollup, RunRollup, ToolRollup, UserLatencyRollup

    parts = []
    for model in (RunRollup, LatencyRollup, UserLatencyRollup, ToolRollup):
        spans = dict(model.objects.values_list("span").annotate(n=Count("*")).order_by())
        parts.append(
            f"{model.__name__} {spans.get('hour', 0):,} hourly / {spans.get('day', 0):,} daily"
        )
    return "; ".join(parts)


# The page


def pages() -> list[tuple[str, str]]:
    from django.urls import reverse

    url = reverse("admin:runs_app_run_dashboard")
    return [
        (MAIN, f"{url}?range=30d"),
        ("30 days, one agent and user", f"{url}?range=30d&agent=assistant&owner=demo-user-1"),
    ]


def operator_client() -> Any:
    """A test client logged in as a superuser of the current database."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    operator, _created = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    # ALLOWED_HOSTS has no "testserver" with DEBUG off.
    client = Client(HTTP_HOST="localhost")
    client.force_login(operator)
    return client


def check_page(client: Any, url: str) -> None:
    """The page answers 200 with every part rendered."""
    response = client.get(url)
    body = response.content.decode()
    assert response.status_code == 200, (url, response.status_code)
    for part in ('id="dashboard"', "runs-chart", "Tools that fail most", "</html>"):
        assert part in body, (url, part)


def check_totals() -> int:
    """The page's figures for the last 30 days equal a count over the runs; returns
    the runs ended in that range."""
    from runs_app import rollups
    from runs_app.dashboard.figures import figures
    from runs_app.dashboard.scope import ScopeForm
    from runs_app.models import Run

    form = ScopeForm({"range": "30d"})
    assert form.is_valid()
    scope = form.scope()
    found = figures(scope).totals.runs
    counted = Run.objects.filter(scope.runs_q(), status__in=rollups.ENDED).count()
    assert found == counted, f"the dashboard says {found:,} runs ended, the runs say {counted:,}"
    return counted


def parts(repeat: int = 5) -> dict[str, float]:
    """Median seconds of the page's two readings, without the request and the
    template: the figures (rollups, open and waiting runs) and the scores."""
    from runs_app.dashboard.figures import figures, scored
    from runs_app.dashboard.scope import ScopeForm

    form = ScopeForm({"range": "30d"})
    assert form.is_valid()
    scope = form.scope()
    return {
        "figures": statistics.median(per_call(lambda: figures(scope), repeat)),
        "scores": statistics.median(per_call(lambda: scored(scope), repeat)),
    }


def p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[math.ceil(len(ordered) * 0.95) - 1]


def report(samples: dict[str, dict[str, list[float]]], sizes: dict[str, int]) -> bool:
    """Print median and p95 per page and size and the growth; True when the
    targets are met."""
    small_label, large_label = f"{sizes[SMALL]:,} runs", f"{sizes[LARGE]:,} runs"
    print(
        f"\n{'page':<30} {small_label + ' p50 / p95':>24} {large_label + ' p50 / p95':>26} growth"
    )
    met = True
    for name, _url in pages():
        small, large = samples[SMALL][name], samples[LARGE][name]
        growth = statistics.median(large) / statistics.median(small)
        line = (
            f"{name:<30} {statistics.median(small) * 1000:10.1f} / {p95(small) * 1000:6.1f} ms "
            f"{statistics.median(large) * 1000:12.1f} / {p95(large) * 1000:6.1f} ms {growth:6.2f}x"
        )
        if name == MAIN:
            fast = statistics.median(large) < LARGE_MEDIAN
            flat = growth <= GROWTH
            line += "  " + ("met" if flat and fast else "NOT MET")
            met = flat and fast
        print(line)
    print(
        f"targets for {MAIN!r}: growth <= {GROWTH}x, median at {sizes[LARGE]:,} runs "
        f"< {LARGE_MEDIAN * 1000:.0f} ms"
    )
    return met


def on_one_connection(client: Any, url: str, views: int = 20) -> tuple[float, float]:
    """Median seconds of the first and of the last 5 of ``views`` requests of ``url``
    on one connection kept open, as goaai's pool keeps them: psycopg prepares a
    statement a connection has run 5 times, and PostgreSQL may then plan it once
    for any values."""
    from django.db import connection

    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = None
    try:
        timings = per_call(lambda: client.get(url), views)
    finally:
        connection.settings_dict["CONN_MAX_AGE"] = 0
        connection.close()
    return statistics.median(timings[:5]), statistics.median(timings[-5:])


def explain_slowest(client: Any, url: str, shown: int = 2) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    slowest = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))[:shown]
    with connection.cursor() as cursor:
        for query in slowest:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query['sql']}")
            print(f"\n-- EXPLAIN {query['sql'][:200]}")
            print("\n".join(f"   {row[0]}" for row in cursor.fetchall()))


# A day of live activity


def live_day(owners: list[Any]) -> dict[str, int]:
    """Runs through goaai's runtime as users make them in a day, and what goes
    with them: answers given, runs stopped, sessions ended, deleted and purged."""
    from django.utils import timezone

    from goaai.runtime import rt
    from runs_app.sessions import session_end, sessions_purge
    from sessions_app.services import session_delete

    rt.reset()
    rt.configure(executor="inline")
    counts = {"runs": 0, "answered": 0, "stopped": 0, "ended": 0, "deleted": 0}
    for number in range(LIVE_SESSIONS):
        owner = owners[number % len(owners)]
        session = rt.create_session(owner=owner, title=f"live {number}")
        for message in LIVE_MESSAGES:
            rt.run("assistant", message, session=session.id)
        waiting = rt.run("assistant", "ask me for my name", session=session.id)
        counts["runs"] += len(LIVE_MESSAGES) + 1
        if number % 3 == 0:
            rt.respond(waiting.id, answer="Ada", user=owner)
            counts["answered"] += 1
        elif number % 3 == 1:
            rt.cancel_run(waiting.id, "canceled by the user", by=owner)
            counts["stopped"] += 1
        if number % 5 == 0:
            session_delete(session_id=session.id)
            counts["deleted"] += 1
        elif number % 5 == 1:
            # Its waiting run, if any, is canceled with it.
            session_end(session_id=session.id)
            counts["ended"] += 1
    # The nightly purge, keeping 27 days: the oldest seeded day goes.
    purged = sessions_purge(older_than=dt.timedelta(days=27), now=timezone.now())
    counts["purged sessions"] = purged["sessions"]
    counts["purged runs"] = purged["runs"]
    rt.reset()
    return counts


def check_rollups() -> bool:
    """A day of live activity on the current database, then the rollups compared
    with a recount over every run; True when they are equal."""
    from django.contrib.auth import get_user_model

    from runs_app import rollups

    owners = list(get_user_model().objects.filter(username__startswith="demo-user-"))
    started = time.perf_counter()
    counts = live_day(owners)
    elapsed = time.perf_counter() - started
    print(f"\n== a day of live activity on {SMALL} ({elapsed:.0f} s) ==")
    print("   " + ", ".join(f"{kind} {n:,}" for kind, n in counts.items()))
    bounds = rollups.everything()
    assert bounds is not None
    started = time.perf_counter()
    found = rollups.differences(*bounds)
    elapsed = time.perf_counter() - started
    print(
        f"   rollups against a recount of {bounds[0]:%Y-%m-%d} to {bounds[1]:%Y-%m-%d} "
        f"({elapsed:.1f} s): {len(found)} rows differ"
    )
    for line in found[:20]:
        print(f"   {line}")
    print(f"   {rollup_rows()}")
    return not found


def main() -> int:
    args = arguments()
    seeding = {
        SMALL: prepare(args, SMALL, args.small_runs, seed=1),
        LARGE: prepare(args, LARGE, args.large_runs, seed=2),
    }
    configure_django(database_url(args.postgres, SMALL))
    from runs_app.models import Run

    targets: dict[str, tuple[Any, list[tuple[str, str]]]] = {}
    sizes: dict[str, int] = {}
    for db in (SMALL, LARGE):
        use_database(db)
        vacuum_analyze()
        sizes[db] = Run.objects.count()
        ended = check_totals()
        client = operator_client()
        for _name, url in pages():
            check_page(client, url)
        targets[db] = (client, pages())
        print(f"== {db}: {sizes[db]:,} runs, {ended:,} ended in the last 30 days ==")
        print(f"   {rollup_rows()}")

    samples = time_alternately(targets, args.repeat)
    print(
        f"\n== the dashboard on PostgreSQL, {args.repeat} requests per page and size, "
        f"alternating, DEBUG off (seeding: {seeding[SMALL]:.0f} s small, "
        f"{seeding[LARGE]:.0f} s large) =="
    )
    met = report(samples, sizes)
    for db in (SMALL, LARGE):
        use_database(db)
        spent = ", ".join(f"{part} {s * 1000:.1f} ms" for part, s in parts().items())
        print(f"\n== {db}: the 30-day page's readings alone: {spent} ==", end="")
        slowest_queries(targets[db][0], targets[db][1])
    print("\n== each page viewed 20 times on one connection: first 5 / last 5, median ==")
    for db in (SMALL, LARGE):
        use_database(db)
        for name, url in targets[db][1]:
            first, last = on_one_connection(targets[db][0], url)
            print(f"   {db:<28} {name:<28} {first * 1000:7.1f} / {last * 1000:7.1f} ms")
    if args.explain:
        use_database(LARGE)
        explain_slowest(targets[LARGE][0], targets[LARGE][1][0][1])

    use_database(SMALL)
    equal = check_rollups()
    if not met:
        print("\nThe dashboard's targets are NOT met.")
    if not equal:
        print("\nThe rollups differ from a recount.")
    return 0 if met and equal else 1


if __name__ == "__main__":
    sys.exit(main())
