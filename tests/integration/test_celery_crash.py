"""A worker killed in the middle of a run: the run is taken up by another worker.

Real processes: two Celery workers one after the other on Redis, PostgreSQL shared
with this test. Worker A runs steps 1 and 2 of the ``stepper`` agent and is killed
with SIGKILL while step 2 blocks; worker B takes the run over once A's lease
expires, finds step 1 succeeded (not run again) and step 2 left running by a
non-idempotent tool (marked failed, not run again), runs step 3 and completes.
"""

from __future__ import annotations

import os
import signal

import pytest
from celery import Celery

from goaai.runtime import rt
from goaai.runtime.vocabulary import ErrorKind, RunStatus, ToolCallStatus
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent
from tests.factories import SessionFactory
from tests.integration.celery_support import ROOT, database_url, start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_a_run_survives_its_worker_being_killed(tmp_path, redis_url, owner):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": database_url(),
        "DATABASE_POOL": "0",
        "REDIS_URL": redis_url,
        "GOAAI_AGENTS": "tests.integration.crash_agent.CRASH_AGENT",
        "GOAAI_RUN_LEASE_SECONDS": "3",
        "GOAAI_REAPER_INTERVAL": "1",
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

    interrupted = ToolCall.objects.get(run=run, arguments={"n": 2})
    assert interrupted.status == ToolCallStatus.RUNNING
    (tmp_path / "release").touch()

    worker_b = start_worker(env, log)
    try:
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED,
            60,
            "worker B to complete the run",
            log,
        )
    finally:
        stop_worker(worker_b)

    run.refresh_from_db()
    assert run.output == "steps: ok, internal, ok"
    # Each step's side effect happened exactly once: nothing was executed twice.
    assert sorted(side_effects.read_text().split()) == ["1", "2", "3"]
    calls = {c.arguments["n"]: c for c in ToolCall.objects.filter(run=run)}
    assert calls[1].status == ToolCallStatus.SUCCEEDED
    assert calls[1].attempt == 1
    assert calls[2].status == ToolCallStatus.FAILED
    assert calls[2].error_kind == ErrorKind.INTERNAL
    assert "not retried" in calls[2].error_message
    assert calls[3].status == ToolCallStatus.SUCCEEDED
    assert calls[3].attempt == 1

    events = list(RunEvent.objects.filter(session=session).order_by("seq"))
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1))
    types = [e.type for e in events if e.run_id == run.id]
    assert types.count("run.started") == 1
    resumed = [e for e in events if e.type == "run.resumed"]
    assert len(resumed) == 1
    assert resumed[0].data["reason"] == "worker_lost"
    assert types[-1] == "run.completed"
    assert rt.get_run(run.id).status == RunStatus.COMPLETED
