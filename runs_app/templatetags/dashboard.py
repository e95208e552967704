"""How the dashboard writes its figures: the same durations, costs and token counts
as the lists and the run timeline."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django import template

from goaai.admin_cells import format_duration
from runs_app.timeline.values import format_cost, format_tokens

register = template.Library()
# What a figure without a value shows: an en dash.
NONE = "\u2013"


@register.filter
def ms(value: float | None) -> str:
    """Milliseconds: ``48 ms``, ``1.27 s``, ``3 min 12 s``; a dash without a value."""
    return NONE if value is None else format_duration(value / 1000)


@register.filter
def age(value: dt.timedelta | None) -> str:
    return NONE if value is None else format_duration(value.total_seconds())


@register.filter
def cost(value: Decimal | None) -> str:
    return format_cost(value)


@register.filter
def tokens(value: int) -> str:
    return format_tokens(value)


@register.filter
def percent(value: float | None) -> str:
    """A share as a percentage: ``12.5%``, ``0%``; a dash when there is nothing."""
    if value is None:
        return NONE
    shown = f"{value * 100:.1f}".rstrip("0").rstrip(".")
    return f"{shown}%"


@register.filter
def width(value: float) -> str:
    """A share (0 to 1) as a bar's CSS width."""
    return f"{max(0.0, min(value, 1.0)) * 100:.1f}%"
