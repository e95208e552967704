"""The cells every console list shares: short ids with the whole id a hover and a
copy away, times to the millisecond in the page's zone, durations read at a glance."""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo

import pytest
from django.utils import timezone

from goaai.admin_cells import (
    duration_cell,
    excerpt_cell,
    format_duration,
    format_moment,
    moment_cell,
    one_line,
    short_id,
)

RUN_ID = uuid.UUID("6b5c3a8b-667b-44cd-9c5a-194c2354f96c")


def test_a_short_id_shows_eight_characters_and_carries_the_whole_id():
    cell = str(short_id(RUN_ID, url="/admin/runs_app/run/x/timeline/", what="run id"))
    assert ">6b5c3a8b</a>" in cell
    assert f'title="{RUN_ID}"' in cell
    assert f'data-copy="{RUN_ID}"' in cell
    assert 'href="/admin/runs_app/run/x/timeline/"' in cell
    assert 'aria-label="Copy run id 6b5c3a8b"' in cell
    assert '<button type="button" class="goaai-copy"' in cell


def test_a_short_id_without_a_page_is_code_and_no_id_is_the_empty_mark():
    cell = str(short_id("abcdef0123456789"))
    assert '<code class="goaai-id" title="abcdef0123456789">abcdef01</code>' in cell
    assert short_id(None) is None
    assert short_id("") is None


def test_an_id_is_escaped_like_any_text():
    cell = str(short_id('"><script>x</script>'))
    assert "<script>" not in cell


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.048, "48 ms"),
        (0.0004, "0 ms"),
        (0.999, "999 ms"),
        (1.27, "1.27 s"),
        (59.994, "59.99 s"),
        (192, "3 min 12 s"),
        (7500, "2 h 5 min"),
        (-0.25, "\u2212250 ms"),
        (None, ""),
    ],
)
def test_durations_read_at_a_glance(seconds, shown):
    assert format_duration(seconds) == shown


def test_a_duration_in_milliseconds_and_none():
    assert duration_cell(48) == "48 ms"
    assert duration_cell(1270) == "1.27 s"
    assert duration_cell(None) is None


def test_times_to_the_millisecond_in_the_pages_time_zone():
    moment = dt.datetime(2026, 12, 2, 13, 3, 7, 412_999, tzinfo=dt.UTC)
    with timezone.override(zoneinfo.ZoneInfo("Europe/Paris")):
        assert format_moment(moment) == "2026-12-02 14:03:07.412"
        cell = str(moment_cell(moment))
    assert ">2026-12-02 14:03:07.412</time>" in cell
    assert 'datetime="2026-12-02T13:03:07.412999+00:00"' in cell
    assert 'title="Europe/Paris"' in cell
    assert moment_cell(None) is None


def test_values_on_one_line():
    assert one_line("two\nlines  here") == "two lines here"
    assert one_line({"a": [1, 2]}) == '{"a": [1, 2]}'
    assert one_line("x" * 200, 10) == "x" * 9 + "…"
    cell = str(excerpt_cell("<b>bold</b>\nmove", 8))
    assert "&lt;b&gt;bold…" in cell
    assert 'title="&lt;b&gt;bold&lt;/b&gt; move"' in cell
