"""Scored runs as a dataset of JSON lines, one per run (see runs_app.datasets), for
evaluation and fine-tuning pipelines: every user's runs that have a score.

    python manage.py export_dataset --out scored.jsonl [--score helpfulness>=4]
        [--score tone=rude] [--agent assistant] [--since 2026-11-01] [--until 2026-12-01]

``--out -`` writes to standard output.
"""

from __future__ import annotations

import datetime as dt
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from runs_app.datasets import DatasetFilter, dataset_lines
from runs_app.models import Run
from runs_app.score_filters import InvalidScoreFilter


def parse_moment(option: str, text: str) -> dt.datetime:
    """A date (``2026-11-29``, its midnight) or an ISO 8601 date and time, in UTC
    when it names no offset."""
    try:
        moment = parse_datetime(text.strip())
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(
            f"{option} {text!r}: expected a date (2026-11-29) or an ISO 8601 date and time."
        )
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    try:
        return moment.astimezone(dt.UTC)
    except OverflowError:
        raise CommandError(f"{option} {text!r}: that moment is out of range.") from None


class Command(BaseCommand):
    help = (
        "Write every run that has a score (optionally: meeting score filters, of one "
        "agent, created in a period) as JSON lines: the run's input, output, tool calls, "
        "scores and labels, one run a line, oldest first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="the file to write, or - for stdout")
        parser.add_argument(
            "--score",
            action="append",
            default=[],
            help="only runs with a score meeting this filter: name, name=value, "
            "name>=number, name<number (e.g. helpfulness>=4, tone=rude); repeatable",
        )
        parser.add_argument("--agent", default="", help="only this agent's runs")
        parser.add_argument("--since", help="only runs created at or after this date or moment")
        parser.add_argument("--until", help="only runs created before this date or moment")

    def handle(self, *args: Any, **options: Any) -> None:
        wanted = DatasetFilter(
            scores=options["score"],
            agent=options["agent"],
            since=parse_moment("--since", options["since"]) if options["since"] else None,
            until=parse_moment("--until", options["until"]) if options["until"] else None,
        )
        try:
            # Refused before the file is opened: a bad filter leaves no empty file.
            runs = wanted.apply(Run.objects.all())
        except InvalidScoreFilter as invalid:
            raise CommandError(f"--score: {invalid}") from None
        with ExitStack() as stack:
            out: TextIO = sys.stdout
            if options["out"] != "-":
                try:
                    out = stack.enter_context(Path(options["out"]).open("w", encoding="utf-8"))
                except OSError as error:
                    raise CommandError(f"--out {options['out']!r}: {error.strerror}.") from None
            written = 0
            for piece in dataset_lines(runs):
                out.write(piece)
                written += piece.count("\n")
        if options["out"] != "-":
            self.stdout.write(f"Wrote {written} scored run(s) to {options['out']}.")
