"""Work done again when the database refused it for a moment.

A background thread (a webhook sender, the telemetry exporter) that meets a
database restarting, a dropped connection or a locked SQLite file gets a few short
retries, each on a new connection, before it gives the work up: what it was about
to record (a delivery the receiver already has) is not left to be done twice.
Inside a caller's transaction nothing is retried: the transaction is lost with its
connection, and the caller decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import tenacity
from django.db import OperationalError, connection, connections

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Waits before each retry: the whole budget is a little over a second.
RETRY_DELAYS: tuple[float, ...] = (0.05, 0.2, 1.0)


def retrying(call: Callable[[], T], *, what: str, delays: Sequence[float] = RETRY_DELAYS) -> T:
    """``call()``, made again after each wait of ``delays`` while the database
    answers with an ``OperationalError``; the last error is raised as it was.
    Nothing is retried inside a transaction of the default database."""
    if connection.in_atomic_block:
        return call()

    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        logger.info("%s waits for the database (attempt %d)", what, retry_state.attempt_number)
        # The next attempt takes a new connection (a pooled one from its pool).
        connections.close_all()

    retry = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(OperationalError),
        stop=tenacity.stop_after_attempt(len(delays) + 1),
        wait=tenacity.wait_chain(*(tenacity.wait_fixed(delay) for delay in delays)),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retry(call)
