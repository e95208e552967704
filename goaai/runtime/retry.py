"""Asking a model again after a failure worth retrying.

A provider error the client marks retryable (429, 408, 5xx, Anthropic's
``overloaded``, a connection reset, a stream cut before its end) is retried with
exponential backoff and jitter, never sooner than the provider's ``Retry-After``,
within the agent's budget (:class:`~goaai.runtime.models.ModelSettings`: attempts in
all, and seconds from the first attempt). The schedule is tenacity's; the loop
records each retry as a ``model.retry`` event before it waits.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import tenacity

from goaai.runtime.errors import ModelError
from goaai.runtime.models import ModelSettings

# The first retry waits about this long, each next one about twice as long, up to
# MAX_BACKOFF_SECONDS; jitter spreads runs that failed together.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0

RetryCallback = Callable[[int, ModelError, float], None]


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ModelError) and exc.retryable


class _ProviderWait(tenacity.wait.wait_base):
    """Backoff with jitter; when the provider said how long to wait (``Retry-After``),
    that, with up to a tenth more so that runs told the same moment do not all
    come back at once."""

    def __init__(self) -> None:
        self._backoff = tenacity.wait_exponential_jitter(
            multiplier=FIRST_BACKOFF_SECONDS, max=MAX_BACKOFF_SECONDS, jitter=FIRST_BACKOFF_SECONDS
        )

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None else None
        if isinstance(failure, ModelError) and failure.retry_after is not None:
            return failure.retry_after * (1 + random.random() / 10)  # noqa: S311
        return float(self._backoff(retry_state))


def model_retrying(
    settings: ModelSettings,
    *,
    sleep: Callable[[float], None],
    on_retry: RetryCallback,
) -> tenacity.Retrying:
    """The attempts of one model call: iterate, and make the call inside
    ``with attempt:``. ``on_retry(attempt, error, delay)`` is told of each failed
    attempt that will be retried, before ``sleep(delay)``; the error of the last
    attempt is raised as it was when the budget is spent or it is not retryable."""

    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        # tenacity sleeps only after an attempt that failed with a retryable error.
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None else None
        if isinstance(failure, ModelError):
            on_retry(retry_state.attempt_number, failure, retry_state.upcoming_sleep)

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(_retryable),
        stop=(
            tenacity.stop_after_attempt(max(1, settings.retry_attempts))
            | tenacity.stop_before_delay(settings.retry_seconds)
        ),
        wait=_ProviderWait(),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
