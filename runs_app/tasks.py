"""Celery: the distributed executor and its one task (``celery -A goaai worker``)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from celery.signals import worker_ready

from goaai.celery import app
from goaai.runtime import rt

TASK_NAME = "goaai.execute_run"


@app.task(name=TASK_NAME, acks_late=True, reject_on_worker_lost=True)
def execute_run(run_id: str) -> str | None:
    """Execute one run until it ends or waits for input; its status, or ``None`` if
    the run was not this worker's to execute (finished, or held by a live worker)."""
    result = rt.execute(UUID(run_id))
    return result.status if result else None


@worker_ready.connect
def start_reaper(**_: Any) -> None:
    """A worker that starts takes up the runs dead workers left, then keeps looking."""
    rt.start_background()


class CeleryExecutor:
    """One Celery task per run, acknowledged only once the task has finished
    (``acks_late``), so a message whose worker died is delivered again."""

    def submit(self, run_id: UUID) -> None:
        app.send_task(TASK_NAME, args=[str(run_id)])

    def wait(self, run_id: UUID, timeout: float) -> bool:
        return False
