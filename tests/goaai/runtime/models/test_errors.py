"""How long a provider asked us to wait, read from its headers once for both clients."""

from __future__ import annotations

import datetime as dt

import pytest

from goaai.runtime.models.errors import retry_after_seconds, status_error
from goaai.runtime.vocabulary import ErrorKind

NOW = dt.datetime(2026, 3, 2, 14, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({"retry-after-ms": "250"}, 0.25),
        # OpenAI sends both; the milliseconds are the precise one.
        ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
        ({"retry-after": "Mon, 02 Mar 2026 14:00:30 GMT"}, 30.0),
        # A date already past is no wait at all.
        ({"retry-after": "Mon, 02 Mar 2026 13:59:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after-ms": "n/a", "retry-after": "4"}, 4.0),
        ({}, None),
    ],
    ids=[
        "seconds",
        "fraction",
        "milliseconds",
        "milliseconds-first",
        "http-date",
        "past-date",
        "garbage",
        "negative",
        "bad-milliseconds",
        "none",
    ],
)
def test_retry_after_seconds(headers, seconds):
    assert retry_after_seconds(headers, now=NOW) == seconds


def test_an_error_worth_retrying_carries_the_wait():
    error = status_error("p:m", 429, {"error": {"message": "Slow down."}}, retry_after=3.0)

    assert (error.kind, error.retryable, error.retry_after) == ("rate_limited", True, 3.0)
    assert (
        error.message
        == "p:m: the provider is rate limiting us (HTTP 429); retry after 3 s: Slow down."
    )


def test_an_error_not_worth_retrying_carries_no_wait():
    error = status_error("p:m", 400, {"error": {"message": "Bad."}}, retry_after=3.0)

    assert (error.retryable, error.retry_after) == (False, None)
    assert "retry after" not in error.message


def test_a_rate_limit_inside_a_stream_is_worth_retrying_in_each_spelling():
    for code in ("rate_limit_exceeded", "too_many_requests", "rate_limit_error"):
        error = status_error("p:m", 200, {"error": {"type": code, "message": "slow down"}})
        assert (error.kind, error.retryable) == (ErrorKind.RATE_LIMITED, True), code
