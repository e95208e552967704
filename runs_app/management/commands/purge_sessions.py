"""Retention: delete ended sessions older than a cutoff, with everything under them,
and memory entries whose expiry has passed.

    python manage.py purge_sessions --older-than 90d [--dry-run] [--batch-size 500]
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs_app.sessions import PURGE_COUNT_KINDS, sessions_purge

_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"(\d+)([mhdw])")

_LABELS = {
    "sessions": "sessions",
    "runs": "runs",
    "turns": "turns",
    "tool_calls": "tool calls",
    "events": "events",
    "memory_entries": "session memory entries",
    "memory_revisions": "session memory revisions",
    "history_summaries": "history summaries",
    "session_forks": "fork links",
    "expired_memory_entries": "expired memory entries",
}


def parse_age(text: str) -> dt.timedelta:
    """``90d``, ``12h``, ``30m`` or ``2w`` as a duration; anything else is refused."""
    match = _AGE.fullmatch(text.strip().lower())
    if match is None:
        raise CommandError(
            f"--older-than {text!r}: expected a whole number and a unit, "
            "m (minutes), h (hours), d (days) or w (weeks), e.g. 90d."
        )
    amount = int(match.group(1))
    if amount == 0:
        raise CommandError(f"--older-than {text!r}: the age must be more than zero.")
    return dt.timedelta(**{_UNITS[match.group(2)]: amount})


class Command(BaseCommand):
    help = (
        "Delete ended sessions that ended longer ago than --older-than, with their runs, "
        "turns, tool calls, events and session memory, in batches; purge expired memory."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            required=True,
            help="how long ago a session must have ended: 30m, 12h, 90d or 2w",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would go, delete nothing"
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=500,
            help="sessions deleted per transaction (default 500)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = parse_age(options["older_than"])
        batch_size: int = options["batch_size"]
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        dry_run: bool = options["dry_run"]
        counts = sessions_purge(older_than=older_than, batch_size=batch_size, dry_run=dry_run)

        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb} sessions that ended more than {options['older_than']} ago"
            f"{' (dry run: nothing was deleted)' if dry_run else ''}:"
        )
        width = max(len(label) for label in _LABELS.values())
        for kind in PURGE_COUNT_KINDS:
            self.stdout.write(f"  {_LABELS[kind]:<{width}}  {counts[kind]:>12,}")
