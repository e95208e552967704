"""A model profile's limits: requests at once and per minute, in this process
(``LocalLimits``) and shared by every process through Redis (``RedisLimits``).

Runs over a limit wait their turn; none fails for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from goaai.model_limits import RedisLimits
from goaai.runtime.config import ModelProfile
from goaai.runtime.limits import LocalLimits, ModelLimits


def _profile(**limits: int) -> ModelProfile:
    return ModelProfile(name="local", kind="openai", **limits)  # type: ignore[arg-type]


def _most_at_once(limits: ModelLimits, profile: ModelProfile, callers: int) -> int:
    """How many of ``callers`` threads held a place at the same time, at most."""
    lock = threading.Lock()
    inside = peak = 0

    def call() -> None:
        nonlocal inside, peak
        with limits.slot(profile):
            with lock:
                inside += 1
                peak = max(peak, inside)
            time.sleep(0.05)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)
    return peak


def _waits(limits: ModelLimits, profile: ModelProfile, requests: int) -> list[float]:
    """What ``requests`` requests in a row were told to wait, in all."""
    waited: list[float] = []

    def wait(seconds: float) -> None:
        waited.append(seconds)
        # Give up at the first wait: the test only needs to know one was asked for.
        raise _GaveUp

    for _ in range(requests):
        try:
            with limits.slot(profile, wait=wait):
                pass
        except _GaveUp:
            pass
    return waited


class _GaveUp(Exception):
    pass


LIMITS: dict[str, Callable[[str], ModelLimits]] = {
    "local": lambda url: LocalLimits(),
    "redis": lambda url: RedisLimits(url, prefix=f"goaai-test:{time.time_ns()}"),
}


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
def limits(request: pytest.FixtureRequest) -> ModelLimits:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    return LIMITS[request.param](url)


def test_no_more_requests_at_once_than_the_profile_allows(limits):
    assert _most_at_once(limits, _profile(max_concurrency=2), callers=6) == 2


def test_without_a_limit_every_request_goes_at_once(limits):
    assert _most_at_once(limits, _profile(), callers=4) == 4


def test_requests_over_the_minutes_budget_wait_for_the_window_to_move(limits):
    waited = _waits(limits, _profile(requests_per_minute=3), requests=4)

    # Three go at once; the fourth is told to wait, up to a minute.
    assert len(waited) == 1
    assert 0 < waited[0] <= 60


def test_a_request_that_gives_up_waiting_leaves_its_place_to_others(limits):
    profile = _profile(max_concurrency=1)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with limits.slot(profile):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    assert _waits(limits, profile, requests=1)  # full: told to wait, gave up
    release.set()
    thread.join(5)
    # The place is free again, and the one that gave up took none.
    assert _most_at_once(limits, profile, callers=2) == 1
    assert _waits(limits, profile, requests=1) == []


@pytest.mark.redis
def test_the_limit_holds_across_processes_sharing_redis(redis_url):
    prefix = f"goaai-test:{time.time_ns()}"
    # Two separate limiters are what two server processes have.
    first, second = RedisLimits(redis_url, prefix=prefix), RedisLimits(redis_url, prefix=prefix)
    profile = _profile(max_concurrency=1)

    with first.slot(profile):
        assert _waits(second, profile, requests=1)
    assert _waits(second, profile, requests=1) == []


def test_without_redis_the_shared_limits_let_requests_through():
    # Port 9 (discard) refuses: Redis is down. The request goes out rather than fail.
    limits = RedisLimits("redis://127.0.0.1:9/0", prefix="goaai-test:down")

    assert _waits(limits, _profile(max_concurrency=1, requests_per_minute=1), requests=2) == []
