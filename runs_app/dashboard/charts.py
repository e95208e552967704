"""The dashboard's chart, drawn on the server as SVG (no script, no CDN): the runs
of each hour or day as a bar stacked by how they ended, each part a link to those
runs, with its figure in a tooltip."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from runs_app.dashboard.figures import Bar

WIDTH, HEIGHT = 960, 180
AXIS = 36  # room on the left for the scale, and below for the times
MARGIN = 10  # above the top of the scale, for its figure
# Status to CSS class (colours in runs_app/static/runs_app/dashboard.css).
CLASSES = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed-out",
    "canceled": "canceled",
}


def _scale(largest: int) -> int:
    """A round top for the scale at least ``largest``: 1, 2 or 5 times a power of ten."""
    power = 1
    while True:
        for step in (1, 2, 5):
            if step * power >= largest:
                return step * power
        power *= 10


def _n(number: float) -> str:
    """A coordinate, to a tenth of a pixel."""
    return f"{number:.1f}"


def runs_chart(bars: list[Bar], label_of: Callable[[dt.datetime], str]) -> SafeString:
    """The bars as an SVG drawing; ``label_of`` names a bar's start."""
    if not bars:
        return SafeString("")
    top = _scale(max((bar.total for bar in bars), default=0) or 1)
    plot_w, plot_h = WIDTH - AXIS, HEIGHT - AXIS - MARGIN
    width = plot_w / len(bars)
    parts = []
    every = max(1, len(bars) // 8)  # about eight times along the axis
    for position, bar in enumerate(bars):
        x = AXIS + position * width
        parts.append(_bar(bar, x, width, plot_h, top, label_of(bar.start)))
        if position % every == 0:
            parts.append(
                format_html(
                    '<text class="tick" x="{}" y="{}">{}</text>',
                    _n(x + width / 2),
                    _n(HEIGHT - AXIS / 2),
                    label_of(bar.start),
                )
            )
    scale = format_html_join(
        "",
        '<text class="scale" x="{}" y="{}">{}</text>'
        '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>',
        (
            (AXIS - 4, _n(y + 4), int(top * f), AXIS, WIDTH, _n(y), _n(y))
            for f in (0, 0.5, 1)
            for y in (MARGIN + plot_h * (1 - f),)
        ),
    )
    return format_html(
        '<svg class="runs-chart" viewBox="0 0 {} {}" role="img" '
        'aria-label="Runs by how they ended, over time">{}{}</svg>',
        WIDTH,
        HEIGHT,
        scale,
        SafeString("".join(parts)),
    )


def _bar(bar: Bar, x: float, width: float, plot_h: float, top: int, label: str) -> SafeString:
    """One bar: its ended runs stacked from the bottom, the open ones on top."""
    gap = min(2.0, width * 0.2)
    y = MARGIN + plot_h
    pieces = []
    for segment in bar.segments:
        height = plot_h * segment.runs / top
        y -= height
        pieces.append(
            format_html(
                '<a href="{}"><rect class="{}" x="{}" y="{}" width="{}" '
                'height="{}"><title>{}: {} {}</title></rect></a>',
                segment.url,
                CLASSES.get(segment.status, "other"),
                _n(x + gap / 2),
                _n(y),
                _n(max(width - gap, 1)),
                _n(height),
                label,
                segment.runs,
                segment.status.replace("_", " "),
            )
        )
    if bar.open_runs:
        height = plot_h * bar.open_runs / top
        pieces.append(
            format_html(
                '<rect class="open" x="{}" y="{}" width="{}" height="{}">'
                "<title>{}: {} not ended yet</title></rect>",
                _n(x + gap / 2),
                _n(y - height),
                _n(max(width - gap, 1)),
                _n(height),
                label,
                bar.open_runs,
            )
        )
    return SafeString("".join(pieces))
