"""The cells of the operators' lists, one way for each kind of value, so that every
changelist (and the run timeline) shows it alike:

- ids cut to their first eight characters, the whole id on hover and a copy button
  beside it (``sessions_app/js/admin-lists.js`` copies it);
- times to the millisecond, in the viewer's time zone (the one
  ``sessions_app.timezones`` activated for the page): ``2026-12-02 14:03:07.412``;
- durations an operator reads at a glance: ``48 ms``, ``1.27 s``, ``3 min 12 s``;
- values cut to one line, the longer text on hover (the stylesheet ends a cell that
  is still too wide with an ellipsis).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

# How much of an id a list shows: eight hexadecimal digits tell apart the rows a
# page shows, and are what an operator types into the search box's ``=id``.
SHORT_ID = 8
# How much of a value its hover text holds, at most.
TITLE_LIMIT = 500


def short_id(pk: object, *, url: str = "", what: str = "id") -> SafeString | None:
    """``pk`` cut to :data:`SHORT_ID` characters (a link to ``url`` when given), the
    whole of it on hover, and a button that copies the whole of it; ``None`` (the
    list's empty mark) without an id."""
    if pk is None or pk == "":
        return None
    full = str(pk)
    cut = full[:SHORT_ID]
    if url:
        shown = format_html('<a class="goaai-id" href="{}" title="{}">{}</a>', url, full, cut)
    else:
        shown = format_html('<code class="goaai-id" title="{}">{}</code>', full, cut)
    return format_html(
        '<span class="goaai-id-cell">{}<button type="button" class="goaai-copy" data-copy="{}"'
        ' title="Copy the whole {}" aria-label="Copy {} {}"></button></span>',
        shown,
        full,
        what,
        what,
        cut,
    )


# Times


def format_moment(moment: dt.datetime) -> str:
    """``2026-12-02 14:03:07.412``: a moment in the page's time zone, to the
    millisecond (what orders the steps of a run that took less than a second)."""
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d}"


def moment_cell(moment: dt.datetime | None) -> SafeString | None:
    """A moment as a list shows it, with its machine-readable form and the name of
    the time zone it is shown in on hover."""
    if moment is None:
        return None
    return format_html(
        '<time class="goaai-time" datetime="{}" title="{}">{}</time>',
        moment.isoformat(),
        timezone.get_current_timezone_name(),
        format_moment(moment),
    )


def time_column(field: str, description: str) -> Callable[[Any], Any]:
    """A changelist column showing the date-time ``field`` with :func:`moment_cell`,
    sorted by the field (``list_display = [..., time_column("created_at", "Created")]``)."""

    @admin.display(description=description, ordering=field)
    def column(obj: Any) -> SafeString | None:
        return moment_cell(getattr(obj, field))

    column.__name__ = f"{field}_time"
    return column


def format_duration(seconds: float | None) -> str:
    """A duration an operator reads at a glance: 48 ms, 1.27 s, 3 min 12 s, 2 h 5 min."""
    if seconds is None:
        return ""
    sign = "\u2212" if seconds < 0 else ""  # a minus sign, not a hyphen
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{sign}{seconds:.2f} s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{sign}{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def duration_cell(milliseconds: float | None) -> str | None:
    """A duration kept in milliseconds, as :func:`format_duration` writes it."""
    return None if milliseconds is None else format_duration(milliseconds / 1000)


# Values


def one_line(value: Any, limit: int = 120) -> str:
    """A value as one line of at most ``limit`` characters, for a table cell: text
    as it is, anything else as JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt_cell(value: Any, limit: int = 120) -> SafeString:
    """A value cut to one line, more of it on hover."""
    return format_html(
        '<span class="goaai-excerpt" title="{}">{}</span>',
        one_line(value, TITLE_LIMIT),
        one_line(value, limit),
    )
