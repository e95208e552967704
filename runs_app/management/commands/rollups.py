"""The dashboard's rollups, checked against the runs or counted again.

    python manage.py rollups --check [--since 2026-11-01] [--until 2026-12-01]
    python manage.py rollups [--since ...] [--until ...]

Without dates: every day that has runs. ``--check`` changes nothing and exits 1
when a rollup differs from a count over the runs.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_date

from runs_app import rollups


def _day(text: str) -> dt.datetime:
    try:
        day = parse_date(text)
    except ValueError:
        day = None
    if day is None:
        raise CommandError(f"{text!r} is not a date (YYYY-MM-DD).")
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


class Command(BaseCommand):
    help = "Check the dashboard's rollups against the runs (--check), or count them again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", type=str, help="the first UTC day (YYYY-MM-DD)")
        parser.add_argument("--until", type=str, help="the day after the last (YYYY-MM-DD)")
        parser.add_argument("--check", action="store_true", help="compare, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        bounds = rollups.everything()
        if bounds is None and not (options["since"] and options["until"]):
            self.stdout.write("No runs: nothing to count.")
            return
        since = _day(options["since"]) if options["since"] else bounds[0]  # type: ignore[index]
        until = _day(options["until"]) if options["until"] else bounds[1]  # type: ignore[index]
        if until <= since:
            raise CommandError("--until must come after --since.")
        if options["check"]:
            found = rollups.differences(since, until)
            for line in found:
                self.stdout.write(line)
            if found:
                raise CommandError(f"{len(found)} rollup row(s) differ from the runs.")
            self.stdout.write("The rollups equal a count over the runs.")
            return
        written = rollups.recount(since, until)
        self.stdout.write(f"Counted again: {written} rollup row(s).")
