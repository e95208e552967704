"""Redis goes away and comes back: the broker, the cache and the channel layer with it.

Each test has a Redis server of its own (``redis_server``), stopped and started
again on the same port; it saves nothing, so it comes back empty, as a Redis
without persistence does after a restart. Runs are recorded in the database,
which stays up throughout.

- A worker executing a run when Redis goes away keeps executing it, reconnects
  once Redis is back, finishes the run and takes new ones (a real Celery worker
  with the prefork pool, as deployments run it, on PostgreSQL).
- Every server and worker looks for runs without a worker; a run waiting for one
  is put on the queue once per lease period however often they look, and however
  many of them do (a run that changed since, such as one answered, at once).
- Starting a run while Redis is away is a 503 with Retry-After, never a 500: with
  nothing written when the rate limit counters are unreachable, and with a pending
  run that is queued once Redis is back when only the queue is.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator

import pytest
from celery import Celery
from django.core.cache import cache
from rest_framework.test import APIClient

from goaai.runtime import rt
from goaai.runtime.types import ToolCallRequest
from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Run
from runs_app.tasks import TASK_NAME, CeleryExecutor
from sessions_app.services import api_token_create
from tests.factories import SessionFactory
from tests.integration.celery_support import (
    ROOT,
    RedisServer,
    database_url,
    start_worker,
    stop_worker,
    wait_for,
)
from tests.statement_tally import tallying

QUEUE = "celery"  # the Redis list Celery's default queue is


def _worker_env(redis_url: str, crash_dir: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": database_url(),
        "DATABASE_POOL": "0",
        "REDIS_URL": redis_url,
        "GOAAI_AGENTS": "tests.integration.crash_agent.CRASH_AGENT",
        "GOAAI_RUN_LEASE_SECONDS": "3",
        "GOAAI_REAPER_INTERVAL": "1",
        "GOAAI_CRASH_DIR": crash_dir,
        "PYTHONPATH": str(ROOT),
    }


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_survives_redis_restarting_while_it_executes_a_run(
    tmp_path, redis_server: RedisServer, owner
):
    log = tmp_path / "worker.log"
    side_effects = tmp_path / "side_effects"
    client = Celery("goaai-test-client", broker=redis_server.url)
    session = SessionFactory(owner=owner, agent="stepper")
    run = Run.objects.create(session=session, agent="stepper", input="do the job")
    # The pool deployments use: its main process waits on Redis while a child
    # process executes the run.
    worker = start_worker(
        _worker_env(redis_server.url, str(tmp_path)), log, "--pool=prefork", "--concurrency=2"
    )

    def worker_said(text: str, times: int = 1) -> bool:
        return log.read_text().count(text) >= times

    try:
        client.send_task(TASK_NAME, args=[str(run.id)])
        wait_for(
            lambda: side_effects.exists() and side_effects.read_text().split() == ["1", "2"],
            60,
            "the worker to start step 2",
            log,
        )

        redis_server.stop()
        wait_for(lambda: worker_said("Connection to broker lost"), 20, "the lost broker", log)
        # The worker used to exit here, putting the run's task back through a
        # connection it had just closed.
        wait_for(lambda: worker_said("Cannot connect to redis"), 20, "a reconnect attempt", log)
        assert worker.poll() is None, log.read_text()[-6000:]

        redis_server.start()
        wait_for(lambda: worker_said("Connected to redis", times=2), 30, "the reconnect", log)
        (tmp_path / "release").touch()
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED,
            30,
            "the run to complete",
            log,
        )
        # ... or here, acknowledging the finished task through that connection.
        wait_for(lambda: worker_said("succeeded"), 10, "the task's end", log)
        assert worker.poll() is None, log.read_text()[-6000:]

        # And it takes new runs.
        chat = SessionFactory(owner=owner)
        later = Run.objects.create(session=chat, agent="assistant", input="hi")
        client.send_task(TASK_NAME, args=[str(later.id)])
        wait_for(
            lambda: Run.objects.get(pk=later.pk).status == RunStatus.COMPLETED,
            30,
            "the worker to take a run after the restart",
            log,
        )
        assert worker.poll() is None, log.read_text()[-6000:]
    finally:
        stop_worker(worker)
        client.close()

    run.refresh_from_db()
    assert run.output == "steps: ok, ok, ok"
    # Each step ran once: the run was neither interrupted nor executed twice.
    assert side_effects.read_text().split() == ["1", "2", "3"]
    assert "Unrecoverable error" not in log.read_text()


@pytest.fixture
def celery_runtime(redis_server: RedisServer) -> Iterator[Celery]:
    """The runtime handing runs to Celery on the test's Redis; the Celery client."""
    client = Celery("goaai-test-client", broker=redis_server.url)
    rt.reset()
    rt.configure(executor=CeleryExecutor(client))
    yield client
    rt.reset()
    client.close()


def _age(run: Run, seconds: float, *fields: str) -> None:
    """Make the run's ``fields`` (its creation and last change by default) look
    ``seconds`` older."""
    run.refresh_from_db()
    names = fields or ("created_at", "updated_at")
    Run.objects.filter(pk=run.pk).update(
        **{name: getattr(run, name) - dt.timedelta(seconds=seconds) for name in names}
    )


@pytest.mark.django_db(transaction=True)
def test_a_new_run_is_recorded_as_queued_in_the_step_that_creates_it(
    redis_server: RedisServer, celery_runtime: Celery, owner
):
    queue = redis_server.client()
    session = SessionFactory(owner=owner)

    with tallying() as tally:
        run_id = rt.start("assistant", "hello", session=session.pk).run_id

    run = Run.objects.get(pk=run_id)
    assert run.queued_at is not None
    assert run.queued_at == run.updated_at
    assert queue.llen(QUEUE) == 1
    assert tally.transactions == 1


@pytest.mark.django_db(transaction=True)
def test_a_run_waiting_for_a_worker_is_queued_once_per_lease_period(
    redis_server: RedisServer, celery_runtime: Celery, owner, settings
):
    queue = redis_server.client()
    lease = settings.GOAAI_RUN_LEASE_SECONDS
    session = SessionFactory(owner=owner)
    handle = rt.start("assistant", "hello", session=session.pk)
    run = Run.objects.get(pk=handle.run_id)
    assert queue.llen(QUEUE) == 1

    # No worker is free: the run waits, long past the grace period for a lost
    # hand-off, and servers look for runs without a worker again and again.
    _age(run, lease / 2)
    for _ in range(3):
        rt.reap()
    assert queue.llen(QUEUE) == 1

    # A lease period after it was queued, it is queued once more (its message may
    # have been lost with a Redis that came back empty) ...
    _age(run, lease + 1, "created_at", "updated_at", "queued_at")
    assert rt.reap() == 1
    for _ in range(3):
        rt.reap()
    assert queue.llen(QUEUE) == 2

    # ... and by one server only, when several found it at the same time.
    _age(run, lease + 1, "created_at", "updated_at", "queued_at")
    seen_by_another_server = rt.store.expired_runs()
    assert seen_by_another_server == [run.pk]
    rt.reap()
    for run_id in seen_by_another_server:
        rt.executor.submit(run_id)
    assert queue.llen(QUEUE) == 3

    # A worker took it since, and died: it is queued again at once.
    assert rt.store.claim_run(run.pk, owner="worker-1", lease_seconds=lease) is not None
    _age(run, lease + 1, "lease_expires_at")
    rt.reap()
    rt.reap()
    assert queue.llen(QUEUE) == 4


@pytest.mark.django_db(transaction=True)
def test_a_run_answered_soon_after_it_was_queued_is_queued_again_at_once(
    redis_server: RedisServer, celery_runtime: Celery, owner
):
    queue = redis_server.client()
    session = SessionFactory(owner=owner)
    run_id = rt.start("assistant", "hello", session=session.pk).run_id
    assert rt.store.claim_run(run_id, owner="worker-1", lease_seconds=60) is not None
    turn = rt.store.start_turn(run_id=run_id, index=0, model="scripted", messages=[])
    call = rt.store.schedule_tool_call(
        turn_id=turn,
        index=0,
        request=ToolCallRequest(id="c1", name="ask_user", arguments={}),
        requires_approval=False,
    )
    rt.store.await_input(run_id=run_id, kind="question", tool_call_id=call, question="Who?")
    assert queue.llen(QUEUE) == 1

    # Within the lease period of its first hand-off, but it changed since.
    rt.respond(run_id, answer="Ada")

    assert queue.llen(QUEUE) == 2


@pytest.fixture
def api(owner) -> APIClient:
    _, raw = api_token_create(user_id=owner.pk, name="tests")
    # A 503 is reported as a server error (got_request_exception), which the test
    # client would raise instead of answering.
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _assert_unavailable(response, code: str) -> None:
    assert response.status_code == 503, response.content
    assert int(response["Retry-After"]) > 0
    body = response.json()
    assert body["type"] == "server_error"
    assert [(e["code"], e["attr"]) for e in body["errors"]] == [(code, None)]
    assert body["errors"][0]["detail"]


@pytest.mark.django_db(transaction=True)
def test_starting_a_run_while_redis_is_away_is_a_503_and_writes_nothing(
    redis_server: RedisServer, celery_runtime: Celery, api, owner, settings
):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_server.url,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    session = SessionFactory(owner=owner)
    redis_server.stop()

    response = api.post(f"/api/v1/sessions/{session.pk}/runs/", {"input": "hi"}, format="json")

    _assert_unavailable(response, "rate_limits_unavailable")
    assert not Run.objects.filter(session=session).exists()


@pytest.mark.django_db(transaction=True)
def test_a_run_started_while_only_the_queue_is_away_is_queued_once_it_is_back(
    redis_server: RedisServer, celery_runtime: Celery, api, owner
):
    cache.clear()  # the rate limit counters, in this process's memory here
    session = SessionFactory(owner=owner)
    redis_server.stop()

    response = api.post(
        f"/api/v1/sessions/{session.pk}/runs/",
        {"input": "hi"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="first-try",
    )

    _assert_unavailable(response, "queue_unavailable")
    run = Run.objects.get(session=session)
    assert run.status == RunStatus.PENDING
    assert str(run.pk) in response.json()["errors"][0]["detail"]
    # A retry with the same key finds the recorded run instead of starting another.
    retry = api.post(
        f"/api/v1/sessions/{session.pk}/runs/",
        {"input": "hi"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="first-try",
    )
    assert retry.status_code == 200
    assert retry.json()["id"] == str(run.pk)

    redis_server.start()
    _age(run, 31)  # past the grace period for a hand-off that was lost
    assert rt.reap() == 1
    assert redis_server.client().llen(QUEUE) == 1
