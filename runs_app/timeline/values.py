"""Values as the timeline shows them: cut for display with a link to the whole of
them, and durations an operator reads at a glance."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast, Length, Substr
from django.urls import reverse

# One way to write a duration and a one-line value, in the timeline as in every list.
from goaai.admin_cells import format_duration as format_duration
from goaai.admin_cells import one_line as one_line

# A value longer than this is cut in the HTML; the rest loads on demand.
DISPLAY_CAP = 2000
# Values up to this size are read whole from the database; bigger ones are read cut.
LOAD_CAP = 64 * 1024


@dataclass(frozen=True)
class Value:
    """A value as the page shows it: pretty text cut at ``DISPLAY_CAP``, with the URL
    of the whole value when it was cut."""

    text: str
    truncated: bool = False
    size: int = 0
    full_url: str = ""

    @property
    def download_url(self) -> str:
        return f"{self.full_url}{'&' if '?' in self.full_url else '?'}download=1"


def pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def make_value(value: Any, *, full_url: str, known_size: int | None = None) -> Value:
    text = pretty(value)
    size = max(len(text), known_size or 0)
    if len(text) > DISPLAY_CAP:
        return Value(text=text[:DISPLAY_CAP], truncated=True, size=size, full_url=full_url)
    return Value(
        text=text,
        truncated=bool(known_size and known_size > LOAD_CAP),
        size=size,
        full_url=full_url,
    )


def value_from_head(head: str | None, size: int | None, *, full_url: str) -> Value:
    """A JSON value read cut in SQL (``head`` is its first ``LOAD_CAP`` characters)."""
    if head is None:
        return Value(text="null", size=4, full_url=full_url)
    size = size or len(head)
    if size <= LOAD_CAP:
        try:
            return make_value(json.loads(head), full_url=full_url)
        except ValueError:
            pass
    return Value(text=head[:DISPLAY_CAP], truncated=True, size=size, full_url=full_url)


def json_head(name: str) -> Substr:
    """The first ``LOAD_CAP`` characters of a JSON column's text."""
    return Substr(Cast(name, output_field=TextField()), 1, LOAD_CAP)


def json_size(name: str) -> Length:
    return Length(Cast(name, output_field=TextField()))


def payload_url(kind: str, object_id: object, field_name: str = "") -> str:
    """Where the whole of a value loads from (the timeline's payload view)."""
    url = reverse("admin:runs_app_timeline_payload", args=[kind, str(object_id)])
    return f"{url}?field={field_name}" if field_name else url


def format_cost(cost: Decimal | None) -> str:
    """A cost in US dollars an operator reads at a glance: $12.35, $0.0123, $0.00012
    (two significant digits below a cent), $0; "unknown" without a price."""
    if cost is None:
        return "unknown"
    if cost == 0:
        return "$0"
    amount = abs(cost)
    if amount >= 1:
        places = Decimal("0.01")
    elif amount >= Decimal("0.01"):
        places = Decimal("0.0001")
    else:
        # Two significant digits: the exponent of the first one, one place further.
        places = Decimal(1).scaleb(amount.adjusted() - 1)
    sign = "\u2212" if cost < 0 else ""
    return f"{sign}${format(amount.quantize(places, rounding=ROUND_HALF_UP), 'f')}"


def format_tokens(count: int) -> str:
    """A token count with thousands separated: 12,345."""
    return f"{count:,}"


# Times


def format_elapsed(moment: dt.datetime, origin: dt.datetime | None) -> str:
    if origin is None:
        return ""
    delta = (moment - origin).total_seconds()
    if delta < 0:
        return format_duration(delta)
    return "+" + format_duration(delta)


def seconds_between(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()
