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

import statistics
import sys

from _common import (
    configure_django,
    create_database,
    database_url,
    migrate,
    postgres_arguments,
    rows_in,
    seed_demo,
    slowest_queries,
    time_alternately,
    use_database,
    vacuum_analyze,
)

LARGE, SMALL = "goaai_admin_bench", "goaai_admin_bench_small"
RUNS_PER_SESSION, TURNS_PER_RUN, CALLS_PER_TURN = 5, 3, 2
CALLS_PER_SESSION = RUNS_PER_SESSION * (TURNS_PER_RUN - 1) * CALLS_PER_TURN
TARGET = 1.5


SHAPE = [
    "--runs-per-session",
    str(RUNS_PER_SESSION),
    "--turns-per-run",
    str(TURNS_PER_RUN),
    "--calls-per-turn",
    str(CALLS_PER_TURN),
]


def seed(url: str, sessions: int, seed: int) -> float:
    return seed_demo(url, sessions=sessions, users=20, seed=seed, shape=SHAPE)


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


def main() -> None:
    parser = postgres_arguments(__doc__, f"{SMALL} and {LARGE}")
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
    if (
        args.reuse_large
        and rows_in(args.postgres, LARGE, "runs_app_toolcall") >= large_calls_wanted
    ):
        print(f"== {LARGE}: reused ==")
        seeding[LARGE] = 0.0
    else:
        create_database(args.postgres, LARGE, keep=True)
        migrate(url)
        print(
            f"== {LARGE}: seeding {small_sessions:,} sessions, then {large_sessions - small_sessions:,} more =="
        )
        seeding[LARGE] = seed(url, small_sessions, seed=1)
        seeding[LARGE] += seed(url, large_sessions - small_sessions, seed=2)

    configure_django(url)
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

    medians = {
        db: {name: statistics.median(times) for name, times in pages.items()}
        for db, pages in time_alternately(targets, args.repeat).items()
    }
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
