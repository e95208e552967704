"""``manage.py chat`` with the Celery executor: the run executes in a worker (another
process), its text streams to the terminal over Redis, and Ctrl-C stops it there
(real processes: a worker and the command in a pseudo-terminal, on Redis, with
PostgreSQL shared with this test)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Run
from tests.integration.celery_support import ROOT, database_url, start_worker, stop_worker
from tests.pty_terminal import Terminal

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_a_worker_s_answer_streams_to_the_terminal_and_ctrl_c_stops_it(tmp_path, redis_url, owner):
    env = {
        **{k: v for k, v in os.environ.items() if k != "GOAAI_EXECUTOR"},
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": database_url(),
        "DATABASE_POOL": "0",
        "REDIS_URL": redis_url,
        "GOAAI_REAPER_INTERVAL": "0",
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "worker.log"
    worker = start_worker(env, log)
    term = Terminal([sys.executable, "manage.py", "chat", "--user", "alice"], env=env, cwd=ROOT)
    try:
        term.expect(r"you> ")
        term.type("tell me a story\n")
        term.expect(r"assistant> Once upon a time", timeout=90)
        first = time.monotonic()
        term.expect(r"there lived a small robot")
        run = Run.objects.get(input="tell me a story")
        # The worker executes it, and it is still at work while its words arrive.
        assert run.status == RunStatus.RUNNING
        assert f":{worker.pid}:" in run.lease_owner
        assert len([at for at, _ in term.reads if at >= first]) >= 3

        term.ctrl_c()
        term.expect(r"\nStopped\.\nyou> ", timeout=30)
        run.refresh_from_db()
        assert (run.status, run.cancel_reason) == (RunStatus.CANCELED, "stopped by the user")
        assert "the way you like your tea" not in term.text

        term.ctrl_d()
        assert term.wait() == 0
        # Nothing after the last prompt: no warning, no traceback on the way out.
        assert term.text.endswith("\nStopped.\nyou> \n")
    finally:
        term.close()
        stop_worker(worker)
