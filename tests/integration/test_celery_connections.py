"""A Celery prefork worker keeps its database connections from one run to the next
(real processes: a worker on Redis, PostgreSQL shared with this test). Celery's
Django fix-up closes them around every task unless told otherwise; each new one
costs a connection set-up, a transaction of its own and every prepared statement."""

from __future__ import annotations

import os
import time

import pytest
from celery import Celery
from django.db import connection

from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Run
from tests.factories import SessionFactory
from tests.integration.celery_support import ROOT, database_url, start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

RUNS = 6
# A backend reports its statistics at most once a second, and when it ends.
STATS_FLUSH = 1.5


def sessions_opened() -> int:
    """Connections made to the test database so far."""
    time.sleep(STATS_FLUSH)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_a_prefork_worker_opens_no_connection_per_run(tmp_path, redis_url, owner):
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"DATABASE_POOL", "GOAAI_EXECUTOR"}},
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "GOAAI_REAPER_INTERVAL": "0",
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "worker.log"
    session = SessionFactory(owner=owner, agent="assistant")
    client = Celery("goaai-test-client", broker=redis_url)
    worker = start_worker(env, log, "--pool=prefork", "--concurrency=1")

    def execute(prompt: str) -> None:
        run = Run.objects.create(session=session, agent="assistant", input=prompt)
        client.send_task("goaai.execute_run", args=[str(run.id)])
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED,
            60,
            f"the worker to complete {prompt!r}",
            log,
        )

    try:
        execute("echo warm up")  # the pool process opens what it keeps
        before = sessions_opened()
        for n in range(RUNS):
            execute(f"calculate {n} + 1")
        after = sessions_opened()
    finally:
        stop_worker(worker)

    # At most one for the whole batch (a second connection of the pool), never one a run.
    assert after - before <= 1, f"{after - before} connections for {RUNS} runs"
