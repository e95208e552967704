"""A Celery worker killed mid-run, and another started on the same host: the new
worker tells that the first one's process has ended and takes the run up at once,
long before the run's lease (a minute here, as in production) would have expired.

Real processes, as in test_celery_crash.py: Celery workers on Redis, PostgreSQL
shared with this test, the ``stepper`` agent whose step 2 blocks.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from celery import Celery

from runs_app.models import Run
from sessions_app.models import RunEvent
from tests.factories import SessionFactory
from tests.integration.celery_support import ROOT, database_url, start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 60


def test_a_worker_that_starts_takes_up_at_once_the_runs_of_one_that_died(
    tmp_path, redis_url, owner
):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": database_url(),
        "DATABASE_POOL": "0",
        "REDIS_URL": redis_url,
        "GOAAI_AGENTS": "tests.integration.crash_agent.CRASH_AGENT",
        "GOAAI_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
        "GOAAI_REAPER_INTERVAL": "30",
        "GOAAI_CRASH_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "workers.log"
    side_effects = tmp_path / "side_effects"
    session = SessionFactory(owner=owner, agent="stepper")
    run = Run.objects.create(session=session, agent="stepper", input="do the job")
    client = Celery("goaai-test-client", broker=redis_url)

    worker_a = start_worker(env, log)
    try:
        client.send_task("goaai.execute_run", args=[str(run.id)])
        wait_for(
            lambda: side_effects.exists() and side_effects.read_text().split() == ["1", "2"],
            60,
            "worker A to start step 2",
            log,
        )
        worker_a.send_signal(signal.SIGKILL)
        worker_a.wait(timeout=10)
    finally:
        if worker_a.poll() is None:
            worker_a.kill()
    (tmp_path / "release").touch()
    held = Run.objects.get(pk=run.pk)
    assert held.lease_expires_at is not None

    started = time.monotonic()
    worker_b = start_worker(env, log)
    try:
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == "completed",
            45,
            "worker B to take the run up and complete it",
            log,
        )
    finally:
        stop_worker(worker_b)

    # Taken up before the lease of the dead worker ran out: its process was seen gone.
    assert time.monotonic() - started < LEASE_SECONDS
    (interrupted,) = RunEvent.objects.filter(run=run, type="run.interrupted")
    assert interrupted.data["cause"] == "process_ended"
    assert interrupted.data["worker"] == held.lease_owner
    assert RunEvent.objects.filter(run=run, type="run.resumed").count() == 1
    assert sorted(side_effects.read_text().split()) == ["1", "2", "3"]
