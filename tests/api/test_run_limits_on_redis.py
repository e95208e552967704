"""The limits on starting runs with the cache on Redis, as a deployment has it: one
script checks a start against every counter and counts it, in one round trip, and
starts at the same moment cannot share a counter's last place."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from rest_framework.test import APIClient

from runs_app.api import throttles
from runs_app.api.throttles import RunStartThrottled, run_start_throttle
from runs_app.models import Run
from sessions_app.models import ApiToken
from sessions_app.services import api_token_create
from tests.factories import SessionFactory

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


@pytest.fixture
def redis_cache(redis_url, settings) -> redis.Redis:
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
            "OPTIONS": {"pool_class": "goaai.redis_pool.SharedConnectionPool"},
        }
    }
    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "3/min", "run_create_token": "2/min"}
    client = redis.Redis.from_url(redis_url)
    client.config_resetstat()
    return client


def _calls(client: redis.Redis) -> dict[str, int]:
    """The commands Redis ran, by name, not counting those it refused (a script
    it did not have yet)."""
    return {
        name.removeprefix("cmdstat_"): stats["calls"] - stats.get("failed_calls", 0)
        for name, stats in client.info("commandstats").items()
    }


def _start(client: APIClient, session) -> int:
    url = f"/api/v1/sessions/{session.pk}/runs/"
    return client.post(url, {"input": "echo hi"}, format="json").status_code


def test_a_start_is_checked_and_counted_in_one_round_trip(api, owner, redis_cache):
    session = SessionFactory(owner=owner)
    _, raw = api_token_create(user_id=owner.pk, name="second")
    second = APIClient()
    second.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    redis_cache.config_resetstat()

    assert [_start(api, session) for _ in range(3)] == [201, 201, 429]
    # The user's other token, until the user's own limit.
    assert [_start(second, session) for _ in range(2)] == [201, 429]
    assert Run.objects.filter(session=session).count() == 3

    calls = _calls(redis_cache)
    scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
    assert scripts == 5, calls
    assert not {"get", "mget", "set", "mset"} & set(calls), calls


def test_a_refused_start_says_how_long_to_wait_and_counts_nowhere(api, owner, redis_cache):
    session = SessionFactory(owner=owner)
    assert [_start(api, session) for _ in range(2)] == [201, 201]

    refused = api.post(f"/api/v1/sessions/{session.pk}/runs/", {"input": "hi"}, format="json")

    assert refused.status_code == 429
    # Two starts in the last minute, the older just now: a place frees in a minute.
    assert 55 <= int(refused["Retry-After"]) <= 60
    user_key = next(key for key in redis_cache.keys("*run_create_user*"))
    assert redis_cache.zcard(user_key) == 2


def test_a_counter_forgets_starts_older_than_its_window(owner, redis_cache, settings):
    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "2/s", "run_create_token": None}
    run_start_throttle(user=owner, token=None)
    run_start_throttle(user=owner, token=None)
    with pytest.raises(RunStartThrottled):
        run_start_throttle(user=owner, token=None)
    time.sleep(1.1)
    run_start_throttle(user=owner, token=None)


def test_starts_at_the_same_moment_never_share_a_counters_last_place(owner, redis_cache):
    token, _ = api_token_create(user_id=owner.pk, name="burst")
    token = ApiToken.objects.get(pk=token.pk)
    results: list[str] = []
    ready = threading.Barrier(12)

    def start() -> None:
        ready.wait()
        try:
            run_start_throttle(user=owner, token=token)
            results.append("counted")
        except RunStartThrottled:
            results.append("refused")

    threads = [threading.Thread(target=start) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert sorted(results) == ["counted"] * 2 + ["refused"] * 10


def test_the_script_is_loaded_again_into_a_redis_that_lost_it(owner, redis_cache):
    run_start_throttle(user=owner, token=None)
    assert throttles._count_start is not None
    redis_cache.script_flush()
    run_start_throttle(user=owner, token=None)
    run_start_throttle(user=owner, token=None)
    with pytest.raises(RunStartThrottled):
        run_start_throttle(user=owner, token=None)
