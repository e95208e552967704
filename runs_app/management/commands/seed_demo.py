"""Synthetic conversations in bulk, for demos and for measuring the admin at scale.

    python manage.py seed_demo --sessions 500 --runs-per-session 5 --turns-per-run 3 \\
        --calls-per-turn 2 [--users 3] [--seed 1] [--no-events] [--no-memory]

What the rows are, and how they are written: ``runs_app.seeding``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from runs_app.seeding import Plan, Seeder


def _positive(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = (
        "Generate synthetic sessions, runs, turns, tool calls, events and memory in bulk "
        "(COPY on PostgreSQL), for demos and for measuring the admin on large tables."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sessions", type=_positive, default=10)
        parser.add_argument("--runs-per-session", type=_positive, default=5)
        parser.add_argument(
            "--turns-per-run",
            type=_positive,
            default=3,
            help="turns per run; all but the last call tools (default 3)",
        )
        parser.add_argument("--calls-per-turn", type=_positive, default=2)
        parser.add_argument("--users", type=_positive, default=3, help="demo-user-1..N")
        parser.add_argument("--seed", type=int, default=1, help="fixes the content, not the ids")
        parser.add_argument(
            "--days", type=float, default=28.0, help="spread sessions over this many past days"
        )
        parser.add_argument(
            "--active-fraction",
            type=float,
            default=0.1,
            help="share of sessions still active (the others ended); default 0.1",
        )
        parser.add_argument(
            "--events",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="write each session's event log (--no-events is faster, leaves it empty)",
        )
        parser.add_argument(
            "--memory",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="use the memory tools and write session memory with revisions",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["users"] < 1:
            raise CommandError("--users must be at least 1.")
        if options["turns_per_run"] < 1:
            raise CommandError("--turns-per-run must be at least 1.")
        if not 0 <= options["active_fraction"] <= 1:
            raise CommandError("--active-fraction must be between 0 and 1.")
        plan = Plan(
            sessions=options["sessions"],
            runs_per_session=options["runs_per_session"],
            turns_per_run=options["turns_per_run"],
            calls_per_turn=options["calls_per_turn"],
            users=options["users"],
            days=options["days"],
            active_fraction=options["active_fraction"],
            events=options["events"],
            memory=options["memory"],
        )
        started = time.perf_counter()
        verbose = options["verbosity"] >= 2

        def progress(done: int, total: int) -> None:
            if verbose:
                elapsed = time.perf_counter() - started
                self.stdout.write(f"  {done:,}/{total:,} sessions ({elapsed:.1f} s)")

        counts = Seeder(plan, seed=options["seed"]).run(progress)
        elapsed = time.perf_counter() - started
        self.stdout.write(
            f"Seeded on {connection.vendor} in {elapsed:.1f} s "
            f"({counts['toolcall'] / elapsed if elapsed else 0:,.0f} tool calls/s):"
        )
        for label, key in _LABELS:
            self.stdout.write(f"  {label:<18} {counts[key]:>12,}")


_LABELS = (
    ("sessions", "session"),
    ("runs", "run"),
    ("turns", "turn"),
    ("tool calls", "toolcall"),
    ("events", "runevent"),
    ("memory entries", "memoryentry"),
    ("memory revisions", "memoryrevision"),
)
