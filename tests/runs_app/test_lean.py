"""The lean statements' value handling: every type goes to the driver the way the
ORM stores it, however the handling is looked up."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections import OrderedDict

import pytest

from runs_app import lean


class Colour(enum.StrEnum):
    RED = "red"


class MyUUID(uuid.UUID):
    pass


ID = uuid.UUID("12345678123456781234567812345678")
PARIS = dt.timezone(dt.timedelta(hours=1))


@pytest.mark.parametrize(
    ("value", "on_sqlite", "on_postgres"),
    [
        ("text", "text", "text"),
        (3, 3, 3),
        (None, None, None),
        (Colour.RED, "red", "red"),
        (ID, ID.hex, ID),
        (MyUUID(int=ID.int), ID.hex, MyUUID(int=ID.int)),
        ({"a": [1]}, '{"a": [1]}', '{"a": [1]}'),
        (OrderedDict(a=1), '{"a": 1}', '{"a": 1}'),
        (
            dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
            "2026-01-02 03:04:05.000006",
            dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        ),
        (
            dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=PARIS),
            "2026-01-02 02:04:05",
            dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=PARIS),
        ),
    ],
)
def test_values_are_adapted_as_the_orm_stores_them(value, on_sqlite, on_postgres):
    # Twice: the first time works the type's handling out, the second looks it up.
    for _ in range(2):
        assert lean.adapt(value, sqlite=True) == on_sqlite
        assert lean.adapt(value, sqlite=False) == on_postgres
        assert lean._values((False,), [value], True) == [on_sqlite]


def test_json_placeholders_always_get_json():
    assert lean._values((True, True, True), ["hello", None, {"k": ID}], True) == [
        '"hello"',
        None,
        f'{{"k": "{ID}"}}',
    ]


def test_a_formatted_instant_is_reused_only_for_that_very_datetime():
    instant = dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
    later = dt.datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=dt.UTC)

    assert lean.sqlite_datetime(instant) == "2026-01-02 03:04:05.000006"
    assert lean.sqlite_datetime(later) == "2026-01-02 03:04:05.000007"
    assert lean.sqlite_datetime(instant) == "2026-01-02 03:04:05.000006"


def test_a_value_count_that_does_not_match_the_placeholders_is_refused():
    with pytest.raises(ValueError, match="shorter"):
        lean._values((False, False), [1], True)


def test_str_enums_go_to_the_driver_as_plain_text():
    for sqlite in (True, False):
        adapted = lean.adapt(Colour.RED, sqlite=sqlite)
        assert type(adapted) is str
        assert adapted == "red"
